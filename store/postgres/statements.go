package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statements of Update and Count, prepared by name on each connection that
// runs one (see statements).
const (
	uLock = iota
	uLockRead
	uLockReadAsync
	uLockRead1
	uLockRead1Async
	uWrite
	uWrite1
	uInsert
	uInsert1
	uDelete
	uDelete1
	uAdmit
	cCountOne
	cCountOneAsync
	cRead1
	cCountMany
	cCountManyAsync
	numStatements
)

// stmtSpec is a statement of the store. A statement with wire types has its
// arguments and results in PostgreSQL's binary format, encoded and decoded
// by the store itself (see wire): params gives the types it is prepared
// with, and results the types preparing checks that the server describes.
// The others go through pgx's type map.
type stmtSpec struct {
	sql     string
	params  []uint32
	results []uint32
}

const (
	oBytea = pgtype.ByteaOID
	oText  = pgtype.TextOID
	oInt8  = pgtype.Int8OID
	oTime  = pgtype.TimestamptzOID

	oByteaArray = pgtype.ByteaArrayOID
	oInt8Array  = pgtype.Int8ArrayOID
)

var countManyParams = []uint32{oByteaArray, oText, oInt8Array, oInt8Array, oInt8Array}

var statementSpecs = [numStatements]stmtSpec{
	uLock:           {sql: sqlLock},
	uLockRead:       {sql: sqlLockRead},
	uLockReadAsync:  {sql: sqlLockReadAsync},
	uLockRead1:      {sql: sqlLockRead1, params: []uint32{oBytea}, results: []uint32{oTime, oText, oText, oTime}},
	uLockRead1Async: {sql: sqlLockRead1Async, params: []uint32{oBytea}, results: []uint32{oTime, oText, oText, oTime, oText}},
	uWrite:          {sql: sqlWrite},
	uWrite1:         {sql: sqlWrite1, params: []uint32{oBytea, oText, oText, oTime}, results: []uint32{}},
	uInsert:         {sql: sqlInsert},
	uInsert1:        {sql: sqlInsert1, params: []uint32{oBytea, oText, oText, oTime}, results: []uint32{}},
	uDelete:         {sql: sqlDelete},
	uDelete1:        {sql: sqlDelete1, params: []uint32{oBytea}, results: []uint32{}},
	uAdmit:          {sql: sqlAdmit},
	cCountOne:       {sql: sqlCountOne, params: []uint32{oBytea, oText, oInt8, oInt8, oInt8}, results: []uint32{oInt8, oTime, oTime}},
	cCountOneAsync:  {sql: sqlCountOneAsync, params: []uint32{oBytea, oText, oInt8, oInt8, oInt8}, results: []uint32{oInt8, oTime, oTime}},
	cRead1:          {sql: sqlRead1, params: []uint32{oBytea, oText}, results: []uint32{oTime, oBytea, oText, oTime}},
	cCountMany:      {sql: sqlCountMany, params: countManyParams, results: []uint32{oBytea, oInt8, oTime, oTime}},
	cCountManyAsync: {sql: sqlCountManyAsync, params: countManyParams, results: []uint32{oBytea, oInt8, oTime, oTime}},
}

// stmtsKey names the prepared statements in a connection's CustomData.
const stmtsKey = "github.com/gatecount/gatecount/store/postgres statements"

// errStmtGone is the SQLSTATE of a prepared statement the connection no
// longer has (DEALLOCATE or DISCARD ran on it).
const errStmtGone = "26000"

type preparedStmt struct {
	sd            *pgconn.StatementDescription
	resultFormats []int16
	// fields describes the results as they come: the description's
	// fields, in the formats asked for.
	fields []pgconn.FieldDescription
}

// newPreparedStmt is statement sd, whose results come in resultFormats: one
// format for every field, or one per field, as a Bind gives them.
func newPreparedStmt(sd *pgconn.StatementDescription, resultFormats []int16) preparedStmt {
	fields := slices.Clone(sd.Fields)
	for i := range fields {
		fields[i].Format = resultFormats[min(i, len(resultFormats)-1)]
	}
	return preparedStmt{sd: sd, resultFormats: resultFormats, fields: fields}
}

// preparedStmts are the store's statements as prepared on one connection.
type preparedStmts struct {
	s [numStatements]preparedStmt
	// replanAbove is the estimate of live entries above which the
	// statements are prepared again (see Backend.statements).
	replanAbove int64
}

func stmtName(i int) string { return "gatecount_" + strconv.Itoa(i) }

// binaryFormat asks for every parameter or result in binary format.
var binaryFormat = []int16{pgtype.BinaryFormatCode}

// statements returns the store's statements, prepared on c: the first call
// on a connection prepares them all in one round trip (closing any of the
// same names first, so a half-done earlier attempt does not get in the
// way); later calls find them in the connection's CustomData.
//
// They are prepared again once the table has grown well past its size when
// they were prepared (more than four times the estimate of live entries
// then, plus 1,024). PostgreSQL settles on one plan for a prepared statement
// after its first few runs, and keeps it: a point lookup planned while the
// table is nearly empty is a sequential scan, which it then stays as the
// table grows, until the table's statistics change (autovacuum's ANALYZE,
// which a server may not run). Prepared again, on a table of more than a few
// pages, the lookups use the primary key. A connection prepares its
// statements again a handful of times at most.
func (b *Backend) statements(ctx context.Context, c *pgx.Conn) (*preparedStmts, error) {
	pc := c.PgConn()
	est := b.estimate.Load()
	if st, ok := pc.CustomData()[stmtsKey].(*preparedStmts); ok && est <= st.replanAbove {
		return st, nil
	}
	p := pc.StartPipeline(ctx)
	for i, s := range statementSpecs {
		p.SendDeallocate(stmtName(i))
		p.SendPrepare(stmtName(i), s.sql, s.params)
	}
	st := &preparedStmts{replanAbove: 4*max(est, 0) + 1024}
	err := func() error {
		if err := p.Sync(); err != nil {
			return err
		}
		for i, spec := range statementSpecs {
			if res, err := p.GetResults(); err != nil {
				return err
			} else if _, ok := res.(*pgconn.CloseComplete); !ok {
				return fmt.Errorf("close statement %d: got %T", i, res)
			}
			res, err := p.GetResults()
			if err != nil {
				return err
			}
			sd, ok := res.(*pgconn.StatementDescription)
			if !ok {
				return fmt.Errorf("prepare statement %d: got %T", i, res)
			}
			// The pipeline's description leaves out what was sent.
			sd.Name, sd.SQL = stmtName(i), spec.sql
			if spec.results != nil {
				if err := checkWireTypes(sd, spec); err != nil {
					return fmt.Errorf("prepare statement %d: %w", i, err)
				}
				st.s[i] = newPreparedStmt(sd, binaryFormat)
				continue
			}
			rf := make([]int16, len(sd.Fields))
			for j, f := range sd.Fields {
				rf[j] = c.TypeMap().FormatCodeForOID(f.DataTypeOID)
			}
			st.s[i] = newPreparedStmt(sd, rf)
		}
		res, err := p.GetResults()
		if err != nil {
			return err
		}
		if _, ok := res.(*pgconn.PipelineSync); !ok {
			return fmt.Errorf("prepare: got %T, want the end of the pipeline", res)
		}
		return nil
	}()
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	pc.CustomData()[stmtsKey] = st
	return st, nil
}

// checkWireTypes reports an error unless the server's description of a
// prepared statement has the result types its spec decodes. (Its parameters
// have the types the spec declared when preparing it.)
func checkWireTypes(sd *pgconn.StatementDescription, spec stmtSpec) error {
	got := make([]uint32, len(sd.Fields))
	for i, f := range sd.Fields {
		got[i] = f.DataTypeOID
	}
	if !slices.Equal(got, spec.results) {
		return fmt.Errorf("result types %v, want %v", got, spec.results)
	}
	return nil
}

// wire encodes the arguments of a statement with wire types into one
// buffer, in PostgreSQL's binary format: bytea and text as their bytes,
// bigint as 8 bytes big-endian, timestamptz as microseconds since
// 2000-01-01 UTC, 8 bytes big-endian. Its methods return w, to chain.
type wire struct {
	buf  []byte
	ends []int
	vals [][]byte

	// Room for the arguments of the store's statements, so that encoding
	// them allocates nothing more.
	bufRoom  [128]byte
	endsRoom [8]int
	valsRoom [8][]byte
}

// reset empties w for the next statement's arguments.
func (w *wire) reset() *wire {
	if w.buf == nil {
		w.buf, w.ends, w.vals = w.bufRoom[:0], w.endsRoom[:0], w.valsRoom[:0]
	}
	w.buf, w.ends = w.buf[:0], w.ends[:0]
	return w
}

func (w *wire) bytes(b []byte) *wire { return w.end(append(w.buf, b...)) }

func (w *wire) text(s string) *wire { return w.end(append(w.buf, s...)) }

func (w *wire) int8(v int64) *wire { return w.end(binary.BigEndian.AppendUint64(w.buf, uint64(v))) }

// byteaArray encodes a one-dimensional bytea[] without nulls, of the n
// values at(0) to at(n-1).
func (w *wire) byteaArray(n int, at func(i int) []byte) *wire {
	buf := w.arrayHeader(oBytea, n)
	for i := range n {
		v := at(i)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
		buf = append(buf, v...)
	}
	return w.end(buf)
}

// int8Array encodes a one-dimensional bigint[] without nulls, of the n
// values at(0) to at(n-1).
func (w *wire) int8Array(n int, at func(i int) int64) *wire {
	buf := w.arrayHeader(oInt8, n)
	for i := range n {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(at(i)))
	}
	return w.end(buf)
}

// arrayHeader appends the header of a one-dimensional array of n elements
// of type elem, without nulls, indexed from 1, and returns the buffer.
func (w *wire) arrayHeader(elem uint32, n int) []byte {
	buf := binary.BigEndian.AppendUint32(w.buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0)    // no nulls
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

// time encodes t at microsecond precision.
func (w *wire) time(t time.Time) *wire { return w.int8(t.UnixMicro() - pgEpochMicros) }

func (w *wire) end(buf []byte) *wire {
	w.buf = buf
	w.ends = append(w.ends, len(buf))
	return w
}

// values returns the encoded arguments, in order, valid until the next
// reset.
func (w *wire) values() [][]byte {
	w.vals = w.vals[:0]
	start := 0
	for _, end := range w.ends {
		w.vals = append(w.vals, w.buf[start:end:end])
		start = end
	}
	return w.vals
}

// pgEpochMicros is PostgreSQL's epoch, 2000-01-01 UTC, in Unix microseconds.
const pgEpochMicros = 946_684_800_000_000

// wireInt8 decodes a bigint in binary format.
func wireInt8(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("bigint of %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// wireMicros decodes a finite timestamptz in binary format to Unix
// microseconds.
func wireMicros(b []byte) (int64, error) {
	us, err := wireInt8(b)
	if err != nil {
		return 0, fmt.Errorf("timestamptz: %w", err)
	}
	if us == math.MaxInt64 || us == math.MinInt64 {
		return 0, errors.New("timestamptz is infinite")
	}
	return us + pgEpochMicros, nil
}

// floorDiv is a / b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// acquire takes a connection of the pool for one call, with the store's
// statements prepared on it (see statements), and bounds the call's I/O on
// it by ctx's deadline, as the connection's own read and write deadline. It
// returns the context for the call's statements: ctx without its
// cancellation, so that nothing watches it (pgx's watch of a context costs
// an allocating registration per round trip, which showed as a tenth of the
// throughput of a one-statement call). A call whose deadline passes
// mid-round-trip fails with an error matching context.DeadlineExceeded, and
// its connection is closed, which rolls back what it had begun. A call
// whose context is already done does not start; one cancelled (before its
// deadline) while it runs is not interrupted, and ends when its round trips
// do. Without a deadline the call keeps ctx, and its reads watch it. The
// caller gives the connection back with release.
func (b *Backend) acquire(ctx context.Context) (c *pgxpool.Conn, io context.Context, st *preparedStmts, err error) {
	c, err = b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("acquire a connection: %w", err)
	}
	io = ctx
	if d, ok := ctx.Deadline(); ok {
		if err := ctx.Err(); err != nil {
			c.Release()
			return nil, nil, nil, err
		}
		if err := c.Conn().PgConn().Conn().SetDeadline(d); err != nil {
			c.Release()
			return nil, nil, nil, fmt.Errorf("set the connection's deadline: %w", err)
		}
		io = context.WithoutCancel(ctx)
	}
	if st, err = b.statements(io, c.Conn()); err != nil {
		return nil, nil, nil, release(c, fmt.Errorf("prepare: %w", err))
	}
	return c, io, st, nil
}

// release gives back a connection of acquire, after the call that used it
// ended with err: it clears the connection's deadline, drops its statements
// if err says it lost one (to DEALLOCATE or DISCARD, so that the next call
// prepares them again), and returns the connection to the pool (which
// destroys it if the call left it mid-transaction or broken). It returns
// err, marked as matching context.DeadlineExceeded when the connection's
// deadline ended it.
func release(c *pgxpool.Conn, err error) error {
	pc := c.Conn().PgConn()
	_ = pc.Conn().SetDeadline(time.Time{})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == errStmtGone {
		delete(pc.CustomData(), stmtsKey)
	}
	c.Release()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// ErrPoolSetting is matched by the error New returns when a setting of the
// pool's connections cannot work; the error names the setting.
var ErrPoolSetting = errors.New("postgres: a setting of the pool cannot work")

// execMode is how the store runs its statements, chosen by the pool's own
// pgx DefaultQueryExecMode (see "Statements" in DESIGN.md).
type execMode int

const (
	// modeNamed (cache_statement) prepares the store's statements by name
	// on each connection and keeps them, as pgx's statement cache keeps its
	// own.
	modeNamed execMode = iota
	// modeUnnamed (exec, cache_describe, describe_exec) sends each
	// statement as an unnamed statement, parsed, bound and run in one round
	// trip, with the parameter types the store declares.
	modeUnnamed
	// modeSimple (simple_protocol) sends statements in the simple query
	// protocol, their arguments written into them by pgx.
	modeSimple
)

// modeNames are the names of pgx's modes in a connection string.
var modeNames = map[pgx.QueryExecMode]string{
	pgx.QueryExecModeCacheStatement: "cache_statement",
	pgx.QueryExecModeCacheDescribe:  "cache_describe",
	pgx.QueryExecModeDescribeExec:   "describe_exec",
	pgx.QueryExecModeExec:           "exec",
	pgx.QueryExecModeSimpleProtocol: "simple_protocol",
}

// execModeOf returns how the store runs statements on connections made by
// cfg, or an error matching ErrPoolSetting, naming the setting, when pgx
// could run no query with cfg's.
func execModeOf(cfg *pgx.ConnConfig) (execMode, error) {
	switch m := cfg.DefaultQueryExecMode; m {
	case pgx.QueryExecModeCacheStatement:
		if cfg.StatementCacheCapacity <= 0 {
			return 0, fmt.Errorf("%w: default_query_exec_mode=cache_statement with statement_cache_capacity=%d: pgx runs no query without its statement cache; raise statement_cache_capacity, or set default_query_exec_mode=exec", ErrPoolSetting, cfg.StatementCacheCapacity)
		}
		return modeNamed, nil
	case pgx.QueryExecModeCacheDescribe:
		if cfg.DescriptionCacheCapacity <= 0 {
			return 0, fmt.Errorf("%w: default_query_exec_mode=cache_describe with description_cache_capacity=%d: pgx runs no query without its description cache; raise description_cache_capacity, or set default_query_exec_mode=exec", ErrPoolSetting, cfg.DescriptionCacheCapacity)
		}
		return modeUnnamed, nil
	case pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec:
		return modeUnnamed, nil
	case pgx.QueryExecModeSimpleProtocol:
		return modeSimple, nil
	default:
		return 0, fmt.Errorf("%w: default_query_exec_mode %d is none of %s, %s, %s, %s, %s", ErrPoolSetting, m,
			modeNames[pgx.QueryExecModeCacheStatement], modeNames[pgx.QueryExecModeCacheDescribe],
			modeNames[pgx.QueryExecModeDescribeExec], modeNames[pgx.QueryExecModeExec],
			modeNames[pgx.QueryExecModeSimpleProtocol])
	}
}

// Statements of the store, run through a runner (see run.go).
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
	cCount
	rRead
	sSweep
	sLive
	cCountAlgorithms
	numStatements
)

// stmtSpec is a statement of the store, with the types of its parameters.
// The store declares them rather than leaves the server to infer them, so
// that its arguments are encoded the same in every mode.
type stmtSpec struct {
	sql    string
	params []uint32
	// fresh statements are planned afresh each time they run, on the
	// table as it is then: they are never prepared by name.
	fresh bool
	// sd describes the statement to pgx's argument encoder when it is not
	// prepared: its SQL and parameter types.
	sd *pgconn.StatementDescription
}

const (
	oBytea = pgtype.ByteaOID
	oText  = pgtype.TextOID
	oInt4  = pgtype.Int4OID
	oInt8  = pgtype.Int8OID
	oBool  = pgtype.BoolOID
	oTime  = pgtype.TimestamptzOID

	oByteaArray = pgtype.ByteaArrayOID
	oTextArray  = pgtype.TextArrayOID
	oInt8Array  = pgtype.Int8ArrayOID
	oInt4Array  = pgtype.Int4ArrayOID
	oTimeArray  = pgtype.TimestamptzArrayOID
)

var (
	countOneParams  = []uint32{oBytea, oText, oInt8, oInt8, oInt8}
	countManyParams = []uint32{oByteaArray, oText, oInt8Array, oInt8Array, oInt8Array}
	writeParams     = []uint32{oByteaArray, oText, oTextArray, oTimeArray}
	write1Params    = []uint32{oBytea, oText, oText, oTime}
)

var statementSpecs = func() [numStatements]stmtSpec {
	s := [numStatements]stmtSpec{
		uLock:           {sql: sqlLock, params: []uint32{oByteaArray, oText}},
		uLockRead:       {sql: sqlLockRead, params: []uint32{oByteaArray}},
		uLockReadAsync:  {sql: sqlLockReadAsync, params: []uint32{oByteaArray}},
		uLockRead1:      {sql: sqlLockRead1, params: []uint32{oBytea}},
		uLockRead1Async: {sql: sqlLockRead1Async, params: []uint32{oBytea}},
		uWrite:          {sql: sqlWrite, params: writeParams},
		uWrite1:         {sql: sqlWrite1, params: write1Params},
		uInsert:         {sql: sqlInsert, params: writeParams},
		uInsert1:        {sql: sqlInsert1, params: write1Params},
		uDelete:         {sql: sqlDelete, params: []uint32{oByteaArray}},
		uDelete1:        {sql: sqlDelete1, params: []uint32{oBytea}},
		uAdmit:          {sql: sqlAdmit, params: []uint32{oText, oInt4, oInt8, oTime, oInt8}},
		cCountOne:       {sql: sqlCountOne, params: countOneParams},
		cCountOneAsync:  {sql: sqlCountOneAsync, params: countOneParams},
		cRead1:          {sql: sqlRead1, params: []uint32{oBytea, oText}},
		cCountMany:      {sql: sqlCountMany, params: countManyParams},
		cCountManyAsync: {sql: sqlCountManyAsync, params: countManyParams},
		cCount: {sql: sqlCount, params: []uint32{oByteaArray, oText, oInt8Array, oInt8Array, oInt8,
			oInt8, oBool, oInt8, oBool}},
		rRead: {sql: sqlRead, params: []uint32{oByteaArray, oText}},
		// The sweep and the count of live entries are planned on the
		// table's size now: a plan made while the table was small would
		// scan it all.
		sSweep: {sql: sqlSweep, params: []uint32{oInt8}, fresh: true},
		sLive:  {sql: sqlLive, params: []uint32{oText}, fresh: true},
		cCountAlgorithms: {sql: sqlCountAlgorithms, params: []uint32{oByteaArray, oText, oInt4Array, oInt8Array, oInt8Array,
			oInt8Array, oInt8, oInt8, oBool, oInt8, oBool}},
	}
	for i := range s {
		s[i].sd = &pgconn.StatementDescription{SQL: s[i].sql, ParamOIDs: s[i].params}
	}
	return s
}()

// stmtsKey names the prepared statements in a connection's CustomData.
const stmtsKey = "github.com/gatecount/gatecount/store/postgres statements"

// errStmtGone is the SQLSTATE of a prepared statement the connection no
// longer has. DEALLOCATE or DISCARD ran on it, or a pooler in transaction
// mode gave the call another server connection.
const errStmtGone = "26000"

// errStmtExists is the SQLSTATE of a prepared statement that exists
// already: behind a pooler in transaction mode, a server connection that
// another client prepared it on.
const errStmtExists = "42P05"

// preparedStmts are the store's statements as prepared by name on one
// connection (modeNamed); a fresh statement's entry is nil.
type preparedStmts struct {
	s [numStatements]*pgconn.StatementDescription
	// replanAbove is the estimate of live entries above which the
	// statements are prepared again (see Backend.statements).
	replanAbove int64
}

func stmtName(i int) string { return "gatecount_" + strconv.Itoa(i) }

// binaryFormat asks for every result in binary format.
var binaryFormat = []int16{pgtype.BinaryFormatCode}

// statements returns the store's statements, prepared by name on c (in
// modeNamed). The first call on a connection prepares them all in one round
// trip of a pgconn pipeline. It closes any of the same names first, so that
// a half-done earlier attempt does not get in the way. Later calls find
// them in the connection's CustomData.
//
// They are prepared again once the table has grown well past its size when
// they were prepared (more than four times the estimate of live entries
// then, plus 1,024). PostgreSQL settles on one plan for a prepared
// statement after its first few runs, and keeps it. A point lookup planned
// while the table is nearly empty is a sequential scan. It stays one as the
// table grows, until the table's statistics change (autovacuum's ANALYZE,
// which a server may not run). Prepared again, on a table of more than a
// few pages, the lookups use the primary key. A connection prepares its
// statements again a handful of times at most.
func (b *Backend) statements(ctx context.Context, c *pgx.Conn) (*preparedStmts, error) {
	pc := c.PgConn()
	est := b.estimate.Load()
	if st, ok := pc.CustomData()[stmtsKey].(*preparedStmts); ok && est <= st.replanAbove {
		return st, nil
	}
	p := pc.StartPipeline(ctx)
	var prepared []int
	for i, s := range statementSpecs {
		if s.fresh {
			continue
		}
		p.SendDeallocate(stmtName(i))
		p.SendPrepare(stmtName(i), s.sql, s.params)
		prepared = append(prepared, i)
	}
	st := &preparedStmts{replanAbove: 4*max(est, 0) + 1024}
	err := func() error {
		if err := p.Sync(); err != nil {
			return err
		}
		for _, i := range prepared {
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
			sd.Name, sd.SQL = stmtName(i), statementSpecs[i].sql
			st.s[i] = sd
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
		return nil, poolerHint(err)
	}
	pc.CustomData()[stmtsKey] = st
	return st, nil
}

// checkNamedStatements returns an error matching ErrPoolSetting when a
// statement prepared by name on one of pool's connections is lost by the
// connection's next transaction. That happens behind a pooler in
// transaction mode that keeps no prepared statements (PgBouncer before
// 1.21, or without max_prepared_statements). There the next transaction can
// run on another server connection. It prepares a statement on one
// connection, then makes a second connection hold a transaction open. A
// pooler hands the second the server connection the first just released, as
// PgBouncer does. Then it runs the statement on the first. A direct
// connection, a session pooler, or a pooler that prepares statements again
// on the server connection it picks, runs it. With a pool of one connection
// it checks nothing.
func checkNamedStatements(ctx context.Context, pool *pgxpool.Pool) error {
	if pool.Config().MaxConns < 2 {
		return nil
	}
	a, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", err)
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", err)
	}
	defer b.Release()
	var rnd [6]byte
	rand.Read(rnd[:])
	name := "gatecount_check_" + hex.EncodeToString(rnd[:])
	pa := a.Conn().PgConn()
	if _, err := pa.Prepare(ctx, name, "SELECT 1", nil); err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", poolerHint(err))
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", err)
	}
	_, err = pa.ExecPrepared(ctx, name, nil, nil, nil).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == errStmtGone {
		return fmt.Errorf("%w: default_query_exec_mode=cache_statement (pgx's default) keeps statements prepared by name, and this pool's connections lose them between transactions, as behind a pooler in transaction mode: set default_query_exec_mode=exec in the database URL", ErrPoolSetting)
	}
	if err != nil {
		return fmt.Errorf("postgres: check prepared statements: %w", err)
	}
	_ = pa.Deallocate(ctx, name)
	return nil
}

// poolerHint adds to err, when it says a prepared statement exists already
// or is gone, what that means behind a pooler and what to set.
func poolerHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == errStmtExists || pgErr.Code == errStmtGone) {
		return fmt.Errorf("%w (behind a pooler in transaction mode, which keeps no prepared statements, set default_query_exec_mode=exec in the database URL)", err)
	}
	return err
}

// acquire takes a connection of the pool for one call and returns a runner
// of statements on it (see run.go), in the store's mode. In modeNamed the
// store's statements are prepared on the connection first. The runner
// watches ctx: a call whose context ends mid-round-trip fails with ctx's
// error, and pgx closes its connection, which rolls back what it had begun.
// The caller ends the runner with close and gives the connection back with
// release.
func (b *Backend) acquire(ctx context.Context) (*pgxpool.Conn, *runner, error) {
	start := time.Now()
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, acquireError(ctx, err)
	}
	waited := time.Since(start) >= acquireWaited
	var st *preparedStmts
	if b.mode == modeNamed {
		if st, err = b.statements(ctx, c.Conn()); err != nil {
			return nil, nil, release(c, fmt.Errorf("prepare: %w", err))
		}
	}
	r := newRunner(ctx, c.Conn(), b.mode, st)
	r.waited = waited
	return c, r, nil
}

// acquireWaited is how long taking a connection of the pool takes when it
// had to wait for one.
const acquireWaited = time.Millisecond

// overrun returns err, the outcome of a call on r, as a wait's overload
// when the call waited for its connection and its deadline then passed. The
// time went to the wait, and says nothing of the database's health.
func (r *runner) overrun(err error) error {
	if err != nil && r.waited && r.ctx.Err() != nil && store.ReasonOf(err) == 0 {
		return storekit.WaitedOut("a connection of the pool, then ran out of time", err)
	}
	return err
}

// release gives back a connection of acquire, after the call that used it
// ended with err. If err says the connection lost a statement (to
// DEALLOCATE or DISCARD), it drops the connection's statements, so that the
// next call prepares them again. It returns the connection to the pool,
// which destroys it if the call left it mid-transaction or broken. It
// returns err.
func release(c *pgxpool.Conn, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == errStmtGone {
		delete(c.Conn().PgConn().CustomData(), stmtsKey)
		err = poolerHint(err)
	}
	c.Release()
	return err
}

// acquireError classifies a failure to take a connection of the pool. A
// call whose deadline passed while it waited for a free connection met a
// busy pool, not a failing database. It is answered overloaded, as a call
// that waits out its deadline in the guard's queue. So it neither opens the
// breaker nor lets an attempt through uncounted. Any other failure, a new
// connection that could not be opened in time included, is the database's.
func acquireError(ctx context.Context, err error) error {
	var dial *pgconn.ConnectError
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) && !errors.As(err, &dial) {
		return storekit.WaitedOut("a connection of the pool", err)
	}
	return fmt.Errorf("acquire a connection: %w", err)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// runner runs the store's statements for one call on one connection, in the
// store's mode (see execMode), through pgx's public API. In the extended
// protocol it uses a pgconn pipeline, with a prepared statement by name or
// an unnamed one parsed with the call. In the simple protocol it uses pgx
// batches. Every mode gives the same transactions:
//
//   - Statements sent before a sync run in one transaction, which commits
//     at the sync, or rolls back if a statement failed. A flush between
//     them gets the results so far without ending it. In the extended
//     protocol this is the implicit transaction that lasts up to the
//     pipeline's Sync, with no BEGIN or COMMIT statement. In the simple
//     protocol, a transaction of one round trip is the implicit transaction
//     of one query string. One that a flush spans starts with BEGIN and
//     ends with COMMIT (or ROLLBACK).
//   - Once a statement fails, the server skips what follows up to the end
//     of the transaction, and so does the runner: every later statement's
//     result is that error.
//   - A runner that ends (close) with its transaction open closes the
//     connection, which rolls the transaction back. A connection is never
//     handed back to the pool mid-transaction or with answers unread.
//
// Either way a transaction stays on one server connection behind a pooler
// in transaction mode. The pooler hands the server connection back only
// once the server says it is idle. The server does at the end of a
// transaction, not at a flush.
type runner struct {
	ctx  context.Context
	conn *pgx.Conn
	m    *pgtype.Map
	mode execMode
	st   *preparedStmts // the statements prepared by name (modeNamed), or nil

	// The extended protocol (modeNamed, modeUnnamed).
	p   *pgconn.Pipeline
	eqb pgx.ExtendedQueryBuilder

	// The simple protocol (modeSimple).
	queued []*pgx.QueuedQuery // statements of the next round trip
	br     pgx.BatchResults   // results of the last round trip, or nil
	inTx   bool               // a BEGIN was sent, and its COMMIT or ROLLBACK not
	ending bool               // the last round trip ends with COMMIT or ROLLBACK

	sent    int   // statements sent whose results are still to read
	failed  error // the first error of a statement, once one failed
	syncing bool  // a sync was sent and its answer not read yet
	done    bool  // the answer to the sync was read: the connection is idle
	used    bool  // something was sent to the server
	waited  bool  // taking its connection had to wait for one
}

// newRunner returns a runner on c in mode; st holds the statements prepared
// on c in modeNamed. Its round trips watch ctx.
func newRunner(ctx context.Context, c *pgx.Conn, mode execMode, st *preparedStmts) *runner {
	return &runner{ctx: ctx, conn: c, m: c.TypeMap(), mode: mode, st: st}
}

// build encodes args for statement i, and returns the statement as
// prepared on the connection, or nil when it is to be sent unnamed.
func (r *runner) build(i int, args []any) (*pgconn.StatementDescription, error) {
	var sd *pgconn.StatementDescription
	if r.st != nil {
		sd = r.st.s[i]
	}
	enc := sd
	if enc == nil {
		enc = statementSpecs[i].sd
	}
	if err := r.eqb.Build(r.m, enc, args); err != nil {
		return nil, fmt.Errorf("statement %d: %w", i, err)
	}
	return sd, nil
}

// send queues statement i of statementSpecs with args, to go at the next
// flush or sync.
func (r *runner) send(i int, args ...any) error {
	spec := &statementSpecs[i]
	r.sent++
	if r.mode == modeSimple {
		r.queued = append(r.queued, &pgx.QueuedQuery{SQL: spec.sql, Arguments: args})
		return nil
	}
	if err := r.writable(); err != nil {
		r.sent--
		return err
	}
	sd, err := r.build(i, args)
	if err != nil {
		r.sent--
		return err
	}
	if r.p == nil {
		r.p = r.conn.PgConn().StartPipeline(r.ctx)
	}
	if sd == nil {
		r.p.SendQueryParams(spec.sql, r.eqb.ParamValues, spec.params, r.eqb.ParamFormats, binaryFormat)
	} else {
		r.p.SendQueryStatement(sd, r.eqb.ParamValues, r.eqb.ParamFormats, binaryFormat)
	}
	return nil
}

// flush sends what was queued and asks for the results so far, leaving the
// transaction open.
func (r *runner) flush() error {
	r.used = true
	if r.mode == modeSimple {
		return r.roundTrip(false)
	}
	if err := r.writable(); err != nil {
		return err
	}
	r.p.SendFlushRequest()
	return r.p.Flush()
}

// sync sends what was queued and ends the transaction.
func (r *runner) sync() error {
	r.syncing, r.used = true, true
	if r.mode == modeSimple {
		return r.roundTrip(true)
	}
	if err := r.writable(); err != nil {
		return err
	}
	return r.p.Sync()
}

// errConnClosed is returned for a write on a connection that pgconn closed.
var errConnClosed = errors.New("postgres: the connection was closed after an error")

// writable returns errConnClosed once pgconn has closed the connection,
// after an error reading or writing it. A closed connection is written to
// by pgconn's own closing goroutine, so the runner must not write to it:
// that would race with it.
func (r *runner) writable() error {
	if r.conn.PgConn().IsClosed() {
		return errConnClosed
	}
	return nil
}

// roundTrip sends the queued statements in one batch of the simple protocol
// (one query string). It sends a BEGIN first when the transaction is to
// outlive it (!end). When it ends a transaction that a BEGIN opened, it
// sends COMMIT, or ROLLBACK once a statement failed.
func (r *runner) roundTrip(end bool) error {
	if r.br != nil {
		if err := r.br.Close(); err != nil && r.failed == nil {
			r.failed = err
		}
		r.br = nil
	}
	b := &pgx.Batch{}
	begin := !end && !r.inTx && r.failed == nil
	if begin {
		b.Queue("BEGIN")
	}
	if r.failed == nil {
		b.QueuedQueries = append(b.QueuedQueries, r.queued...)
	}
	r.queued = r.queued[:0]
	r.ending = end && r.inTx
	switch {
	case r.ending && r.failed == nil:
		b.Queue("COMMIT")
	case r.ending:
		b.Queue("ROLLBACK")
	}
	if len(b.QueuedQueries) == 0 {
		return nil
	}
	r.br = r.conn.SendBatch(r.ctx, b)
	if begin {
		r.inTx = true
		if _, err := r.br.Exec(); err != nil {
			r.failed = err
			return err
		}
	}
	return nil
}

// rows reads the result of the next statement sent, calling each (unless
// nil) with the fields and values of each of its rows, which are valid
// only during the call. It returns the statement's command tag, or its
// error; after a statement failed, every later one returns that error.
func (r *runner) rows(each func(fields []pgconn.FieldDescription, vals [][]byte) error) (pgconn.CommandTag, error) {
	if r.sent == 0 {
		return pgconn.CommandTag{}, errors.New("no statement to read the result of")
	}
	r.sent--
	if r.failed != nil {
		return pgconn.CommandTag{}, r.failed
	}
	var err error // each's first error: the rest of the rows are read, not seen
	var tag pgconn.CommandTag
	var rerr error
	if r.mode == modeSimple {
		if r.br == nil {
			return pgconn.CommandTag{}, errors.New("a statement's result read before its round trip")
		}
		rows, qerr := r.br.Query()
		if qerr == nil {
			for rows.Next() {
				if each != nil && err == nil {
					err = each(rows.FieldDescriptions(), rows.RawValues())
				}
			}
			rows.Close()
			qerr = rows.Err()
		}
		tag, rerr = rows.CommandTag(), qerr
	} else {
		res, gerr := r.p.GetResults()
		rr, ok := res.(*pgconn.ResultReader)
		switch {
		case gerr != nil:
			rerr = gerr
		case !ok:
			rerr = fmt.Errorf("got %T for a statement's result", res)
		default:
			for rr.NextRow() {
				if each != nil && err == nil {
					err = each(rr.FieldDescriptions(), rr.Values())
				}
			}
			tag, rerr = rr.Close()
		}
	}
	if rerr != nil {
		r.failed = rerr
		return pgconn.CommandTag{}, rerr
	}
	return tag, err
}

// exec reads the next statement's result, discarding its rows.
func (r *runner) exec() (pgconn.CommandTag, error) { return r.rows(nil) }

// first reads the result of the next statement sent, calling f with the
// fields and values of its first row only, or returns pgx.ErrNoRows when
// it has none.
func (r *runner) first(f func(fields []pgconn.FieldDescription, vals [][]byte) error) error {
	found := false
	_, err := r.rows(func(fields []pgconn.FieldDescription, vals [][]byte) error {
		if found {
			return nil
		}
		found = true
		return f(fields, vals)
	})
	if err == nil && !found {
		err = pgx.ErrNoRows
	}
	return err
}

// scan decodes a row's values into dest, through the connection's type
// map; a nil dest skips its column.
func (r *runner) scan(fields []pgconn.FieldDescription, vals [][]byte, dest ...any) error {
	return pgx.ScanRow(r.m, fields, vals, dest...)
}

// row scans the next statement's first row into dest, or returns
// pgx.ErrNoRows.
func (r *runner) row(dest ...any) error {
	return r.first(func(fields []pgconn.FieldDescription, vals [][]byte) error {
		return r.scan(fields, vals, dest...)
	})
}

// one runs statement i with args in a transaction of its own (one round
// trip). It calls each with the fields and values of each of its rows,
// which are valid only during the call. In the extended protocol, on a
// runner that has sent nothing yet, the statement goes without a pipeline,
// as pgx's own queries do.
func (r *runner) one(i int, each func(fields []pgconn.FieldDescription, vals [][]byte) error, args ...any) error {
	if r.mode != modeSimple && r.p == nil && !r.used {
		return r.oneExtended(i, each, args)
	}
	if err := r.send(i, args...); err != nil {
		return err
	}
	if err := r.sync(); err != nil {
		return err
	}
	_, err := r.rows(each)
	if serr := r.synced(); err == nil {
		err = serr
	}
	return err
}

// oneExtended is one without a pipeline, in the extended protocol.
func (r *runner) oneExtended(i int, each func(fields []pgconn.FieldDescription, vals [][]byte) error, args []any) error {
	sd, err := r.build(i, args)
	if err != nil {
		return err
	}
	pc := r.conn.PgConn()
	r.used = true
	var rr *pgconn.ResultReader
	if sd == nil {
		spec := &statementSpecs[i]
		rr = pc.ExecParams(r.ctx, spec.sql, r.eqb.ParamValues, spec.params, r.eqb.ParamFormats, binaryFormat)
	} else {
		rr = pc.ExecStatement(r.ctx, sd, r.eqb.ParamValues, r.eqb.ParamFormats, binaryFormat)
	}
	for rr.NextRow() {
		if each != nil && err == nil {
			err = each(rr.FieldDescriptions(), rr.Values())
		}
	}
	// Close reads up to the end of the transaction; on an error of the
	// connection, pgconn has closed it.
	_, rerr := rr.Close()
	r.done = true
	if rerr != nil {
		return rerr
	}
	return err
}

// end ends the transaction and reads up to the end.
func (r *runner) end() error {
	if err := r.sync(); err != nil {
		return err
	}
	return r.synced()
}

// synced reads up to the end of the transaction a sync ended, skipping any
// result not read yet. It returns an error only when reading does, or the
// commit fails.
func (r *runner) synced() error {
	if r.mode != modeSimple {
		for {
			res, err := r.p.GetResults()
			var pgErr *pgconn.PgError
			switch {
			case errors.As(err, &pgErr):
				continue // a statement's error, reported by rows
			case err != nil:
				return err
			case res == nil:
				return errors.New("no end of the transaction in the pipeline")
			}
			if rr, ok := res.(*pgconn.ResultReader); ok {
				rr.Close()
				continue
			}
			if _, ok := res.(*pgconn.PipelineSync); ok {
				r.syncing, r.done, r.sent = false, true, 0
				return nil
			}
		}
	}
	for r.sent > 0 {
		r.rows(nil)
	}
	var err error
	if r.br != nil {
		if r.ending && r.failed == nil {
			_, err = r.br.Exec() // COMMIT
		}
		r.br.Close()
		r.br = nil
	}
	r.syncing = false
	if r.conn.PgConn().TxStatus() == 'I' {
		r.inTx, r.done = false, true
		return err
	}
	// A statement failed in a transaction that BEGIN opened: the server
	// skipped the COMMIT.
	if _, rerr := r.conn.Exec(r.ctx, "ROLLBACK"); rerr != nil {
		return rerr
	}
	r.inTx, r.done = false, true
	return err
}

// close ends the runner: it reads up to the end of a transaction a sync
// ended and whose end is not read yet. When the transaction is still open,
// or reading fails, it closes the connection, which rolls the transaction
// back.
func (r *runner) close() {
	if !r.done && r.syncing {
		_ = r.synced()
	}
	if r.p != nil {
		// With requests not synced, Close closes the connection itself.
		_ = r.p.Close()
	} else if r.br != nil {
		_ = r.br.Close()
		r.br = nil
	}
	if r.done || !r.used {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
	defer cancel()
	_ = r.conn.PgConn().Close(ctx)
}

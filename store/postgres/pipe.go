package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// pipe runs prepared statements on a connection in PostgreSQL's extended
// protocol, which it speaks itself, through the connection's frontend:
// each statement is a Bind and an Execute, without the bookkeeping of a
// pgconn.Pipeline. Statements sent before a Sync run in one transaction,
// the implicit transaction of the extended protocol, which commits at the
// Sync (or rolls back, if a statement failed); a Flush between them gets
// the results so far without ending it. Once a statement fails, the server
// skips what follows up to the Sync, and so does the pipe.
//
// A pipe that ends (close) before the answer to its Sync closes the
// connection, which rolls the transaction back: a connection is never
// handed back mid-transaction or with answers unread.
type pipe struct {
	ctx context.Context // watched by reads, unless it has no Done channel
	pc  *pgconn.PgConn
	fe  *pgproto3.Frontend
	m   *pgtype.Map
	eqb pgx.ExtendedQueryBuilder
	w   wire

	sent    []*preparedStmt // statements whose results are still to read, in order
	failed  error           // the server's error, once a statement failed
	syncing bool            // a Sync was sent and its answer not read yet
	done    bool            // the answer to the Sync was read: the connection is idle
	backing [6]*preparedStmt
}

// newPipe returns a pipe on c, whose reads watch ctx (see Backend.acquire:
// under a deadline, the connection's own deadline bounds them instead).
func newPipe(ctx context.Context, c *pgx.Conn) *pipe {
	q := &pipe{ctx: ctx, pc: c.PgConn(), fe: c.PgConn().Frontend(), m: c.TypeMap()}
	q.sent = q.backing[:0]
	return q
}

// send queues statement s with args, encoded by the connection's type map.
func (q *pipe) send(s *preparedStmt, args ...any) error {
	if err := q.eqb.Build(q.m, s.sd, args); err != nil {
		return err
	}
	q.bind(s, q.eqb.ParamValues, q.eqb.ParamFormats)
	return nil
}

// sendWire queues statement s, which has wire types, with the arguments w
// holds.
func (q *pipe) sendWire(s *preparedStmt, w *wire) { q.bind(s, w.values(), binaryFormat) }

func (q *pipe) bind(s *preparedStmt, values [][]byte, formats []int16) {
	q.fe.SendBind(&pgproto3.Bind{PreparedStatement: s.sd.Name, ParameterFormatCodes: formats, Parameters: values, ResultFormatCodes: s.resultFormats})
	q.fe.SendExecute(&pgproto3.Execute{})
	q.sent = append(q.sent, s)
}

// flush sends what was queued and asks for the results so far, leaving the
// transaction open.
func (q *pipe) flush() error {
	q.fe.Send(&pgproto3.Flush{})
	return q.fe.Flush()
}

// sync sends what was queued and a Sync, which ends the transaction.
func (q *pipe) sync() error {
	q.fe.SendSync(&pgproto3.Sync{})
	q.syncing = true
	return q.fe.Flush()
}

// receive reads the next message from the server.
func (q *pipe) receive() (pgproto3.BackendMessage, error) {
	return q.pc.ReceiveMessage(q.ctx)
}

// rows reads the result of the next statement sent, calling each (unless
// nil) with the values of each of its rows, which are valid only during
// the call. It returns the statement's command tag, or its error; after a
// statement failed, every later one returns that error.
func (q *pipe) rows(each func(s *preparedStmt, vals [][]byte) error) (pgconn.CommandTag, error) {
	if len(q.sent) == 0 {
		return pgconn.CommandTag{}, errors.New("no statement to read the result of")
	}
	s := q.sent[0]
	q.sent = q.sent[1:]
	if q.failed != nil {
		return pgconn.CommandTag{}, q.failed
	}
	var err error // each's first error: the rest of the rows are read, not seen
	for {
		msg, rerr := q.receive()
		if rerr != nil {
			return pgconn.CommandTag{}, rerr
		}
		switch msg := msg.(type) {
		case *pgproto3.BindComplete:
		case *pgproto3.DataRow:
			if each != nil && err == nil {
				err = each(s, msg.Values)
			}
		case *pgproto3.CommandComplete:
			return pgconn.NewCommandTag(string(msg.CommandTag)), err
		case *pgproto3.ErrorResponse:
			q.failed = pgconn.ErrorResponseToPgError(msg)
			return pgconn.CommandTag{}, q.failed
		case *pgproto3.NoticeResponse, *pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
			// Handled by the connection.
		default:
			return pgconn.CommandTag{}, fmt.Errorf("got %T in a statement's result", msg)
		}
	}
}

// exec reads the next statement's result, discarding its rows.
func (q *pipe) exec() (pgconn.CommandTag, error) { return q.rows(nil) }

// first reads the result of the next statement sent, calling f with the
// values of its first row only, or returns pgx.ErrNoRows when it has none.
func (q *pipe) first(f func(s *preparedStmt, vals [][]byte) error) error {
	found := false
	_, err := q.rows(func(s *preparedStmt, vals [][]byte) error {
		if found {
			return nil
		}
		found = true
		return f(s, vals)
	})
	if err == nil && !found {
		err = pgx.ErrNoRows
	}
	return err
}

// row scans the next statement's first row into dest, or returns
// pgx.ErrNoRows.
func (q *pipe) row(dest ...any) error {
	return q.first(func(s *preparedStmt, vals [][]byte) error { return pgx.ScanRow(q.m, s.fields, vals, dest...) })
}

// one runs statement s, which has wire types, with the arguments q.w
// holds, in a transaction of its own (one round trip), calling each with
// the values of each of its rows, which are valid only during the call.
func (q *pipe) one(s *preparedStmt, each func(vals [][]byte) error) error {
	q.sendWire(s, &q.w)
	if err := q.sync(); err != nil {
		return err
	}
	_, err := q.rows(func(_ *preparedStmt, vals [][]byte) error { return each(vals) })
	if serr := q.synced(); err == nil {
		err = serr
	}
	return err
}

// end sends a Sync, which ends the transaction, and reads up to its
// answer.
func (q *pipe) end() error {
	if err := q.sync(); err != nil {
		return err
	}
	return q.synced()
}

// synced reads up to the answer to the Sync sent, skipping any result not
// read yet. It returns an error only when reading does.
func (q *pipe) synced() error {
	for {
		msg, err := q.receive()
		if err != nil {
			return err
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			q.syncing, q.done = false, true
			q.sent = q.sent[:0]
			return nil
		}
	}
}

// close ends the pipe: it reads up to the answer to a Sync sent and not
// yet answered. When none was sent, or reading fails, it closes the
// connection, which rolls the transaction back.
func (q *pipe) close() {
	if q.done {
		return
	}
	if q.syncing && q.synced() == nil {
		return
	}
	// The connection's deadline, when it passed, ends the goodbye too.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = q.pc.Close(ctx)
}

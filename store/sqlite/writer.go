package sqlite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// maxBatch is the most calls one transaction of the writer serves.
const maxBatch = 64

// An op is a call waiting for the writer.
type op struct {
	ctx context.Context
	// run does the call's work inside the writer's open transaction. It
	// returns the call's answer, and a *dbError when the database failed,
	// which leaves the transaction in doubt.
	run func(ctx context.Context) error
	// solo, when set, is tried first when the op is alone in its batch, in
	// a transaction of its own: it reports whether it did the work.
	solo func(ctx context.Context) (bool, error)
	res  chan error // buffered: the writer never waits for the caller
	// started is set when the writer begins the op's work: until then, a
	// caller whose context ends has only waited.
	started atomic.Bool
}

// waitedOut is the answer to a call whose context ended while it waited for
// the writer, behind other calls of this store. The store was busy, not
// failing, so the call neither opens the breaker nor lets an attempt
// through uncounted. (A wait for the file's write lock, which another
// connection holds, is the writer's, and ends in a deadline.)
func waitedOut(err error) error {
	return storekit.WaitedOut("the writer", err)
}

// dbError is a failure of the database during an op, as opposed to an
// answer (apply's error, a full store, a value that is not a count).
type dbError struct{ err error }

// Error returns the database's message.
func (e *dbError) Error() string { return e.err.Error() }

// Unwrap returns the database's error.
func (e *dbError) Unwrap() error { return e.err }

// dbErr wraps a database failure of step.
func dbErr(step string, err error) error {
	return &dbError{fmt.Errorf("sqlite: %s: %w", step, err)}
}

func isDBError(err error) bool {
	var de *dbError
	return errors.As(err, &de)
}

// do runs fn on the writer, in a write transaction it may share with other
// calls, and returns its answer once that transaction has committed. It
// waits no longer than ctx allows: once ctx is done it answers ctx's error,
// and a call that has not started by then never runs. answered reports
// whether the writer answered, and so is done with what run and solo write;
// when it is false the writer may still run them.
func (b *Backend) do(ctx context.Context, run func(ctx context.Context) error, solo func(ctx context.Context) (bool, error)) (answered bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	closed := &store.UnavailableError{Reason: store.ReasonClosed}
	select {
	case <-b.stop:
		return true, closed
	default:
	}
	o := &op{ctx: ctx, run: run, solo: solo, res: make(chan error, 1)}
	select {
	case b.queue <- o:
	case <-ctx.Done():
		return false, waitedOut(ctx.Err())
	case <-b.stop:
		return true, closed
	}
	select {
	case err := <-o.res:
		return true, err
	case <-ctx.Done():
		if !o.started.Load() {
			return false, waitedOut(ctx.Err())
		}
		return false, ctx.Err()
	case <-b.writerDone:
		// Queued as the writer stopped: answered by its drain, or never.
		select {
		case err := <-o.res:
			return true, err
		default:
			return true, closed
		}
	}
}

// writeLoop is the writer. It takes the calls waiting, up to maxBatch, and
// serves them in one BEGIN IMMEDIATE transaction. The cost of a commit is
// so shared by every call that waited for it. Each call's work is atomic on
// its own (it writes nothing before it is sure to succeed), so one call's
// answer, such as a full store, never undoes another's.
func (b *Backend) writeLoop() {
	defer close(b.writerDone)
	batch := make([]*op, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case o := <-b.queue:
			batch = append(batch, o)
		case <-b.stop:
			b.drain()
			return
		}
		// Let callers that are about to queue join this batch.
		runtime.Gosched()
	more:
		for len(batch) < maxBatch {
			select {
			case o := <-b.queue:
				batch = append(batch, o)
			default:
				break more
			}
		}
		b.serve(batch)
		clear(batch)
	}
}

// drain answers the calls still queued at Close.
func (b *Backend) drain() {
	for {
		select {
		case o := <-b.queue:
			o.res <- &store.UnavailableError{Reason: store.ReasonClosed}
		default:
			return
		}
	}
}

// serve runs one batch, until every op has its answer.
func (b *Backend) serve(ops []*op) {
	live := ops[:0:0]
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			o.res <- waitedOut(err)
			continue
		}
		live = append(live, o)
	}
	if len(live) == 1 && live[0].solo != nil {
		o := live[0]
		o.started.Store(true)
		done, err := o.solo(o.ctx)
		if done || err != nil {
			o.res <- err
			return
		}
	}
	for len(live) > 0 {
		live = b.serveTx(live)
	}
}

// serveTx runs ops in one transaction and answers them, or returns those to
// run again. When one op's database failure left the transaction in doubt,
// the transaction is rolled back. That op is answered with its failure, and
// the others are returned.
func (b *Backend) serveTx(ops []*op) (again []*op) {
	bctx, cancel := b.batchContext(ops)
	_, err := b.st.begin.ExecContext(bctx)
	cancel()
	if err != nil {
		for _, o := range ops {
			o.res <- b.failed("begin", o.ctx, err)
		}
		b.rollback() // in case BEGIN left one open
		return nil
	}
	answers := make([]error, len(ops))
	skip := make([]bool, len(ops))
	for i, o := range ops {
		if err := o.ctx.Err(); err != nil { // its caller was answered
			answers[i], skip[i] = waitedOut(err), true
			continue
		}
		o.started.Store(true)
		answers[i] = o.run(context.Background())
		if isDBError(answers[i]) {
			b.rollback()
			o.res <- answers[i]
			again = append(again, ops[:i]...)
			return append(again, ops[i+1:]...)
		}
	}
	if _, err := b.st.commit.ExecContext(context.Background()); err != nil {
		b.rollback()
		err = dbErr("commit", err)
		for i := range answers {
			if !skip[i] {
				answers[i] = err
			}
		}
	}
	for i, o := range ops {
		o.res <- answers[i]
	}
	return nil
}

// batchContext returns the context of a batch's wait for the file's write
// lock. It ends at the latest deadline of the batch's calls, when no call
// is left to wait for, or at Close.
func (b *Backend) batchContext(ops []*op) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, o := range ops {
		d, ok := o.ctx.Deadline()
		if !ok {
			return context.WithCancel(b.closeCtx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(b.closeCtx, latest)
}

// rollback ends the writer's transaction, if one is open.
func (b *Backend) rollback() {
	if _, err := b.st.rollback.ExecContext(context.Background()); err != nil && !strings.Contains(err.Error(), "no transaction") {
		b.log.Error("limit store rollback failed", "kind", KindRollbackFailed, "err", err)
	}
}

// failed wraps the error of a step, as the context's error when the
// context ended it.
func (b *Backend) failed(step string, ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("sqlite: %s: %w (%v)", step, cerr, err)
	}
	return dbErr(step, err)
}

package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/store/storekit"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxCountBatch is the most single-key counts one statement counts.
const maxCountBatch = 64

// oneCount is the single-key count of one call: its arguments and, once its
// batch has run, its result.
type oneCount struct {
	hash           []byte
	n, max, window int64 // window in milliseconds

	counted  bool // the statement counted; otherwise it refused
	v        int64
	exp, now time.Time // to the millisecond

	state int           // one of the req states, under the batcher's lock
	sent  atomic.Bool   // its batch holds a connection: it no longer waits
	err   error         // the batch's error, once state is reqDone
	wake  chan struct{} // a token when state may have changed; made when r waits
}

// counts records that r's statement counted it, from the statement's
// values for the key: the count, its expiry and the server's clock.
func (r *oneCount) counts(q *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
	r.counted = true
	if err := q.scan(fields, vals, &r.v, &r.exp, &r.now); err != nil {
		return err
	}
	r.exp, r.now = time.UnixMilli(r.exp.UnixMilli()), time.UnixMilli(r.now.UnixMilli())
	return nil
}

// States of a oneCount.
const (
	reqQueued  = iota // waiting in the queue
	reqLead           // asked to lead the next batch
	reqRunning        // in a batch under way
	reqDone           // its batch ran; err and the result are set
)

// countBatcher gathers the single-key counts of concurrent calls into
// batches of distinct keys, each counted by one statement (see
// Backend.Count). At most limit batches run at a time. A call that arrives
// while they all run waits in the queue. Once a batch ends, the first of
// the queue leads the next, taking with it those queued behind it, up to
// maxCountBatch. A call whose key another call has queued or running is not
// batched (do answers errSameKey). No batch could take it before that one
// ends, and the key's row serialises the two anyway. A call alone is
// counted at once, by a batch of one. A call that leads runs its batch on
// its own goroutine, under its own deadline, so the batcher has no
// goroutine of its own.
type countBatcher struct {
	limit int
	run   func(ctx context.Context, batch []*oneCount) error

	mu      sync.Mutex
	queue   []*oneCount
	keys    map[[32]byte]struct{} // keys of the calls queued or running
	running int                   // batches running or promised to a queued call
}

// do counts r in a batch and returns the batch's error, or ctx's error if
// ctx ends first (r's result then goes unread; it may have been counted).
func (bt *countBatcher) do(ctx context.Context, r *oneCount) error {
	bt.mu.Lock()
	if bt.keys == nil {
		bt.keys = make(map[[32]byte]struct{})
	}
	k := [32]byte(r.hash)
	if _, ok := bt.keys[k]; ok {
		bt.mu.Unlock()
		return errSameKey
	}
	bt.keys[k] = struct{}{}
	bt.queue = append(bt.queue, r)
	if bt.running < bt.limit {
		bt.running++
	} else {
		r.wake = make(chan struct{}, 1)
		if err := bt.wait(ctx, r); err != nil || r.state == reqDone {
			return err
		}
		// Asked to lead, with bt.mu held.
	}
	batch := bt.take(r)
	bt.mu.Unlock()
	err := bt.run(ctx, batch)
	bt.mu.Lock()
	bt.running--
	bt.handoff() // first, so the next batch starts as soon as it can
	for _, o := range batch {
		o.state, o.err = reqDone, err
		bt.forget(o)
	}
	bt.mu.Unlock()
	for _, o := range batch[1:] {
		signal(o)
	}
	return err
}

// errSameKey is do's answer to a call whose key another call has queued or
// running in the batcher: the caller counts it on its own.
var errSameKey = errors.New("postgres: count: the key is in a batch already")

// forget drops r's key from the keys queued or running.
func (bt *countBatcher) forget(r *oneCount) { delete(bt.keys, [32]byte(r.hash)) }

// wait waits, with bt.mu held and released meanwhile, until r's batch ran
// or r is asked to lead. When the batch ran, it returns its error, bt.mu
// released. When r is to lead, it returns nil, bt.mu held. When ctx ends
// first, it returns ctx's error, with r out of the queue and bt.mu
// released.
func (bt *countBatcher) wait(ctx context.Context, r *oneCount) error {
	for {
		bt.mu.Unlock()
		select {
		case <-r.wake:
		case <-ctx.Done():
		}
		bt.mu.Lock()
		switch {
		case r.state == reqDone:
			bt.mu.Unlock()
			return r.err
		case ctx.Err() != nil:
			if r.state == reqQueued || r.state == reqLead {
				bt.remove(r)
				bt.forget(r)
				if r.state == reqLead {
					bt.running--
				}
				bt.handoff()
				bt.mu.Unlock()
				// It waited for a batch, never sent: a busy store.
				return storekit.WaitedOut("a batch of counts", ctx.Err())
			}
			bt.mu.Unlock()
			if !r.sent.Load() { // its batch waits for a connection
				return storekit.WaitedOut("a connection for its batch", ctx.Err())
			}
			return ctx.Err()
		case r.state == reqLead:
			return nil
		}
	}
}

// take removes r and the queued calls that join its batch from the queue
// and returns the batch, r first.
func (bt *countBatcher) take(r *oneCount) []*oneCount {
	batch := []*oneCount{r}
	r.state = reqRunning
	rest := bt.queue[:0]
	for _, o := range bt.queue {
		switch {
		case o == r:
			continue
		case o.state == reqQueued && len(batch) < maxCountBatch:
			o.state = reqRunning
			batch = append(batch, o)
		default:
			rest = append(rest, o)
		}
	}
	clear(bt.queue[len(rest):])
	bt.queue = rest
	return batch
}

// remove takes r out of the queue.
func (bt *countBatcher) remove(r *oneCount) {
	if i := slices.Index(bt.queue, r); i >= 0 {
		bt.queue = slices.Delete(bt.queue, i, i+1)
	}
}

// handoff asks queued calls to lead batches while fewer than limit run.
func (bt *countBatcher) handoff() {
	for _, o := range bt.queue {
		if bt.running >= bt.limit {
			return
		}
		if o.state == reqQueued {
			o.state = reqLead
			bt.running++
			signal(o)
		}
	}
}

// signal leaves a wake token for o, unless one is there already.
func signal(o *oneCount) {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

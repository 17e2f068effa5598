package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Timing of the cases. None is asserted: they say how long an entry lives
// and how long the suite waits for a store's clock before it gives up.
const (
	// shortTTL is the life of an entry a case waits to see expire.
	shortTTL = 300 * time.Millisecond
	// liveTTL is the life of an entry that must still be live when read
	// at once, on either handle.
	liveTTL = 2 * time.Second
	// longTTL is the life of an entry that must outlive the case.
	longTTL = time.Hour
	// pollEvery is the pause between two looks at the store's clock.
	pollEvery = 20 * time.Millisecond
	// clockSlack is how far past what is expected the suite waits for the
	// store's clock, in local time, before it calls the store's clock
	// stuck.
	clockSlack = 10 * time.Second
	// maxWait is the furthest ahead of the store's time a case ever waits
	// for; a handle whose clock reads further behind is skewed.
	maxWait = 5 * time.Second
	// skewTolerance is how far two handles' views of the store's time may
	// differ before a case calls it a skew.
	skewTolerance = time.Second
	// maxOverloadRetries bounds the retries of a call the guard answered
	// overloaded, which never reached the backend.
	maxOverloadRetries = 1000
	// closePoll is the pause between two looks at the close case's
	// goroutines, closeWait how long, in all, the case gives a closed
	// store's goroutines to end.
	closePoll = 10 * time.Millisecond
	closeWait = 5 * time.Second
	// nearPoll is the pause between two looks at an entry close to its
	// expiry. A look that comes more than nearGap after the one before,
	// across the expiry, shows nothing. The case then tries again, up to
	// nearAttempts times.
	nearPoll     = 2 * time.Millisecond
	nearGap      = 50 * time.Millisecond
	nearAttempts = 5
	// stallLimit is how long goroutines calling a store at once may go
	// with none of their calls finishing before the case calls the store
	// deadlocked. A store's own deadline (the guard's is 2 s) answers a
	// remote call long before.
	stallLimit = 10 * time.Second
)

// pause waits d or until the case's context is done.
func (r *runner) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.ctx.Done():
		return r.failf("case ran out of time: %v", r.ctx.Err())
	}
}

// overloaded reports whether a call should be retried: the guard answered
// it overloaded, so it never reached the backend.
func (r *runner) overloaded(err error, attempt int) bool {
	if store.ReasonOf(err) != store.ReasonOverloaded || attempt >= maxOverloadRetries || r.ctx.Err() != nil {
		return false
	}
	time.Sleep(time.Duration(1+attempt%10) * time.Millisecond)
	return true
}

// update is h.Update, retried while the guard answers overloaded.
func (r *runner) update(h *store.Handle, keys []string, apply store.ApplyFunc) error {
	for i := 0; ; i++ {
		err := h.Update(r.ctx, keys, apply)
		if !r.overloaded(err, i) {
			return err
		}
	}
}

// read is h.Read, retried while the guard answers overloaded.
func (r *runner) read(h *store.Handle, keys ...string) ([]store.Entry, error) {
	for i := 0; ; i++ {
		es, err := h.Read(r.ctx, keys)
		if !r.overloaded(err, i) {
			return es, err
		}
	}
}

// count is h.Count, retried while the guard answers overloaded.
func (r *runner) count(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	for i := 0; ; i++ {
		t, err := h.Count(r.ctx, keys, caps, n)
		if !r.overloaded(err, i) {
			return t, err
		}
	}
}

// mustRead reads keys through h, turning a failure into a violation.
func (r *runner) mustRead(h *store.Handle, keys ...string) ([]store.Entry, error) {
	es, err := r.read(h, keys...)
	if err != nil {
		return nil, r.failf("Read on %s: %v", r.hname(h), err)
	}
	if len(es) != len(keys) {
		return nil, r.failf("Read on %s of %d keys returned %d entries", r.hname(h), len(keys), len(es))
	}
	return es, nil
}

// put writes value under each of keys through h, expiring ttl after the
// store's now, and returns that now and the expiry.
func (r *runner) put(h *store.Handle, value string, ttl time.Duration, keys ...string) (now, exp time.Time, err error) {
	err = r.update(h, keys, func(n time.Time, es []store.Entry) error {
		now = n
		exp = n.Add(ttl).Truncate(time.Millisecond)
		for i := range es {
			es[i] = store.Entry{Value: []byte(value), ExpiresAt: exp}
		}
		return nil
	})
	if err != nil {
		return now, exp, r.failf("Update on %s writing %d keys: %v", r.hname(h), len(keys), err)
	}
	return now, exp, nil
}

// observed is what an apply that changes nothing was given.
type observed struct {
	now     time.Time
	entries []store.Entry
}

// observe runs an Update through h whose apply copies what it is given and
// changes nothing.
func (r *runner) observe(h *store.Handle, keys ...string) (observed, error) {
	var o observed
	err := r.update(h, keys, func(now time.Time, es []store.Entry) error {
		o.now = now
		o.entries = make([]store.Entry, len(es))
		for i, e := range es {
			o.entries[i] = store.Entry{Value: bytes.Clone(e.Value), ExpiresAt: e.ExpiresAt}
		}
		return nil
	})
	if err != nil {
		return o, r.failf("Update on %s that changes nothing: %v", r.hname(h), err)
	}
	if len(o.entries) != len(keys) {
		return o, r.failf("Update on %s of %d keys gave apply %d entries", r.hname(h), len(keys), len(o.entries))
	}
	return o, nil
}

// now returns the store's time as h's apply is told it, read on a key of
// its own.
func (r *runner) now(h *store.Handle) (time.Time, error) {
	o, err := r.observe(h, r.key("clock"))
	return o.now, err
}

// waitPast waits until the store's time, as h's apply is told it, is at or
// after t: until an entry expiring at t is no longer live. The wait is
// bounded by how far t is ahead of the store's time plus clockSlack.
func (r *runner) waitPast(h *store.Handle, t time.Time) (time.Time, error) {
	now, err := r.now(h)
	if err != nil {
		return now, err
	}
	if ahead := t.Sub(now); ahead > maxWait {
		return now, r.failf("the store's time on %s reads %v, %v before %v, a time set moments ago no more than %v ahead of the store's: the handles' clocks differ",
			r.hname(h), ts(now), ahead.Round(time.Millisecond), ts(t), maxWait)
	}
	limit := time.Now().Add(t.Sub(now) + clockSlack)
	for now.Before(t) {
		if time.Now().After(limit) {
			return now, r.failf("the store's time on %s reads %v, and did not reach %v within %v more",
				r.hname(h), now.Format(time.RFC3339Nano), t.Format(time.RFC3339Nano), clockSlack)
		}
		if err := r.pause(pollEvery); err != nil {
			return now, err
		}
		if now, err = r.now(h); err != nil {
			return now, err
		}
	}
	return now, nil
}

// sameValue reports whether a value read back is the one written: the same
// bytes, or the same JSON (a store may keep JSON in a form of its own) for a
// value that is not an integer.
func sameValue(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	if _, err := strconv.ParseInt(string(want), 10, 64); err == nil {
		return false // counters round-trip as written
	}
	var g, w any
	dg := json.NewDecoder(bytes.NewReader(got))
	dg.UseNumber()
	dw := json.NewDecoder(bytes.NewReader(want))
	dw.UseNumber()
	if dg.Decode(&g) != nil || dw.Decode(&w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// intOf reads an entry's value as an integer.
func intOf(e store.Entry) (int64, error) {
	if !e.Live() {
		return 0, fmt.Errorf("no live entry")
	}
	n, err := strconv.ParseInt(string(e.Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("value %.40q is not an integer", e.Value)
	}
	return n, nil
}

// short quotes a value for a message, cut to a readable length.
func short(v []byte) string {
	if v == nil {
		return "(no entry)"
	}
	return fmt.Sprintf("%.60q", v)
}

// ts formats a time for a message.
func ts(t time.Time) string {
	if t.IsZero() {
		return "(zero)"
	}
	return t.UTC().Format("15:04:05.000")
}

// handle opens a handle of the case's own on s, under a prefix unique to
// the run.
func (r *runner) handle(s *store.Store, label string) (*store.Handle, error) {
	h, err := s.Handle("stc-" + r.id + "-" + label)
	if err != nil {
		return nil, r.failf("opening a handle of the suite's own (prefix %q): %v", "stc-"+r.id+"-"+label, err)
	}
	return h, nil
}

// bounded opens a store of max live entries through Pair.NewBounded.
func (r *runner) bounded(max int) (*store.Handle, error) {
	if r.p.NewBounded == nil {
		return nil, r.notApplicable("Pair.NewBounded is not set")
	}
	h, err := r.p.NewBounded(max)
	if err != nil {
		return nil, r.failf("NewBounded(%d): %v", max, err)
	}
	return h, nil
}

// del deletes keys through h.
func (r *runner) del(h *store.Handle, keys ...string) error {
	if err := r.update(h, keys, func(_ time.Time, es []store.Entry) error {
		for i := range es {
			es[i].Value = nil
		}
		return nil
	}); err != nil {
		return r.failf("Update on %s deleting %d keys: %v", r.hname(h), len(keys), err)
	}
	return nil
}

// handles returns First and Second, or First alone when they are one.
func (r *runner) handles() []*store.Handle {
	if r.p.Second == r.p.First {
		return []*store.Handle{r.p.First}
	}
	return []*store.Handle{r.p.First, r.p.Second}
}

// yield gives up the processor in the middle of an apply, as a slow apply
// or a busy machine would. A store that does not hold its keys through
// apply then lets other updates in meanwhile. Every fourth call, i
// counting, it also sleeps a moment, long enough for the goroutines that
// wait on a lock to queue behind it.
func yield(i int) {
	runtime.Gosched()
	if i%4 == 0 {
		time.Sleep(50 * time.Microsecond)
	}
}

// firstErr keeps the first error of concurrent workers.
type firstErr struct {
	once sync.Once
	err  error
	set  atomic.Bool
}

func (f *firstErr) keep(err error) {
	if err == nil {
		return
	}
	f.once.Do(func() { f.err = err; f.set.Store(true) })
}

func (f *firstErr) failed() bool { return f.set.Load() }

// get returns the error kept, if any.
func (f *firstErr) get() error {
	if !f.set.Load() {
		return nil
	}
	return f.err
}

// together runs workers goroutines, alternately on First and Second, that
// start at one moment. Each calls step each times, with their number and
// the call's. It returns the first failure, after which the others stop at
// their next step. When no step finishes for stallLimit while some are
// under way, it returns a violation at once and leaves the stuck goroutines
// behind: the store is deadlocked.
func (r *runner) together(workers, each int, step func(w, i int, h *store.Handle) error) error {
	var (
		wg       sync.WaitGroup
		fe       firstErr
		finished atomic.Int64
	)
	start := make(chan struct{})
	for w := range workers {
		h := r.p.First
		if w%2 == 1 {
			h = r.p.Second
		}
		wg.Go(func() {
			<-start
			for i := range each {
				if fe.failed() || r.ctx.Err() != nil {
					return
				}
				if err := step(w, i, h); err != nil {
					fe.keep(err)
					return
				}
				finished.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(start)
	tick := time.NewTicker(stallLimit / 50)
	defer tick.Stop()
	last, since := int64(-1), time.Now()
	for {
		select {
		case <-done:
			return fe.get()
		case <-r.ctx.Done():
			fe.keep(r.failf("case ran out of time with %d of %d calls of %d goroutines made: %v",
				finished.Load(), workers*each, workers, r.ctx.Err()))
			return fe.get()
		case <-tick.C:
			if n := finished.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) >= stallLimit {
				fe.keep(r.failf("%d goroutines calling the store at once: none of their calls finished for %v, with %d of %d made: the store is deadlocked (two calls each holding a key the other waits for, say)",
					workers, stallLimit, last, workers*each))
				return fe.get()
			}
		}
	}
}

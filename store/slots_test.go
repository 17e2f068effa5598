package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/overload"
)

// fill starts n calls on h that hold their slots in st until it is freed,
// and waits until all of them run in the backend.
func fill(t *testing.T, wg *sync.WaitGroup, h *Handle, st *stuck, n int) {
	t.Helper()
	for range n {
		wg.Go(func() {
			if err := h.Update(context.Background(), []string{"k"}, nop); err != nil {
				t.Errorf("call within MaxInFlight: %v", err)
			}
		})
	}
	for range n {
		<-st.started
	}
}

// Calls past MaxInFlight wait for a slot and are answered by the backend,
// none refused, however many arrive at once.
func TestPastMaxInFlightWaits(t *testing.T) {
	const max, burst = 2, 200
	st := newStuck(burst)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, Deadline: time.Minute})
	var wg sync.WaitGroup
	fill(t, &wg, h, st, max)
	var failed atomic.Int64
	for range burst {
		wg.Go(func() {
			if _, err := h.Count(context.Background(), []string{"k"}, []Budget{{Limit: 1 << 20, Window: time.Minute}}, 1); err != nil {
				failed.Add(1)
				t.Errorf("call past MaxInFlight: %v, want it to wait", err)
			}
		})
	}
	waitFor(t, "the burst queued", func() bool { return s.Queued() == burst })
	if n := s.InFlight(); n != max {
		t.Errorf("InFlight = %d while calls wait, want %d", n, max)
	}
	st.free()
	wg.Wait()
	if n := f.calls.Load(); n != max+burst {
		t.Errorf("backend called %d times, want %d", n, max+burst)
	}
	if s.Queued() != 0 || s.InFlight() != 0 {
		t.Errorf("after the burst: %d queued, %d in flight, want 0 and 0", s.Queued(), s.InFlight())
	}
	if got := s.Stats().Waited; got != burst {
		t.Errorf("Stats().Waited = %d, want %d", got, burst)
	}
}

// A call waits only until its deadline: then it is answered overloaded,
// never reaching the backend, and the breaker does not hear of it.
func TestWaitedOut(t *testing.T) {
	const max = 1
	st := newStuck(max)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, Deadline: time.Minute, Breaker: BreakerOptions{Failures: 1}})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer st.free()
	fill(t, &wg, h, st, max)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Update", func(ctx context.Context) error { return h.Update(ctx, []string{"k"}, nop) }},
		{"Read", func(ctx context.Context) error { _, err := h.Read(ctx, []string{"k"}); return err }},
		{"Count", func(ctx context.Context) error {
			_, err := h.Count(ctx, []string{"k"}, []Budget{{Limit: 1, Window: time.Second}}, 1)
			return err
		}},
		{"Sweep", func(ctx context.Context) error { _, err := s.Sweep(ctx); return err }},
	}
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		err := c.call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s whose caller's deadline passed while it waited: %v, want the caller's deadline", c.name, err)
		}
	}
	if n := f.calls.Load(); n != max {
		t.Errorf("backend called %d times, want %d: a waiting call reached it", n, max)
	}
	if h.BreakerOpen() || s.BreakerOpen() {
		t.Error("calls that only waited opened the breaker")
	}
	if s.Queued() != 0 {
		t.Errorf("%d calls still queued after their deadlines", s.Queued())
	}
}

// The guard's own deadline, passing while a call waits, answers it
// unavailable (overloaded, overload.ErrWaitedOut).
func TestWaitedOutGuardDeadline(t *testing.T) {
	st := newStuck(1)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: 1, Deadline: 50 * time.Millisecond, Breaker: BreakerOptions{Failures: -1}})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer st.free()
	wg.Go(func() { h.Update(context.Background(), []string{"k"}, nop) })
	<-st.started
	err := h.Update(t.Context(), []string{"k"}, nop)
	if ReasonOf(err) != ReasonOverloaded || !errors.Is(err, overload.ErrWaitedOut) {
		t.Errorf("call whose guard deadline passed while it waited: %v, want overloaded (%v)", err, overload.ErrWaitedOut)
	}
	if s.Queued() != 0 {
		t.Errorf("%d calls still queued", s.Queued())
	}
}

// A handle whose queue is full has its next call answered at once,
// overloaded (overload.ErrQueueFull); another handle's calls still queue.
func TestQueueFull(t *testing.T) {
	const max, queued = 1, 3
	st := newStuck(max + 2*queued)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, MaxQueued: queued, Deadline: time.Minute})
	other, err := s.Handle("other:")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	fill(t, &wg, h, st, max)
	for _, hh := range []*Handle{h, other} {
		for range queued {
			wg.Go(func() {
				if err := hh.Update(context.Background(), []string{"k"}, nop); err != nil {
					t.Errorf("queued call of %s: %v", hh.Prefix(), err)
				}
			})
		}
	}
	waitFor(t, "both queues full", func() bool { return s.Queued() == 2*queued })
	err = h.Update(t.Context(), []string{"k"}, nop)
	if ReasonOf(err) != ReasonOverloaded || !errors.Is(err, overload.ErrQueueFull) {
		t.Errorf("call past a full queue: %v, want overloaded (%v)", err, overload.ErrQueueFull)
	}
	st.free()
	wg.Wait()
}

// MaxQueued bounds every call: one under Patient finds no place in a full
// queue either, and is answered overloaded at once, never queued.
func TestPatientBoundedByQueue(t *testing.T) {
	const max, queued = 1, 2
	st := newStuck(max + queued)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, MaxQueued: queued, Deadline: time.Minute})
	var wg sync.WaitGroup
	fill(t, &wg, h, st, max)
	for range queued {
		wg.Go(func() {
			if err := h.Update(overload.Patient(context.Background()), []string{"k"}, nop); err != nil {
				t.Errorf("queued patient call: %v", err)
			}
		})
	}
	waitFor(t, "the queue full", func() bool { return s.Queued() == queued })
	for _, ctx := range []context.Context{t.Context(), overload.Patient(t.Context())} {
		err := h.Update(ctx, []string{"k"}, nop)
		if ReasonOf(err) != ReasonOverloaded || !errors.Is(err, overload.ErrQueueFull) {
			t.Errorf("call past a full queue (patient %v): %v, want overloaded (%v)", overload.IsPatient(ctx), err, overload.ErrQueueFull)
		}
	}
	if n := s.Queued(); n != queued {
		t.Errorf("%d calls queued, want the bound of %d", n, queued)
	}
	if !overload.IsPatient(overload.Patient(t.Context())) || overload.IsPatient(t.Context()) {
		t.Error("IsPatient does not tell a Patient context")
	}
	st.free()
	wg.Wait()
	if n := f.calls.Load(); n != max+queued {
		t.Errorf("backend called %d times, want %d: the refused calls never reach it", n, max+queued)
	}
}

// A patient call whose context ends while it waits leaves the queue at
// once with the context's error, and never reaches the backend: a request
// whose client is gone waits for nobody.
func TestPatientStopsWithContext(t *testing.T) {
	const max = 1
	st := newStuck(max)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, Deadline: time.Minute})
	var wg sync.WaitGroup
	fill(t, &wg, h, st, max)
	ctx, cancel := context.WithCancel(overload.Patient(context.Background()))
	waited := make(chan error, 1)
	go func() { waited <- h.Update(ctx, []string{"k"}, nop) }()
	waitFor(t, "the patient call queued", func() bool { return s.Queued() == 1 })
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("patient call whose context ended: %v, want %v", err, context.Canceled)
	}
	if n := s.Queued(); n != 0 {
		t.Errorf("%d calls queued once the waiting call's context ended, want 0", n)
	}
	st.free()
	wg.Wait()
	if n := f.calls.Load(); n != max {
		t.Errorf("backend called %d times, want %d: the call that left never reaches it", n, max)
	}
}

// A call under NoWait runs when a slot is free, and is answered overloaded
// (ErrQueueFull) at once when none is, never queued: a call that something
// else makes later holds no caller behind a busy store. Vouched for, it
// waits its turn in the vouched queue.
func TestNoWaitNeverQueues(t *testing.T) {
	const max = 1
	st := newStuck(max + 1)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: max, Deadline: time.Hour})
	free := make(chan error, 1)
	go func() { free <- h.Update(overload.NoWait(context.Background()), []string{"k"}, nop) }()
	<-st.started // a free slot: it runs
	err := h.Update(overload.NoWait(t.Context()), []string{"k"}, nop)
	if ReasonOf(err) != ReasonOverloaded || !errors.Is(err, overload.ErrQueueFull) {
		t.Errorf("NoWait call with every slot held: %v, want overloaded at once (%v)", err, overload.ErrQueueFull)
	}
	if n := s.Stats().Waited; n != 0 {
		t.Errorf("%d calls waited for a slot, want 0", n)
	}
	// Vouched for, it waits its turn in the vouched queue, which no flood
	// joins.
	vouched := make(chan error, 1)
	go func() {
		vouched <- h.Update(overload.NoWait(overload.Vouched(context.Background())), []string{"k"}, nop)
	}()
	waitFor(t, "the vouched call queued", func() bool { return s.Queued() == 1 })
	st.free()
	if err := <-free; err != nil {
		t.Errorf("NoWait call with a free slot: %v, want it answered by the backend", err)
	}
	if err := <-vouched; err != nil {
		t.Errorf("NoWait call vouched for, with every slot held: %v, want it to wait its turn and be answered", err)
	}
	if n := f.calls.Load(); n != max+1 {
		t.Errorf("backend called %d times, want %d", n, max+1)
	}
}

// A Patient call waits for a slot past its deadline, as long as its context
// lasts, and then has its whole deadline in the backend; a call that is not
// patient waits out its deadline and is answered overloaded.
func TestPatientWaitsPastDeadline(t *testing.T) {
	const deadline = 100 * time.Millisecond
	st := newStuck(2)
	f := &fake{update: st.ignoringCtx}
	s, h := open(t, f, Options{MaxInFlight: 1, Deadline: deadline, Breaker: BreakerOptions{Failures: -1}})
	held := make(chan error, 1) // holds the one slot until freed, answered at its deadline
	go func() { held <- h.Update(context.Background(), []string{"k"}, nop) }()
	<-st.started
	if err := h.Update(context.Background(), []string{"k"}, nop); !errors.Is(err, overload.ErrWaitedOut) {
		t.Fatalf("a call waiting for the held slot: %v, want %v", err, overload.ErrWaitedOut)
	}
	patient := make(chan error, 1)
	go func() { patient <- h.Update(overload.Patient(context.Background()), []string{"k"}, nop) }()
	waitFor(t, "the patient call queued", func() bool { return s.Queued() == 1 })
	time.Sleep(3 * deadline) // the patient call waits past its deadline
	select {
	case err := <-patient:
		t.Fatalf("patient call answered while the slot was held: %v", err)
	default:
	}
	st.free()
	if err := <-patient; err != nil {
		t.Errorf("patient call: %v, want it answered by the backend", err)
	}
	<-held
}

// Slots go to the lanes with waiting calls in turn: a flood queued on one
// handle does not delay, behind it, another handle's call, nor a vouched
// call of the flooded handle itself.
func TestSlotsInTurn(t *testing.T) {
	const max, flood = 1, 50
	for _, tc := range []struct {
		name string
		// quiet returns the handle and context of the call made after
		// the flood
		quiet func(t *testing.T, s *Store, flooded *Handle) (*Handle, context.Context)
	}{
		{"another handle", func(t *testing.T, s *Store, _ *Handle) (*Handle, context.Context) {
			h, err := s.Handle("quiet:")
			if err != nil {
				t.Fatal(err)
			}
			return h, context.Background()
		}},
		{"vouched, on the flooded handle", func(_ *testing.T, _ *Store, flooded *Handle) (*Handle, context.Context) {
			return flooded, overload.Vouched(context.Background())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				order []string
				gate  = make(chan struct{})
			)
			f := &fake{}
			s, flooded := open(t, f, Options{MaxInFlight: max, Deadline: time.Minute})
			quietH, quietCtx := tc.quiet(t, s, flooded)
			record := func(name string) ApplyFunc {
				return func(time.Time, []Entry) error {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					return nil
				}
			}
			var wg sync.WaitGroup
			started := make(chan struct{})
			wg.Go(func() {
				flooded.Update(context.Background(), []string{"k"}, func(time.Time, []Entry) error {
					close(started)
					<-gate
					return nil
				})
			})
			<-started
			for range flood {
				wg.Go(func() { flooded.Update(context.Background(), []string{"k"}, record("flood")) })
			}
			waitFor(t, "the flood queued", func() bool { return s.Queued() == flood })
			wg.Go(func() { quietH.Update(quietCtx, []string{"k"}, record("quiet")) })
			waitFor(t, "the quiet call queued", func() bool { return s.Queued() == flood+1 })
			close(gate)
			wg.Wait()
			at := -1
			for i, name := range order {
				if name == "quiet" {
					at = i
				}
			}
			// The flood's first waiter had its turn before the quiet lane
			// joined the turns; the quiet call comes second.
			if at < 0 || at > 1 {
				t.Errorf("the quiet call ran %dth of %d, behind the flood; want it within the first 2", at+1, len(order))
			}
		})
	}
}

// Each handle has its own breaker: a store failing for one handle's keys
// (a Redis Cluster node down, say) refuses only that handle's calls. The
// breaker logs when it opens and when it recovers.
func TestBreakerPerHandle(t *testing.T) {
	var failing atomic.Bool
	f := &fake{update: func(_ context.Context, apply ApplyFunc) error {
		return apply(time.Now(), make([]Entry, 1))
	}}
	var logs strings.Builder
	var mu sync.Mutex
	s := New(&prefixFailer{fake: f, failing: &failing, bad: "bad:"}, Options{
		Logger:  slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
		Breaker: BreakerOptions{Failures: 2, Cooldown: time.Millisecond},
	})
	defer s.Close()
	bad, _ := s.Handle("bad:")
	good, _ := s.Handle("good:")
	failing.Store(true)
	for range 5 {
		bad.Update(t.Context(), []string{"k"}, nop)
		if err := good.Update(t.Context(), []string{"k"}, nop); err != nil {
			t.Fatalf("healthy handle while another's keys fail: %v", err)
		}
	}
	if !bad.BreakerOpen() || good.BreakerOpen() || !s.BreakerOpen() {
		t.Fatalf("breakers: bad open %v, good open %v, store open %v; want true, false, true", bad.BreakerOpen(), good.BreakerOpen(), s.BreakerOpen())
	}
	failing.Store(false)
	waitFor(t, "the failing handle recovered", func() bool {
		return bad.Update(t.Context(), []string{"k"}, nop) == nil
	})
	if bad.BreakerOpen() {
		t.Error("breaker still open after a successful probe")
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Count(out, "kind="+kindDown) != 1 || strings.Count(out, "kind="+kindRecovered) != 1 || !strings.Contains(out, "prefix=bad:") {
		t.Errorf("logs: want one %s and one %s naming the prefix, got:\n%s", kindDown, kindRecovered, out)
	}
}

// prefixFailer fails the calls of one prefix while failing is set.
type prefixFailer struct {
	*fake
	failing *atomic.Bool
	bad     string
}

func (p *prefixFailer) Update(ctx context.Context, prefix string, keys []string, apply ApplyFunc) error {
	if prefix == p.bad && p.failing.Load() {
		return errBoom
	}
	return p.fake.Update(ctx, prefix, keys, apply)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A spread handle keeps a breaker per part: a store failing for the keys of
// one part (a Redis Cluster master down) refuses only those keys, while the
// breaker of a handle that is not spread refuses them all. A call naming
// keys of two parts of a spread handle is refused as invalid.
func TestBreakerPerPart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread bool
		parts  int  // what Spread returns
		good   bool // whether a key of a healthy part is answered while another part fails
	}{
		{"together", false, 1, false},
		{"spread", true, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failing atomic.Bool
			f := &fake{update: func(_ context.Context, apply ApplyFunc) error {
				return apply(time.Now(), make([]Entry, 1))
			}}
			s := New(&partFailer{fake: f, failing: &failing}, Options{
				Logger:  slog.New(slog.DiscardHandler),
				Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour},
			})
			defer s.Close()
			h, _ := s.Handle("p:")
			if tc.spread {
				if n := h.Spread(); n != tc.parts {
					t.Fatalf("Spread() = %d, want %d", n, tc.parts)
				}
			}
			failing.Store(true)
			for range 5 {
				h.Update(t.Context(), []string{"1-down"}, nop)
			}
			err := h.Update(t.Context(), []string{"0-up"}, nop)
			if (err == nil) != tc.good {
				t.Errorf("a key of a healthy part while part 1 fails: %v; want answered %v", err, tc.good)
			}
			if !h.BreakerOpen() {
				t.Error("BreakerOpen() = false while part 1's calls fail")
			}
			if !tc.spread {
				return
			}
			if err := h.Update(t.Context(), []string{"0-a", "2-b"}, nop); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("a call naming keys of two parts: %v, want %v", err, ErrInvalidKey)
			}
			if _, err := h.Read(t.Context(), []string{"0-a", "0-b"}); err != nil {
				t.Errorf("a call naming two keys of one healthy part: %v", err)
			}
		})
	}
}

// partFailer spreads keys over four parts, by their first byte ('0' to
// '3'), and fails the calls of part 1 while failing is set.
type partFailer struct {
	*fake
	failing *atomic.Bool
}

func (p *partFailer) Spread(string) int { return 4 }

func (p *partFailer) Part(_ string, keys []string) (int, bool) {
	part := int(keys[0][0] - '0')
	for _, k := range keys[1:] {
		if int(k[0]-'0') != part {
			return 0, false
		}
	}
	return part, true
}

func (p *partFailer) Update(ctx context.Context, prefix string, keys []string, apply ApplyFunc) error {
	if keys[0][0] == '1' && p.failing.Load() {
		return errBoom
	}
	return p.fake.Update(ctx, prefix, keys, apply)
}

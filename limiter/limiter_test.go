package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newLimiter returns a limiter on a fresh memory store read through clk.
func newLimiter(t *testing.T, clk *clock.Fake, o limiter.Options) *limiter.Limiter {
	t.Helper()
	mo := memory.Options{}
	if clk != nil {
		mo.Now = clk.Now
	}
	s := memory.New(mo)
	t.Cleanup(func() { s.Close() })
	h, err := s.Handle("test:")
	if err != nil {
		t.Fatal(err)
	}
	if o.Name == "" {
		o.Name = "test"
	}
	l, err := limiter.New(h, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestBudgetValidate(t *testing.T) {
	for _, tc := range []struct {
		b  limiter.Budget
		ok bool
	}{
		{limiter.Budget{Limit: 5, Window: 15 * time.Minute}, true},
		{limiter.Budget{Limit: 1, Window: time.Second}, true},
		{limiter.Budget{Limit: 0, Window: time.Minute}, false},
		{limiter.Budget{Limit: -3, Window: time.Minute}, false},
		{limiter.Budget{Limit: limiter.MaxLimit + 1, Window: time.Minute}, false},
		{limiter.Budget{Limit: 5, Window: 0}, false},
		{limiter.Budget{Limit: 5, Window: -time.Minute}, false},
		{limiter.Budget{Limit: 5, Window: 10 * time.Millisecond}, false},
		{limiter.Budget{Limit: 5, Window: 400 * 24 * time.Hour}, false},
		{limiter.Budget{Limit: 5, Window: time.Second + time.Microsecond}, false},
	} {
		err := tc.b.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%v: Validate() = %v, want ok=%v", tc.b, err, tc.ok)
		}
		if err != nil && !errors.Is(err, limiter.ErrInvalidBudget) {
			t.Errorf("%v: error %v does not match ErrInvalidBudget", tc.b, err)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("p:")
	if _, err := limiter.New(h, limiter.Options{Name: "x", Budget: limiter.Budget{Limit: 0, Window: time.Minute}}); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Errorf("zero limit: %v", err)
	}
	if _, err := limiter.New(h, limiter.Options{Budget: limiter.Budget{Limit: 1, Window: time.Minute}}); err == nil {
		t.Error("no name accepted")
	}
	if _, err := limiter.New(nil, limiter.Options{Name: "x", Budget: limiter.Budget{Limit: 1, Window: time.Minute}}); err == nil {
		t.Error("nil handle accepted")
	}
	if _, err := limiter.New(h, limiter.Options{Name: "x", Budget: limiter.Budget{Limit: 1, Window: time.Minute}, Unavailable: 9}); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestHandleReuseRefused(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("shared:")
	b := limiter.Budget{Limit: 1, Window: time.Minute}
	if _, err := limiter.New(h, limiter.Options{Name: "execute", Budget: b}); err != nil {
		t.Fatal(err)
	}
	_, err := limiter.New(h, limiter.Options{Name: "health", Budget: b})
	var re *store.ReuseError
	if !errors.Is(err, store.ErrStoreReuse) || !errors.As(err, &re) || re.First != "execute" || re.Second != "health" {
		t.Fatalf("second limiter on one handle: %v", err)
	}
}

func TestExactUnderConcurrency(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 30, Window: time.Hour}})
	for _, keys := range [][]string{{"one"}, {"a", "b"}} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Attempt(context.Background(), keys...)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := admitted.Load(); got != 30 {
			t.Errorf("keys %v: %d of 200 admitted against a budget of 30", keys, got)
		}
	}
}

func TestWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 3, Window: time.Minute}})
	ctx := context.Background()
	clk.Advance(1500 * time.Millisecond)
	opened := clk.Now()
	for i := range 3 {
		d, _ := l.Attempt(ctx, "k")
		if !d.Allowed || d.Remaining != 2-i || d.Limit != 3 || !d.Reset.Equal(opened.Add(time.Minute)) || d.RetryAfter != 0 {
			t.Fatalf("attempt %d: %+v", i+1, d)
		}
		clk.Advance(10 * time.Second)
	}
	d, _ := l.Attempt(ctx, "k")
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != 30*time.Second || d.Limiting != 0 {
		t.Fatalf("over budget: %+v", d)
	}
	clk.Set(opened.Add(time.Minute - time.Millisecond))
	if d, _ := l.Attempt(ctx, "k"); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("a millisecond before reset: %+v", d)
	}
	clk.Set(opened.Add(time.Minute)) // the window's end: its count is gone
	d, _ = l.Attempt(ctx, "k")
	if !d.Allowed || d.Remaining != 2 || !d.Reset.Equal(opened.Add(2*time.Minute)) {
		t.Fatalf("at reset: %+v", d)
	}
}

func TestRefusedAttemptsDoNotExtendWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 1, Window: time.Minute}})
	ctx := context.Background()
	first, _ := l.Attempt(ctx, "k")
	for range 5 {
		clk.Advance(5 * time.Second)
		if d, _ := l.Attempt(ctx, "k"); d.Allowed || !d.Reset.Equal(first.Reset) {
			t.Fatalf("refused attempt moved the window: %+v", d)
		}
	}
}

func TestMultiKeyAllOrNothing(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 2, Window: time.Minute}})
	ctx := context.Background()
	l.Attempt(ctx, "b")
	l.Attempt(ctx, "b")
	d, _ := l.Attempt(ctx, "a", "b", "c")
	if d.Allowed || d.Limiting != 1 {
		t.Fatalf("b is full: %+v", d)
	}
	for _, k := range []string{"a", "c"} {
		if p, _ := l.Peek(ctx, k); p.Remaining != 2 {
			t.Errorf("%s charged by a refused attempt: %+v", k, p)
		}
	}
	d, _ = l.Attempt(ctx, "a", "c")
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("a, c: %+v", d)
	}
}

func TestAttemptEachBudgets(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 100, Window: time.Hour}})
	ctx := context.Background()
	tight := limiter.Budget{Limit: 2, Window: time.Minute}
	loose := limiter.Budget{Limit: 5, Window: time.Hour}
	for i := range 2 {
		d, err := l.AttemptEach(ctx, limiter.Charge{Key: "acct|ip", Budget: tight}, limiter.Charge{Key: "acct", Budget: loose})
		if err != nil || !d.Allowed || d.Limit != 2 || d.Remaining != 1-i {
			t.Fatalf("attempt %d: %+v %v", i, d, err)
		}
	}
	d, _ := l.AttemptEach(ctx, limiter.Charge{Key: "acct|ip", Budget: tight}, limiter.Charge{Key: "acct", Budget: loose})
	if d.Allowed || d.Limiting != 0 || d.Window != time.Minute {
		t.Fatalf("tight budget spent: %+v", d)
	}
	if _, err := l.AttemptEach(ctx, limiter.Charge{Key: "x", Budget: limiter.Budget{}}); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Fatalf("bad budget: %v", err)
	}
}

func TestInvalidKeys(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 1, Window: time.Minute}})
	ctx := context.Background()
	tooMany := make([]string, limiter.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = strconv.Itoa(i)
	}
	for _, keys := range [][]string{nil, {""}, {"a", "a"}, tooMany} {
		if _, err := l.Attempt(ctx, keys...); !errors.Is(err, limiter.ErrInvalidKeys) {
			t.Errorf("keys %q: %v", keys, err)
		}
	}
}

func TestPeekDoesNotCount(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 2, Window: time.Minute}})
	ctx := context.Background()
	for range 5 {
		if d, _ := l.Peek(ctx, "k"); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("peek: %+v", d)
		}
	}
	l.Attempt(ctx, "k")
	l.Attempt(ctx, "k")
	if d, _ := l.Peek(ctx, "k"); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("peek at budget: %+v", d)
	}
}

func TestRefund(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 2, Window: time.Minute}})
	ctx := context.Background()
	d1, _ := l.Attempt(ctx, "k")
	d2, _ := l.Attempt(ctx, "k")
	if err := l.Refund(ctx, d2); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k"); d.Remaining != 1 {
		t.Fatalf("after refund: %+v", d)
	}
	refused, _ := l.Attempt(ctx, "k")
	refused, _ = l.Attempt(ctx, "k")
	if refused.Allowed {
		t.Fatal("third attempt allowed")
	}
	if err := l.Refund(ctx, refused); !errors.Is(err, limiter.ErrNotRefundable) {
		t.Fatalf("refund of a refusal: %v", err)
	}
	// After the window resets, a refund of its attempt must not credit the
	// new window.
	clk.Advance(time.Minute)
	l.Attempt(ctx, "k")
	if err := l.Refund(ctx, d1); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k"); d.Remaining != 1 {
		t.Fatalf("stale refund credited the new window: %+v", d)
	}
}

func TestReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spent int      // keys k0, k1, … spent before the reset
		reset []string // the keys reset
		free  int      // how many of the spent keys are free after it
	}{
		{"one key", 1, []string{"k0"}, 1},
		{"several keys, one named twice", 3, []string{"k2", "k0", "k2"}, 2},
		{"more keys than one store update takes", 20, func() []string {
			var ks []string
			for i := range 20 {
				ks = append(ks, fmt.Sprintf("k%d", i))
			}
			return ks
		}(), 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 1, Window: time.Minute}})
			ctx := context.Background()
			for i := range tc.spent {
				l.Attempt(ctx, fmt.Sprintf("k%d", i))
			}
			if err := l.Reset(ctx, tc.reset...); err != nil {
				t.Fatal(err)
			}
			free := 0
			for i := range tc.spent {
				if d, _ := l.Attempt(ctx, fmt.Sprintf("k%d", i)); d.Allowed {
					free++
				}
			}
			if free != tc.free {
				t.Fatalf("%d of %d spent keys free after Reset(%q), want %d", free, tc.spent, tc.reset, tc.free)
			}
		})
	}
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 1, Window: time.Minute}})
	if err := l.Reset(context.Background()); !errors.Is(err, limiter.ErrInvalidKeys) {
		t.Fatalf("Reset of no keys: %v, want ErrInvalidKeys", err)
	}
}

// PeekEach reads each key under its own budget and counts nothing.
func TestPeekEach(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 10, Window: time.Minute}})
	ctx := context.Background()
	small := limiter.Budget{Limit: 2, Window: time.Minute}
	big := limiter.Budget{Limit: 10, Window: time.Hour}
	for range 2 {
		if _, err := l.AttemptEach(ctx, limiter.Charge{Key: "a", Budget: small}, limiter.Charge{Key: "b", Budget: big}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // twice: the first peek counted nothing
		d, err := l.PeekEach(ctx, limiter.Charge{Key: "a", Budget: small}, limiter.Charge{Key: "b", Budget: big}, limiter.Charge{Key: "c", Budget: big})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Limiting != 0 || d.RemainingOf(0) != 0 || d.RemainingOf(1) != 8 || d.RemainingOf(2) != 10 || d.ResetOf(0).IsZero() || !d.ResetOf(2).IsZero() {
			t.Fatalf("PeekEach = %+v, remaining %d %d %d; want a refused, 0, 8 and 10 left, c with no window", d, d.RemainingOf(0), d.RemainingOf(1), d.RemainingOf(2))
		}
	}
	if _, err := l.PeekEach(ctx, limiter.Charge{Key: "a"}); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Fatalf("PeekEach with the zero budget: %v, want ErrInvalidBudget", err)
	}
}

// flaky is a memory backend that can be taken down.
// remote is the memory backend as a store that does I/O sees it: without
// the guard's path for stores in process memory (store.Inline).
type remote interface {
	store.Backend
	store.Counter
	store.Sizer
}

type flaky struct {
	remote
	down atomic.Bool
}

var errDown = errors.New("connection refused")

func (f *flaky) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	if f.down.Load() {
		return errDown
	}
	return f.remote.Update(ctx, p, k, a)
}

func (f *flaky) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	if f.down.Load() {
		return errDown
	}
	return f.remote.Count(ctx, p, k, caps, n, t)
}

func (f *flaky) Read(ctx context.Context, p string, k []string) ([]store.Entry, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.remote.Read(ctx, p, k)
}

func newFlaky(t *testing.T, policy limiter.Policy) (*flaky, *limiter.Limiter) {
	t.Helper()
	o := store.Options{Breaker: store.BreakerOptions{Failures: -1}}.WithDefaults()
	f := &flaky{remote: memory.NewBackend(memory.Options{Store: o})}
	s := store.New(f, o)
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("f:")
	l, err := limiter.New(h, limiter.Options{Name: "flaky", Budget: limiter.Budget{Limit: 2, Window: time.Minute}, Unavailable: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return f, l
}

func TestUnavailablePolicies(t *testing.T) {
	ctx := context.Background()
	t.Run("deny", func(t *testing.T) {
		f, l := newFlaky(t, limiter.Deny)
		f.down.Store(true)
		d, err := l.Attempt(ctx, "k")
		if err != nil || d.Allowed || !d.Unavailable || !errors.Is(d.Cause, store.ErrUnavailable) || !errors.Is(d.Cause, errDown) {
			t.Fatalf("%+v %v", d, err)
		}
	})
	t.Run("allow", func(t *testing.T) {
		f, l := newFlaky(t, limiter.Allow)
		f.down.Store(true)
		for range 5 {
			d, err := l.Attempt(ctx, "k")
			if err != nil || !d.Allowed || !d.Unavailable {
				t.Fatalf("%+v %v", d, err)
			}
			if err := l.Refund(ctx, d); !errors.Is(err, limiter.ErrNotRefundable) {
				t.Fatalf("refund of an uncounted attempt: %v", err)
			}
		}
	})
	t.Run("local", func(t *testing.T) {
		f, l := newFlaky(t, limiter.Local)
		if d, _ := l.Attempt(ctx, "k"); !d.Allowed || d.Local {
			t.Fatalf("store up: %+v", d)
		}
		f.down.Store(true)
		// Counting in memory goes on from the store's last count, 1 of 2.
		for i := range 3 {
			d, _ := l.Attempt(ctx, "k")
			if d.Allowed != (i < 1) || d.Allowed && (!d.Unavailable || !d.Local) {
				t.Fatalf("store down, attempt %d: %+v", i, d)
			}
		}
		f.down.Store(false)
		// Back: memory holds the attempt admitted during the outage, so the
		// key stays refused for the rest of its window.
		if d, _ := l.Attempt(ctx, "k"); d.Allowed {
			t.Fatalf("store back, over budget: %+v", d)
		}
	})
}

func TestRefundOnlySomeKeys(t *testing.T) {
	l := newLimiter(t, nil, limiter.Options{Budget: limiter.Budget{Limit: 3, Window: time.Minute}})
	ctx := context.Background()
	d, _ := l.Attempt(ctx, "a", "b")
	if d.RemainingOf(0) != 2 || d.RemainingOf(1) != 2 || d.RemainingOf(5) != 0 {
		t.Fatalf("remaining: %+v", d)
	}
	if err := l.Credit(ctx, d, []int{1}); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Peek(ctx, "a"); p.Remaining != 2 {
		t.Errorf("a refunded: %+v", p)
	}
	if p, _ := l.Peek(ctx, "b"); p.Remaining != 3 {
		t.Errorf("b not refunded: %+v", p)
	}
}

func TestBlock(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 3, Window: time.Minute}})
	ctx := context.Background()
	l.Attempt(ctx, "k")
	if err := l.Block(ctx, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Attempt(ctx, "k")
	if d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("blocked: %+v", d)
	}
	clk.Advance(time.Hour - time.Millisecond)
	if d, _ := l.Attempt(ctx, "k"); d.Allowed {
		t.Fatalf("a millisecond before the block ends: %+v", d)
	}
	clk.Advance(time.Millisecond)
	if d, _ := l.Attempt(ctx, "k"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after the block: %+v", d)
	}
	if err := l.Block(ctx, "k", 0); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Fatalf("zero block: %v", err)
	}
}

// stuck is a memory backend whose updates wait until released.
type stuck struct {
	remote
	entered chan struct{}
	release chan struct{}
}

func (s *stuck) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	s.entered <- struct{}{}
	<-s.release
	return s.remote.Update(ctx, p, k, a)
}

func (s *stuck) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	s.entered <- struct{}{}
	<-s.release
	return s.remote.Count(ctx, p, k, caps, n, t)
}

// An overloaded store is not down: under Local and Allow alike the attempt
// is counted in memory, from the store's last count, never let through
// uncounted.
func TestOverloadedCountsInMemory(t *testing.T) {
	for _, policy := range []limiter.Policy{limiter.Local, limiter.Allow} {
		t.Run(policy.String(), func(t *testing.T) {
			o := store.Options{MaxInFlight: 1, Deadline: 200 * time.Millisecond, Breaker: store.BreakerOptions{Failures: -1}}.WithDefaults()
			b := &stuck{remote: memory.NewBackend(memory.Options{Store: o}), entered: make(chan struct{}, 1), release: make(chan struct{})}
			s := store.New(b, o)
			defer s.Close()
			h, _ := s.Handle("o:")
			l, err := limiter.New(h, limiter.Options{Name: "o", Budget: limiter.Budget{Limit: 3, Window: time.Minute}, Unavailable: policy})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			close(b.release)
			for range 2 { // the store counts 2 of 3
				if d, _ := l.Attempt(context.Background(), "k"); !d.Allowed || d.Unavailable {
					t.Fatalf("store answering: %+v", d)
				}
				<-b.entered
			}
			b.release = make(chan struct{})
			done := make(chan limiter.Decision)
			go func() { d, _ := l.Attempt(context.Background(), "other"); done <- d }()
			<-b.entered // the one call allowed in flight is in the store
			for i := range 3 {
				d, _ := l.Attempt(context.Background(), "k")
				if i == 0 && (!d.Allowed || !d.Local || store.ReasonOf(d.Cause) != store.ReasonOverloaded) {
					t.Fatalf("overloaded, attempt 3 of 3: %+v", d)
				}
				if i > 0 && d.Allowed {
					t.Fatalf("overloaded, attempt %d of 3 admitted: %+v", i+3, d)
				}
			}
			close(b.release)
			if d := <-done; !d.Allowed {
				t.Fatalf("the call in flight: %+v", d)
			}
		})
	}
}

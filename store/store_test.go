package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/internal/overload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a test Backend whose calls do what its fields say. A nil func
// succeeds with nothing stored.
type fake struct {
	update func(ctx context.Context, apply ApplyFunc) error
	sweep  func(ctx context.Context) (int, error)
	inline bool
	calls  atomic.Int64 // Update, Read and Sweep calls that reached it
	closes atomic.Int64
}

func (f *fake) Shared() bool { return false }
func (f *fake) Close() error { f.closes.Add(1); return nil }

// inlineFake is a fake on the guard's path for backends in process memory.
type inlineFake struct{ *fake }

func (f inlineFake) UpdateInline(prefix string, keys []string, apply, check ApplyFunc) (ofCaller bool, err error) {
	var mine error
	err = f.Update(context.Background(), prefix, keys, func(now time.Time, es []Entry) error {
		now = time.UnixMilli(now.UnixMilli())
		if mine = apply(now, es); mine == nil {
			mine = check(now, es)
		}
		return mine
	})
	if mine != nil && errors.Is(err, mine) {
		return true, mine
	}
	return false, err
}

// CountInline is ApplyCount through UpdateInline.
func (f inlineFake) CountInline(prefix string, keys [MaxCountKeys]string, caps []Budget, n int64) (t Tally, err error) {
	_, err = f.UpdateInline(prefix, keys[:len(caps)], func(now time.Time, es []Entry) error {
		return ApplyCount(now, es, caps, n, &t)
	}, checkApplied)
	return t, err
}

// CountOne is CountInline on one key.
func (f inlineFake) CountOne(prefix, key string, b Budget, n int64) (KeyTally, error) {
	t, err := f.CountInline(prefix, [MaxCountKeys]string{key}, []Budget{b}, n)
	return t.Key(), err
}

var _ Inline = inlineFake{}

func (f *fake) Update(ctx context.Context, _ string, keys []string, apply ApplyFunc) error {
	f.calls.Add(1)
	if f.update != nil {
		return f.update(ctx, apply)
	}
	return apply(time.Now(), make([]Entry, len(keys)))
}

func (f *fake) Read(ctx context.Context, _ string, keys []string) ([]Entry, error) {
	f.calls.Add(1)
	if f.update != nil {
		if err := f.update(ctx, func(time.Time, []Entry) error { return nil }); err != nil {
			return nil, err
		}
	}
	return make([]Entry, len(keys)), nil
}

func (f *fake) Sweep(ctx context.Context) (int, error) {
	f.calls.Add(1)
	if f.sweep != nil {
		return f.sweep(ctx)
	}
	return 0, nil
}

// backed is a fake that shares a Backing identity.
type backed struct {
	*fake
	id any
}

func (b backed) Backing() any { return b.id }

var quiet = slog.New(slog.DiscardHandler)

// open wraps b in a guard with opts, closed when the test ends.
func open(t *testing.T, b Backend, opts Options) (*Store, *Handle) {
	t.Helper()
	opts.Logger = quiet
	if f, ok := b.(*fake); ok && f.inline {
		b = inlineFake{f}
	}
	s := New(b, opts)
	t.Cleanup(func() { s.Close() })
	h, err := s.Handle("test:")
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

func nop(time.Time, []Entry) error { return nil }

// stuck is a backend call that blocks until released, reporting when it
// starts and when it returns.
type stuck struct {
	started  chan struct{}
	release  chan struct{}
	returned chan struct{}
	once     sync.Once
}

// newStuck returns a stuck that reports on up to calls calls (and blocks any more
// until read).
func newStuck(calls int) *stuck {
	calls += 100 // room for calls a test does not wait for
	return &stuck{started: make(chan struct{}, calls), release: make(chan struct{}), returned: make(chan struct{}, calls)}
}

func (s *stuck) free() { s.once.Do(func() { close(s.release) }) }

// ignoringCtx blocks until released, whatever ctx says, then calls apply.
func (s *stuck) ignoringCtx(_ context.Context, apply ApplyFunc) error {
	s.started <- struct{}{}
	defer func() { s.returned <- struct{}{} }()
	<-s.release
	return apply(time.Now(), make([]Entry, 1))
}

// heedingCtx blocks until ctx is done or it is released.
func (s *stuck) heedingCtx(ctx context.Context, apply ApplyFunc) error {
	s.started <- struct{}{}
	defer func() { s.returned <- struct{}{} }()
	select {
	case <-ctx.Done():
		return fmt.Errorf("backend gave up: %w", ctx.Err())
	case <-s.release:
		return apply(time.Now(), make([]Entry, 1))
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 10000 {
			t.Fatalf("%s: still not so after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDeadline(t *testing.T) {
	tests := []struct {
		name   string
		ignore bool
	}{
		{"backend heeds its context", false},
		{"backend ignores its context", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStuck(1)
			defer st.free()
			f := &fake{update: st.heedingCtx}
			if tt.ignore {
				f.update = st.ignoringCtx
			}
			s, h := open(t, f, Options{Deadline: 50 * time.Millisecond})
			var applied atomic.Bool
			err := h.Update(t.Context(), []string{"k"}, func(time.Time, []Entry) error {
				applied.Store(true)
				return nil
			})
			if !errors.Is(err, ErrUnavailable) || ReasonOf(err) != ReasonDeadline {
				t.Fatalf("Update past the deadline: %v, want unavailable (%v)", err, ReasonDeadline)
			}
			if tt.ignore {
				// The call still runs in the backend, and counts.
				if n := s.InFlight(); n != 1 {
					t.Errorf("InFlight = %d while the backend still runs, want 1", n)
				}
				st.free()
			}
			<-st.returned
			waitFor(t, "InFlight back to 0 once the backend returned", func() bool { return s.InFlight() == 0 })
			if applied.Load() {
				t.Error("apply ran after its caller was answered")
			}
		})
	}
}

func TestDeadlineRead(t *testing.T) {
	st := newStuck(1)
	_, h := open(t, &fake{update: st.heedingCtx}, Options{Deadline: 50 * time.Millisecond})
	_, err := h.Read(t.Context(), []string{"k"})
	if ReasonOf(err) != ReasonDeadline {
		t.Fatalf("Read past the deadline: %v, want %v", err, ReasonDeadline)
	}
	<-st.returned
}

func TestCallerCancels(t *testing.T) {
	st := newStuck(1)
	defer st.free()
	s, h := open(t, &fake{update: st.ignoringCtx}, Options{Breaker: BreakerOptions{Failures: 1}})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- h.Update(ctx, []string{"k"}, nop) }()
	<-st.started
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Errorf("Update whose caller gave up: %v, want %v and not unavailable", err, context.Canceled)
	}
	if s.BreakerOpen() {
		t.Error("the caller's own cancellation opened the breaker")
	}
	st.free()
	<-st.returned
}

var errBoom = errors.New("connection refused")

func TestBackendFails(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			f := &fake{
				inline: inline,
				update: func(context.Context, ApplyFunc) error { return fmt.Errorf("dial: %w", errBoom) },
				sweep:  func(context.Context) (int, error) { return 0, errBoom },
			}
			s, h := open(t, f, Options{Breaker: BreakerOptions{Failures: -1}})
			calls := []struct {
				name string
				call func() error
			}{
				{"Update", func() error { return h.Update(t.Context(), []string{"k"}, nop) }},
				{"Read", func() error { _, err := h.Read(t.Context(), []string{"k"}); return err }},
				{"Count", func() error {
					_, err := h.Count(t.Context(), []string{"k"}, []Budget{{Limit: 1, Window: time.Second}}, 1)
					return err
				}},
				{"Sweep", func() error { _, err := s.Sweep(t.Context()); return err }},
			}
			for _, c := range calls {
				err := c.call()
				if !errors.Is(err, ErrUnavailable) || ReasonOf(err) != ReasonDown || !errors.Is(err, errBoom) {
					t.Errorf("%s on a failing backend: %v, want unavailable (%v) wrapping %v", c.name, err, ReasonDown, errBoom)
				}
			}
		})
	}
}

func TestApplyErrorPassesThrough(t *testing.T) {
	errMine := errors.New("mine")
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			// The backend wraps apply's error, as a database driver might.
			f := &fake{inline: inline, update: func(_ context.Context, apply ApplyFunc) error {
				if err := apply(time.Now(), make([]Entry, 1)); err != nil {
					return fmt.Errorf("tx rolled back: %w", err)
				}
				return nil
			}}
			s, h := open(t, f, Options{Breaker: BreakerOptions{Failures: 1}})
			applies := []struct {
				name  string
				apply ApplyFunc
				want  error
			}{
				{"apply's own error", func(time.Time, []Entry) error { return errMine }, errMine},
				{"value too large", func(now time.Time, es []Entry) error {
					es[0] = Entry{Value: []byte(`"` + strings.Repeat("x", MaxValueSize) + `"`), ExpiresAt: now.Add(time.Hour)}
					return nil
				}, ErrInvalidValue},
				{"not JSON", func(now time.Time, es []Entry) error {
					es[0] = Entry{Value: []byte(`{`), ExpiresAt: now.Add(time.Hour)}
					return nil
				}, ErrInvalidValue},
			}
			for _, a := range applies {
				for range 3 {
					err := h.Update(t.Context(), []string{"k"}, a.apply)
					if !errors.Is(err, a.want) || errors.Is(err, ErrUnavailable) {
						t.Fatalf("%s: Update returned %v, want %v and not unavailable", a.name, err, a.want)
					}
					if a.want == errMine && err != errMine {
						t.Fatalf("%s: Update returned %v, want the very error apply returned", a.name, err)
					}
				}
				if s.BreakerOpen() {
					t.Fatalf("%s opened the breaker", a.name)
				}
			}
		})
	}
}

// breakerStore opens a store over a backend that fails while failing is
// set, with a breaker on a fake clock.
func breakerStore(t *testing.T, failures int) (*Store, *Handle, *fake, *atomic.Bool, *clock.Fake) {
	var failing atomic.Bool
	f := &fake{update: func(_ context.Context, apply ApplyFunc) error {
		if failing.Load() {
			return errBoom
		}
		return apply(time.Now(), make([]Entry, 1))
	}}
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	opts := Options{Logger: quiet, Breaker: BreakerOptions{Failures: failures, Cooldown: time.Minute}}
	s := New(f, opts)
	s.now = clk.Now
	t.Cleanup(func() { s.Close() })
	h, err := s.Handle("breaker:")
	if err != nil {
		t.Fatal(err)
	}
	return s, h, f, &failing, clk
}

func TestBreaker(t *testing.T) {
	const failures = 3
	s, h, f, failing, clk := breakerStore(t, failures)
	ctx := t.Context()
	update := func() error { return h.Update(ctx, []string{"k"}, nop) }

	failing.Store(true)
	for i := range failures {
		if s.BreakerOpen() {
			t.Fatalf("breaker open after %d failures, want %d", i, failures)
		}
		if err := update(); ReasonOf(err) != ReasonDown || !errors.Is(err, errBoom) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if !s.BreakerOpen() {
		t.Fatalf("breaker closed after %d failures", failures)
	}
	// Open: answered at once, without calling the backend.
	failing.Store(false)
	before := f.calls.Load()
	for range 5 {
		err := update()
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("Update while the breaker is open: %v, want unavailable (%v)", err, ErrBreakerOpen)
		}
	}
	if n := f.calls.Load() - before; n != 0 {
		t.Fatalf("backend called %d times while the breaker was open", n)
	}
	// After the cooldown, a failing probe opens it again.
	failing.Store(true)
	clk.Advance(time.Minute)
	if err := update(); !errors.Is(err, errBoom) {
		t.Fatalf("probe after the cooldown: %v, want the backend's failure", err)
	}
	if f.calls.Load()-before != 1 {
		t.Fatalf("probe did not reach the backend")
	}
	if err := update(); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("Update after a failed probe: %v, want %v", err, ErrBreakerOpen)
	}
	// A succeeding probe closes it.
	failing.Store(false)
	clk.Advance(time.Minute)
	if err := update(); err != nil {
		t.Fatalf("probe after the second cooldown: %v", err)
	}
	if s.BreakerOpen() {
		t.Fatal("breaker still open after a probe succeeded")
	}
	for range failures - 1 { // the count of failures starts again
		failing.Store(true)
		update()
	}
	if s.BreakerOpen() {
		t.Fatalf("breaker open after %d failures following a success, want %d", failures-1, failures)
	}
}

// A busy backend is neither failing nor healthy: an overloaded answer (a
// wait for a connection of its pool past the deadline) never opens the
// breaker, never closes it, and a probe answered so lets the next call
// probe, so that an open breaker cannot stay open for good.
func TestBreakerIgnoresOverload(t *testing.T) {
	const failures = 2
	var answer atomic.Pointer[error] // the backend's error; nil succeeds
	var overloaded error = &UnavailableError{Reason: ReasonOverloaded, Err: overload.ErrWaitedOut}
	f := &fake{update: func(_ context.Context, apply ApplyFunc) error {
		if err := answer.Load(); err != nil {
			return *err
		}
		return apply(time.Now(), make([]Entry, 1))
	}}
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := New(f, Options{Logger: quiet, Breaker: BreakerOptions{Failures: failures, Cooldown: time.Second}})
	s.now = clk.Now
	defer s.Close()
	h, _ := s.Handle("busy:")
	update := func() error { return h.Update(t.Context(), []string{"k"}, nop) }

	answer.Store(&overloaded)
	for range 10 {
		if err := update(); ReasonOf(err) != ReasonOverloaded {
			t.Fatalf("busy backend: %v, want overloaded", err)
		}
	}
	if s.BreakerOpen() {
		t.Fatal("overloaded answers opened the breaker")
	}
	answer.Store(&errBoom)
	for range failures {
		update()
	}
	if !s.BreakerOpen() {
		t.Fatal("breaker closed after failures")
	}
	answer.Store(&overloaded)
	clk.Advance(time.Second)
	if err := update(); ReasonOf(err) != ReasonOverloaded {
		t.Fatalf("probe: %v, want overloaded", err)
	}
	if !s.BreakerOpen() {
		t.Fatal("an overloaded probe closed the breaker")
	}
	answer.Store(nil)
	if err := update(); err != nil {
		t.Fatalf("the call after an overloaded probe: %v, want it to probe and succeed", err)
	}
	if s.BreakerOpen() {
		t.Fatal("breaker open after a probe succeeded")
	}
}

func TestBreakerOneProbe(t *testing.T) {
	st := newStuck(1)
	defer st.free()
	var failing atomic.Bool
	failing.Store(true)
	f := &fake{update: func(ctx context.Context, apply ApplyFunc) error {
		if failing.Load() {
			return errBoom
		}
		return st.ignoringCtx(ctx, apply)
	}}
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := New(f, Options{Logger: quiet, Breaker: BreakerOptions{Failures: 1, Cooldown: time.Second}})
	s.now = clk.Now
	defer s.Close()
	h, _ := s.Handle("probe:")
	h.Update(t.Context(), []string{"k"}, nop)
	if !s.BreakerOpen() {
		t.Fatal("breaker closed after a failure")
	}
	failing.Store(false)
	clk.Advance(time.Second)
	probe := make(chan error, 1)
	go func() { probe <- h.Update(context.Background(), []string{"k"}, nop) }()
	<-st.started
	if err := h.Update(t.Context(), []string{"k"}, nop); !errors.Is(err, ErrBreakerOpen) {
		t.Errorf("Update while the probe runs: %v, want %v", err, ErrBreakerOpen)
	}
	st.free()
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if s.BreakerOpen() {
		t.Fatal("breaker open after the probe succeeded")
	}
}

func TestBreakerCountsDeadlines(t *testing.T) {
	st := newStuck(2)
	defer st.free()
	f := &fake{update: st.heedingCtx}
	s, h := open(t, f, Options{Deadline: 20 * time.Millisecond, Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour}})
	for range 2 {
		if err := h.Update(t.Context(), []string{"k"}, nop); ReasonOf(err) != ReasonDeadline {
			t.Fatalf("Update past the deadline: %v", err)
		}
		<-st.returned
	}
	if !s.BreakerOpen() {
		t.Fatal("breaker closed after two calls past the deadline")
	}
}

func TestBreakerIgnoresCallerErrors(t *testing.T) {
	f := &fake{update: func(context.Context, ApplyFunc) error { return ErrFull }}
	s, h := open(t, f, Options{Breaker: BreakerOptions{Failures: 1}})
	for range 3 {
		if err := h.Update(t.Context(), []string{"k"}, nop); ReasonOf(err) != ReasonFull {
			t.Fatalf("Update on a full store: %v, want %v", err, ReasonFull)
		}
		if err := h.Update(t.Context(), []string{""}, nop); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("Update of an empty key: %v, want %v", err, ErrInvalidKey)
		}
	}
	if s.BreakerOpen() {
		t.Fatal("a full store or bad keys opened the breaker")
	}
}

func TestClaim(t *testing.T) {
	_, h := open(t, &fake{}, Options{})
	if err := h.Claim("signin"); err != nil {
		t.Fatal(err)
	}
	err := h.Claim("reset")
	var re *ReuseError
	if !errors.Is(err, ErrStoreReuse) || !errors.As(err, &re) {
		t.Fatalf("second Claim: %v, want a *ReuseError matching ErrStoreReuse", err)
	}
	if re.Prefix != "test:" || re.First != "signin" || re.Second != "reset" {
		t.Errorf("ReuseError = %+v, want prefix test:, first signin, second reset", *re)
	}
	for _, name := range []string{`"signin"`, `"reset"`, `"test:"`} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if h.Owner() != "signin" {
		t.Errorf("Owner = %q after a refused claim, want signin", h.Owner())
	}

	_, h2 := open(t, &fake{}, Options{})
	h2.Claim("")
	if err := h2.Claim("x"); !errors.As(err, &re) || re.First != "(unnamed)" {
		t.Errorf("Claim after an unnamed claim: %v, want it named (unnamed)", err)
	}
}

func TestDuplicatePrefix(t *testing.T) {
	s1, _ := open(t, &fake{}, Options{})
	if _, err := s1.Handle("test:"); !errors.Is(err, ErrDuplicatePrefix) {
		t.Fatalf("second handle with one prefix on one store: %v, want %v", err, ErrDuplicatePrefix)
	}

	// Two Stores over one backing share its prefixes.
	id := new(int)
	a := New(backed{&fake{}, id}, Options{Logger: quiet})
	defer a.Close()
	b := New(backed{&fake{}, id}, Options{Logger: quiet})
	defer b.Close()
	if _, err := a.Handle("shared:"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handle("shared:"); !errors.Is(err, ErrDuplicatePrefix) {
		t.Fatalf("a prefix taken on the same backing through another Store: %v, want %v", err, ErrDuplicatePrefix)
	}
	if _, err := b.Handle("shared-2:"); err != nil {
		t.Fatalf("another prefix on the same backing: %v", err)
	}
	// A Store over another backing has prefixes of its own.
	c := New(backed{&fake{}, new(int)}, Options{Logger: quiet})
	defer c.Close()
	if _, err := c.Handle("shared:"); err != nil {
		t.Fatalf("a prefix on another backing: %v", err)
	}
	// Closing frees the prefix.
	a.Close()
	if _, err := b.Handle("shared:"); err != nil {
		t.Fatalf("a prefix once the Store holding it closed: %v", err)
	}
}

func TestInvalidPrefix(t *testing.T) {
	s := New(&fake{}, Options{Logger: quiet})
	defer s.Close()
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", false},
		{strings.Repeat("p", MaxPrefixLen+1), false},
		{strings.Repeat("p", MaxPrefixLen), true},
		{"p", true},
	}
	for _, tt := range tests {
		_, err := s.Handle(tt.prefix)
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("Handle of a %d-byte prefix: %v, want ok %v", len(tt.prefix), err, tt.ok)
		}
	}
}

func TestCloseWaitsForCalls(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	st := newStuck(1)
	defer st.free()
	f := &fake{update: st.ignoringCtx}
	s := New(f, Options{Logger: quiet, Deadline: 20 * time.Millisecond})
	h, _ := s.Handle("close:")
	if err := h.Update(t.Context(), []string{"k"}, nop); ReasonOf(err) != ReasonDeadline {
		t.Fatalf("Update past the deadline: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	waitFor(t, "new calls refused once Close began", func() bool {
		return ReasonOf(h.Update(t.Context(), []string{"k"}, nop)) == ReasonClosed
	})
	select {
	case <-closed:
		t.Fatal("Close returned while a backend call still ran")
	default:
	}
	if f.closes.Load() != 0 {
		t.Fatal("backend closed while a call still ran")
	}
	st.free()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-st.returned
	if f.closes.Load() != 1 {
		t.Errorf("backend closed %d times, want 1", f.closes.Load())
	}
	if err := s.Close(); err != nil || f.closes.Load() != 1 {
		t.Errorf("second Close: %v, backend closed %d times, want nil and 1", err, f.closes.Load())
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		ReasonDown: "down", ReasonDeadline: "deadline", ReasonOverloaded: "overloaded",
		ReasonFull: "full", ReasonClosed: "closed", Reason(99): "Reason(99)",
	} {
		if r.String() != want {
			t.Errorf("Reason(%d).String() = %q, want %q", r, r.String(), want)
		}
	}
	if ReasonOf(io.EOF) != 0 || ReasonOf(nil) != 0 {
		t.Error("ReasonOf of an error that is not unavailable is not 0")
	}
}

// An inline backend's calls are outside the in-flight bound: with a bound
// of one, a second call runs while the first is still inside the backend,
// and a closed store refuses new calls.
func TestInlineNotBounded(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	f := &fake{inline: true, update: func(_ context.Context, apply ApplyFunc) error {
		if n.Add(1) == 1 {
			close(inside)
			<-release
		}
		return apply(time.Now(), make([]Entry, 1))
	}}
	s, h := open(t, f, Options{MaxInFlight: 1})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.Update(context.Background(), []string{"a"}, nop); err != nil {
			t.Errorf("first call: %v", err)
		}
	})
	<-inside
	if err := h.Update(context.Background(), []string{"b"}, nop); err != nil {
		t.Errorf("second call while the first is inside an inline backend: %v", err)
	}
	if s.InFlight() != 0 {
		t.Errorf("InFlight() = %d for inline calls, want 0", s.InFlight())
	}
	close(release)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Update(context.Background(), []string{"c"}, nop); !errors.Is(err, ErrUnavailable) || ReasonOf(err) != ReasonClosed {
		t.Errorf("Update after Close: %v, want unavailable (%v)", err, ReasonClosed)
	}
}

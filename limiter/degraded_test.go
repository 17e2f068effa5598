package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/gatecount/gatecount/store/storekit"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// counting is a memory backend that does "I/O" (it is not inline) and
// counts the calls that reach it.
type counting struct {
	flaky
	calls atomic.Int64
}

func (c *counting) Shared() bool { return true }

func (c *counting) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	if p == "c:" { // not the store's own announcements
		c.calls.Add(1)
	}
	return c.flaky.Update(ctx, p, k, a)
}

func (c *counting) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	c.calls.Add(1)
	return c.flaky.Count(ctx, p, k, caps, n, t)
}

func newCounting(t *testing.T, policy limiter.Policy, budget limiter.Budget, maxEntries int) (*counting, *limiter.Limiter) {
	t.Helper()
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 250 * time.Millisecond}.WithDefaults()
	c := &counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o, MaxEntries: maxEntries})}}
	s := store.New(c, o)
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("c:")
	l, err := limiter.New(h, limiter.Options{Name: "counting", Budget: budget, Unavailable: policy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if policy != limiter.Deny {
		announced(t, s)
	}
	t.Cleanup(func() { l.Close() })
	return c, l
}

// A key the store refused is refused from memory, with no store call, until
// a refund through this instance; every policy alike.
func TestRefusedFromMemory(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	for _, policy := range []limiter.Policy{limiter.Deny, limiter.Allow, limiter.Local} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			c, l := newCounting(t, policy, limiter.Budget{Limit: 3, Window: time.Minute}, 0)
			var last limiter.Decision
			for range 3 {
				last, _ = l.Attempt(ctx, "k")
				if !last.Allowed {
					t.Fatalf("within budget: %+v", last)
				}
			}
			before := c.calls.Load()
			for range 1000 {
				d, err := l.Attempt(ctx, "k")
				if err != nil || d.Allowed || !d.Remembered || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
					t.Fatalf("spent key: %+v %v", d, err)
				}
				if limiter.OutcomeOf(&d) != limiter.DeniedMemory {
					t.Fatalf("outcome %v, want %v", limiter.OutcomeOf(&d), limiter.DeniedMemory)
				}
			}
			if n := c.calls.Load() - before; n != 0 {
				t.Errorf("1000 attempts on a spent key made %d store calls, want 0", n)
			}
			// Another key of the attempt that memory shows spent refuses it too.
			if d, _ := l.Attempt(ctx, "fresh", "k"); d.Allowed || !d.Remembered || d.Limiting != 1 {
				t.Fatalf("attempt with a spent key: %+v", d)
			}
			if err := l.Refund(ctx, last); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Attempt(ctx, "k"); !d.Allowed || d.Remembered {
				t.Fatalf("after a refund through this instance: %+v", d)
			}
		})
	}
}

// Nothing is admitted from memory: concurrent attempts on a store that
// answers admit exactly the budget, memory only sparing store calls.
func TestMemoryKeepsAdmissionExact(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	_, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 30, Window: time.Minute}, 0)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() {
			if d, _ := l.Attempt(ctx, "k"); d.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 30 {
		t.Fatalf("admitted %d of 500, want 30", n)
	}
}

// An outage after a key was refused never hands it a fresh budget, and a
// key seen counted goes on from its count.
func TestOutageKeepsCounts(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	for _, policy := range []limiter.Policy{limiter.Local, limiter.Allow} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			c, l := newCounting(t, policy, limiter.Budget{Limit: 5, Window: time.Minute}, 0)
			for range 6 {
				l.Attempt(ctx, "spent")
			}
			for range 3 {
				l.Attempt(ctx, "some")
			}
			c.down.Store(true)
			for range 20 {
				if d, _ := l.Attempt(ctx, "spent"); d.Allowed {
					t.Fatalf("spent key during an outage: %+v", d)
				}
			}
			if policy == limiter.Allow {
				return // down: the rest is let through uncounted, as documented
			}
			admitted := 0
			for range 20 {
				if d, _ := l.Attempt(ctx, "some"); d.Allowed {
					admitted++
				}
			}
			if admitted != 2 {
				t.Errorf("key at 3 of 5 admitted %d more during the outage, want 2", admitted)
			}
			for range 5 { // a key the store never saw, spent in memory
				l.Attempt(ctx, "new")
			}
			c.down.Store(false)
			// Back: the store would open a fresh window for it, but the
			// attempts admitted in memory still count until theirs ends.
			for range 5 {
				if d, _ := l.Attempt(ctx, "new"); d.Allowed {
					t.Fatalf("key spent in memory, store back: %+v", d)
				}
			}
		})
	}
}

// A full store still counts the keys it holds: a held key that is spent
// refuses the attempt, and only the new key falls to the policy.
func TestFullStoreCountsHeldKeys(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	budget := limiter.Budget{Limit: 5, Window: time.Minute}
	setup := func(t *testing.T, policy limiter.Policy) (*counting, *limiter.Limiter) {
		c, l := newCounting(t, policy, budget, 10)
		for range 3 {
			if d, _ := l.Attempt(ctx, "account"); !d.Allowed {
				t.Fatalf("filling: %+v", d)
			}
		}
		fill := 9
		if policy != limiter.Deny {
			fill-- // the entry that counts the store's members
		}
		for i := range fill { // the store is full
			if d, _ := l.Attempt(ctx, "flood-"+string(rune('a'+i))); !d.Allowed || d.Unavailable {
				t.Fatalf("filling: %+v", d)
			}
		}
		return c, l
	}
	t.Run("local", func(t *testing.T) {
		c, l := setup(t, limiter.Local)
		admitted := 0
		for i := range 10 {
			d, _ := l.Attempt(ctx, "new-"+string(rune('a'+i)), "account")
			if d.Allowed {
				admitted++
				if !d.Local || store.ReasonOf(d.Cause) != store.ReasonFull {
					t.Fatalf("admitted with a full store: %+v", d)
				}
			}
		}
		if admitted != 2 {
			t.Fatalf("held key at 3 of 5 admitted %d attempts with new keys, want 2", admitted)
		}
		e, _ := c.remote.Read(ctx, "c:", []string{"account"})
		if string(e[0].Value) != "5" {
			t.Errorf("held key's count in the store is %s, want 5", e[0].Value)
		}
		// A new key spent in memory refuses, and gives the held key back.
		c2, l2 := setup(t, limiter.Local)
		for range 5 {
			l2.Attempt(ctx, "new-z")
		}
		if d, _ := l2.Attempt(ctx, "new-z", "account"); d.Allowed || d.Limiting != 0 {
			t.Fatalf("new key spent in memory: %+v", d)
		}
		if e, _ := c2.remote.Read(ctx, "c:", []string{"account"}); string(e[0].Value) != "3" {
			t.Errorf("held key's count after a refusal is %s, want 3", e[0].Value)
		}
	})
	t.Run("local, memory full", func(t *testing.T) {
		// Memory is bounded by the store's bound: new keys counted alone
		// fill it. Then a new key is refused as counted alone, a 429,
		// never as an outage (a 503), and the held key is given back.
		c, l := setup(t, limiter.Local)
		var d limiter.Decision
		// Memory is full once three new keys in a row are refused. One
		// alone may share a slot with a key memory forgot (see
		// TestForgottenKeyGetsNoFreshShare), which is refused too.
		for i, refused := 0, 0; refused < 3; i++ {
			if d, _ = l.Attempt(ctx, fmt.Sprintf("solo-%d", i)); d.Allowed {
				refused = 0
			} else {
				refused++
			}
			if i == 40 {
				t.Fatal("memory of 10 entries never filled")
			}
		}
		if o := limiter.OutcomeOf(&d); o != limiter.DeniedLocal || d.RetryAfter != budget.Window {
			t.Fatalf("a new key with store and memory full: %v, %+v; want denied_local, Retry-After the window it would open", o, d)
		}
		d, _ = l.Attempt(ctx, "new", "account")
		if o := limiter.OutcomeOf(&d); o != limiter.DeniedLocal || d.Limiting != 0 {
			t.Fatalf("a new key beside a held one, store and memory full: %v, %+v; want denied_local by the new key", o, d)
		}
		if e, _ := c.remote.Read(ctx, "c:", []string{"account"}); string(e[0].Value) != "3" {
			t.Errorf("held key's count after the refusal is %s, want 3: given back", e[0].Value)
		}
	})
	t.Run("deny", func(t *testing.T) {
		_, l := setup(t, limiter.Deny)
		d, _ := l.Attempt(ctx, "new", "account")
		if d.Allowed || !d.Unavailable {
			t.Fatalf("new key under Deny: %+v", d)
		}
		for range 2 {
			l.Attempt(ctx, "account")
		}
		if d, _ := l.Attempt(ctx, "new", "account"); d.Allowed || d.Unavailable || d.Limiting != 1 {
			t.Fatalf("held key spent: %+v, want the store's own refusal", d)
		}
	})
	t.Run("allow", func(t *testing.T) {
		_, l := setup(t, limiter.Allow)
		admitted := 0
		for i := range 10 {
			if d, _ := l.Attempt(ctx, "new-"+string(rune('a'+i)), "account"); d.Allowed {
				admitted++
			}
		}
		if admitted != 2 {
			t.Fatalf("Allow with a full store admitted %d, want 2: full is not down", admitted)
		}
	})
}

// The memory store as the limiter's store: a flood of new keys that fills
// it never restarts a held key from zero.
func TestFullMemoryStoreHeldKeys(t *testing.T) {
	ctx := context.Background()
	s := memory.New(memory.Options{MaxEntries: 5, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, _ := s.Handle("m:")
	l, err := limiter.New(h, limiter.Options{Name: "m", Budget: limiter.Budget{Limit: 20, Window: time.Hour}, Unavailable: limiter.Local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fh, _ := s.Handle("flood:")
	flood, err := limiter.New(fh, limiter.Options{Name: "flood", Budget: limiter.Budget{Limit: 20, Window: time.Hour}, Unavailable: limiter.Allow, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	for range 15 {
		l.Attempt(ctx, "alice")
	}
	for i := range 100 { // another limiter's flood fills the store and its own memory
		flood.Attempt(ctx, "ip-"+string(rune('a'+i)))
	}
	admitted := 0
	for i := range 40 {
		if d, _ := l.Attempt(ctx, "addr-"+string(rune('a'+i)), "alice"); d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("alice at 15 of 20 admitted %d more once the store was full, want 5", admitted)
	}
}

// Allow lets an attempt through uncounted only when the store is down.
func TestAllowOnlyWhenDown(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Allow, limiter.Budget{Limit: 1, Window: time.Minute}, 0)
	c.down.Store(true)
	for range 3 {
		d, _ := l.Attempt(ctx, "k")
		if !d.Allowed || d.Local || !d.Unavailable || !errors.Is(d.Cause, store.ErrUnavailable) {
			t.Fatalf("down: %+v", d)
		}
	}
}

// The limiter's memory is bounded by the store's own bound when it is
// smaller than the default.
func TestMemoryBoundedByStore(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 5, Window: time.Minute}, 8)
	c.down.Store(true)
	admitted := 0
	for i := range 20 {
		if d, _ := l.Attempt(ctx, "k-"+string(rune('a'+i))); d.Allowed {
			admitted++
		}
	}
	if admitted != 8 {
		t.Fatalf("counting alone admitted %d new keys, want the store's bound, 8", admitted)
	}
}

// announced waits until s has counted the instances that share it, as a
// shared store does in the background once it opens.
func announced(t *testing.T, s *store.Store) {
	t.Helper()
	for i := 0; s.Members() == 0; i++ {
		if i == 1000 {
			t.Fatal("the store did not count its members within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// aloneLimiter returns a limiter under Local, with process memory of
// maxEntries, on a shared store that announces every 10 ms, once the store
// has counted its members.
func aloneLimiter(t *testing.T, name string, maxEntries int) (*counting, *limiter.Limiter) {
	t.Helper()
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 10 * time.Millisecond}.WithDefaults()
	c := &counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}}
	s := store.New(c, o)
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("c:")
	l, err := limiter.New(h, limiter.Options{Name: name, Budget: limiter.Budget{Limit: 5, Window: time.Minute},
		Unavailable: limiter.Local, Logger: quiet, LocalMaxEntries: maxEntries})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	announced(t, s)
	return c, l
}

// fillAlone makes attempts on new keys, prefix and a number, until one is
// refused, and returns how many were admitted before it. Memory being
// full, the refusal must be a count's (denied_local), never an outage's.
// It fails the test past most attempts.
func fillAlone(ctx context.Context, t *testing.T, l *limiter.Limiter, prefix string, most int) int {
	t.Helper()
	for i := 0; ; i++ {
		d, err := l.Attempt(ctx, fmt.Sprint(prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			if got := limiter.OutcomeOf(&d); got != limiter.DeniedLocal {
				t.Fatalf("new key %s%d, memory full: %v, want %v", prefix, i, got, limiter.DeniedLocal)
			}
			return i
		}
		if i == most {
			t.Fatalf("memory never filled in %d attempts", most)
		}
	}
}

// A refund the store cannot take is kept and lands once the store answers
// again: the attempt it gave back is admitted then.
func TestRefundLandsAfterOutage(t *testing.T) {
	ctx := context.Background()
	c, l := newCounting(t, limiter.Deny, limiter.Budget{Limit: 1, Window: time.Minute}, 0)
	d, _ := l.Attempt(ctx, "k")
	if !d.Allowed {
		t.Fatalf("first attempt: %+v", d)
	}
	c.down.Store(true)
	if err := l.Refund(ctx, d); err != nil {
		t.Fatalf("refund while the store is down: %v, want it kept for later", err)
	}
	c.down.Store(false)
	for i := 0; ; i++ {
		if d, _ := l.Attempt(ctx, "k"); d.Allowed {
			break
		}
		if i == 200 {
			t.Fatal("the refund did not land within 10 s of the store's return")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gated is a shared store whose calls on the limiter's handle wait at the
// gate while it is shut, until it is opened; entered hears of each such
// call.
type gated struct {
	counting
	entered chan struct{}

	mu   sync.Mutex
	shut bool
	open chan struct{} // closed when the gate opens
}

func (g *gated) gate(p string) {
	g.mu.Lock()
	shut, open := g.shut && p == "c:", g.open
	g.mu.Unlock()
	if shut {
		g.entered <- struct{}{}
		<-open
	}
}

// close shuts the gate.
func (g *gated) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = true
}

// release opens the gate, letting the calls waiting at it go on.
func (g *gated) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.shut = false
		close(g.open)
		g.open = make(chan struct{})
	}
}

func (g *gated) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	g.gate(p)
	return g.counting.Update(ctx, p, k, a)
}

func (g *gated) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	g.gate(p)
	return g.counting.Count(ctx, p, k, caps, n, t)
}

// gatedLimiter returns a limiter with the budget limit a minute, on a gated
// store with one slot and the Local policy, and the store.
func gatedLimiter(t *testing.T, limit int) (*limiter.Limiter, *gated) {
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, MaxInFlight: 1, Deadline: time.Hour}.WithDefaults()
	g := &gated{counting: counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}},
		entered: make(chan struct{}, 16), open: make(chan struct{})}
	s := store.New(g, o)
	t.Cleanup(func() { s.Close() })
	t.Cleanup(g.release) // registered before the limiter's: runs after it
	h, _ := s.Handle("c:")
	l, err := limiter.New(h, limiter.Options{Name: "gated", Budget: limiter.Budget{Limit: limit, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Cleanup(g.release) // runs first, so that nothing waits on the gate
	announced(t, s)
	return l, g
}

// A credit never waits for a busy store on its caller's goroutine (a
// request's, whose answer and the server's shutdown would wait too): with
// the store's one slot held by a call that does not return, a refund
// returns at once, and the outbox lands it once the store answers.
func TestCreditNeverWaitsForBusyStore(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	l, g := gatedLimiter(t, 5)
	d, err := l.Attempt(ctx, "k")
	if err != nil || !d.Allowed || d.Local {
		t.Fatalf("counted in the store: %+v, %v", d, err)
	}
	g.close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.Attempt(ctx, "other") }) // holds the store's one slot
	<-g.entered
	refunded := make(chan error, 1)
	go func() { refunded <- l.Refund(ctx, d) }()
	select {
	case err := <-refunded:
		if err != nil {
			t.Fatalf("refund with the store busy: %v, want it kept for the outbox", err)
		}
	case <-time.After(10 * time.Second):
		g.release()
		t.Fatal("a refund waited for a busy store on its caller's goroutine")
	}
	g.release()
	for i := 0; ; i++ { // the outbox lands it
		es, err := g.remote.Read(ctx, "c:", []string{"k"})
		if err == nil && es[0].Live() && string(es[0].Value) == "0" {
			break
		}
		if i == 1000 {
			t.Fatalf("the refund did not land within 10 s of the store's return: %q, %v", es[0].Value, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A credit kept for the outbox never refuses the owner it gives back to:
// an attempt the store refuses by a key that credits still owe lands them
// and asks again, rather than waiting for the outbox's next round.
func TestOwedCreditLandsBeforeRefusal(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	l, g := gatedLimiter(t, 1)
	for round := range 20 {
		d, err := l.Attempt(ctx, "k")
		if err != nil || !d.Allowed || d.Local {
			es, rerr := g.remote.Read(ctx, "c:", []string{"k"})
			t.Fatalf("round %d: counted in the store: %+v, %v; store %q %v", round, d, err, es[0].Value, rerr)
		}
		// The store's one slot is held while the credit is made: it goes
		// to the outbox.
		g.close()
		var wg sync.WaitGroup
		wg.Go(func() { l.Attempt(ctx, "other-"+strconv.Itoa(round)) })
		<-g.entered
		if err := l.Credit(ctx, d, []int{0}); err != nil {
			t.Fatalf("round %d: credit with the store busy: %v", round, err)
		}
		g.release()
		wg.Wait()
	}
}

// What one instance resets, another sees within about AskAgain: a key the
// second remembers spent is asked of the store again after AskAgain, while
// every attempt before that is refused from memory.
func TestResetReachesOtherInstance(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	o := store.Options{Logger: quiet}.WithDefaults()
	shared := memory.NewBackend(memory.Options{Store: o})
	var ls [2]*limiter.Limiter
	var cs [2]*counting
	for i := range ls {
		cs[i] = &counting{flaky: flaky{remote: shared}}
		s := store.New(cs[i], store.Options{Logger: quiet})
		t.Cleanup(func() { s.Close() })
		h, _ := s.Handle("c:")
		var err error
		if ls[i], err = limiter.New(h, limiter.Options{Name: "counting", Budget: limiter.Budget{Limit: 2, Window: time.Minute}, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls[i].Close() })
	}
	for range 3 {
		ls[1].Attempt(ctx, "alice")
	}
	if d, _ := ls[1].Attempt(ctx, "alice"); d.Allowed || !d.Remembered {
		t.Fatalf("spent key on the second instance: %+v, want refused from memory", d)
	}
	if err := ls[0].Reset(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	start, before := time.Now(), cs[1].calls.Load()
	refused := 0
	for {
		d, _ := ls[1].Attempt(ctx, "alice")
		if d.Allowed {
			break
		}
		refused++
		if time.Since(start) > 10*limiter.AskAgain {
			t.Fatalf("the second instance still refuses a key reset through the first after %v", time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	if calls := cs[1].calls.Load() - before; calls > 2 {
		t.Errorf("%d attempts refused before the reset was seen made %d store calls, want at most 2 (one to ask again, one to count)", refused, calls)
	}
	t.Logf("the reset was seen after %d refusals from memory", refused)
}

// announcing is a shared store whose announcements stop landing after the
// first ok of them.
type announcing struct {
	counting
	ok, made, landed atomic.Int64
}

func (a *announcing) Update(ctx context.Context, p string, k []string, f store.ApplyFunc) error {
	if p == "c:" {
		return a.counting.Update(ctx, p, k, f)
	}
	if a.made.Add(1) > a.ok.Load() {
		return errDown
	}
	err := a.remote.Update(ctx, p, k, f)
	if err == nil {
		a.landed.Add(1)
	}
	return err
}

// An instance that has not counted the instances sharing its store twice
// cannot tell its share of any budget: counting alone, it admits nothing.
// Its first count may miss instances that started with it. Nothing counts
// the attempt, so it is refused as counted alone (429), as with memory
// full, and never answered 503.
func TestNoShareBeforeMembersCounted(t *testing.T) {
	for _, tt := range []struct {
		name          string
		announcements int64 // that land
	}{
		{"never reached", 0},
		{"counted once", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 250 * time.Millisecond}.WithDefaults()
			a := &announcing{counting: counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}}}
			a.ok.Store(tt.announcements)
			a.down.Store(true)
			s := store.New(a, o)
			t.Cleanup(func() { s.Close() })
			h, _ := s.Handle("c:")
			l, err := limiter.New(h, limiter.Options{Name: "counting", Budget: limiter.Budget{Limit: 5, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			for range 3 {
				d, err := l.Attempt(context.Background(), "k")
				if got := limiter.OutcomeOf(&d); err != nil || got != limiter.DeniedLocal || s.Members() != 0 {
					t.Fatalf("an instance during an outage, %d announcements landed: %v, %v (members %d); want %v", tt.announcements, got, err, s.Members(), limiter.DeniedLocal)
				}
			}
			if n := a.landed.Load(); n != tt.announcements {
				t.Fatalf("%d announcements landed, want %d: the test tests nothing", n, tt.announcements)
			}
		})
	}
}

// slow is a shared backend whose calls take a while, so that a burst
// overloads the guard.
type slow struct{ counting }

func (s *slow) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	time.Sleep(5 * time.Millisecond)
	return s.counting.Count(ctx, p, k, caps, n, t)
}

func (s *slow) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	time.Sleep(5 * time.Millisecond)
	return s.counting.Update(ctx, p, k, a)
}

// Attempts admitted alone go to the store with the next attempt on their
// key, in its update: the store's count then holds them all, before the
// outbox's next round.
func TestAloneGoesWithNextAttempt(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 5, Window: time.Minute}, 0)
	c.down.Store(true)
	for range 3 {
		if d, _ := l.Attempt(ctx, "k"); !d.Allowed || !d.Local {
			t.Fatalf("while down: %+v, want admitted alone", d)
		}
	}
	c.down.Store(false)
	d, err := l.Attempt(ctx, "k")
	if err != nil || !d.Allowed || d.Local || d.Remaining != 1 {
		t.Fatalf("the store back: %+v, %v; want admitted by the store with 1 left", d, err)
	}
	es, err := c.remote.Read(ctx, "c:", []string{"k"})
	if err != nil || string(es[0].Value) != "4" {
		t.Fatalf("the store's count: %q, %v; want 4 (3 alone, then 1)", es[0].Value, err)
	}
	if d, _ := l.Attempt(ctx, "k"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("the fifth: %+v", d)
	}
	if d, _ := l.Attempt(ctx, "k"); d.Allowed {
		t.Fatalf("the sixth: %+v, want refused", d)
	}
}

// With its memory full, an attempt with one new key still sees what memory
// holds of its other keys: the attempts admitted alone on them go to the
// store with it, rather than being passed over.
func TestMemoryFullStillSeesHeldKeys(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 250 * time.Millisecond}.WithDefaults()
	c := &counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}}
	s := store.New(c, o)
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("c:")
	l, err := limiter.New(h, limiter.Options{Name: "full", Budget: limiter.Budget{Limit: 5, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet, LocalMaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	announced(t, s)
	c.down.Store(true)
	for range 3 {
		if d, _ := l.Attempt(ctx, "alice"); !d.Allowed || !d.Local {
			t.Fatalf("while down: %+v, want admitted alone", d)
		}
	}
	fillAlone(ctx, t, l, "flood-", 10)
	c.down.Store(false)
	d, err := l.Attempt(ctx, "alice", "new")
	if err != nil || !d.Allowed || d.RemainingOf(0) != 1 {
		t.Fatalf("alice with a new key, memory full: %+v, %v; want admitted with 1 left", d, err)
	}
	es, _ := c.remote.Read(ctx, "c:", []string{"alice"})
	if string(es[0].Value) != "4" {
		t.Fatalf("alice's count in the store: %q, want 4 (3 alone, then 1)", es[0].Value)
	}
}

// saturated is a shared store whose counts on the limiter's handle answer
// overloaded while busy is above 0, each count taking one off, and whose
// announcements fail while quiet is set.
type saturated struct {
	counting
	busy  atomic.Int64
	quiet atomic.Bool
}

func (s *saturated) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	if p != "c:" && s.quiet.Load() {
		return errDown
	}
	return s.counting.Update(ctx, p, k, a)
}

func (s *saturated) Count(ctx context.Context, p string, k []string, caps []store.Budget, n int64, t *store.Tally) error {
	if s.busy.Add(-1) >= 0 {
		return storekit.WaitedOut("a test's turn", context.DeadlineExceeded)
	}
	return s.counting.Count(ctx, p, k, caps, n, t)
}

// A busy store is waited for when memory has no room to count alone, even
// once this instance has not reached the store for long enough to count
// alone: busy is not down, and its answer is never a 503.
func TestBusyWithMemoryFullWaits(t *testing.T) {
	ctx := context.Background()
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 10 * time.Millisecond}.WithDefaults()
	s := &saturated{counting: counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}}}
	st := store.New(s, o)
	t.Cleanup(func() { st.Close() })
	h, _ := st.Handle("c:")
	l, err := limiter.New(h, limiter.Options{Name: "busy", Budget: limiter.Budget{Limit: 5, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet, LocalMaxEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	announced(t, st)
	s.quiet.Store(true)
	for i := 0; st.AloneAfter() > 0; i++ { // its announcements no longer land
		if i == 1000 {
			t.Fatal("the store still lets this instance wait for it after 10 s of failed announcements")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.down.Store(true)
	fillAlone(ctx, t, l, "flood-", 10)
	s.down.Store(false)
	s.busy.Store(3) // busy for three more counts, then it answers
	d, err := l.Attempt(ctx, "bob")
	if err != nil || !d.Allowed || d.Local || d.Unavailable {
		t.Fatalf("a new key, the store busy and memory full: %+v, %v; want waited for and counted in the store", d, err)
	}
	if n := s.busy.Load(); n >= 0 {
		t.Fatalf("the store was asked %d times, want 4: the test tests nothing", 3-n)
	}
}

// A key whose count memory had no room to keep is not a key this instance
// never saw: counting alone, it gets no fresh share of the whole budget.
// Keys it never saw still do. Nothing is answered as an outage.
func TestForgottenKeyGetsNoFreshShare(t *testing.T) {
	ctx := context.Background()
	c, l := aloneLimiter(t, "forgets", 16)
	for i := range 12 { // three quarters of memory: counts of admitted keys are kept no more
		if d, err := l.Attempt(ctx, fmt.Sprint("early-", i)); err != nil || !d.Allowed {
			t.Fatalf("early key %d: %+v, %v", i, d, err)
		}
	}
	for range 3 {
		if d, err := l.Attempt(ctx, "alice"); err != nil || !d.Allowed || d.Local {
			t.Fatalf("alice, store up: %+v, %v", d, err)
		}
	}
	c.down.Store(true)
	admitted := 0
	for range 5 {
		d, err := l.Attempt(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if d.Unavailable && !d.Local {
			t.Fatalf("alice during the outage answered as an outage: %+v", d)
		}
		if d.Allowed {
			admitted++
		}
	}
	if 3+admitted > 5 {
		t.Fatalf("alice at 3 of 5, memory full: %d more admitted alone, the budget passed", admitted)
	}
	fresh := 0
	for i := range 3 {
		if d, _ := l.Attempt(ctx, fmt.Sprint("never-seen-", i)); d.Allowed && d.Local {
			fresh++
		}
	}
	if fresh < 2 {
		t.Fatalf("%d of 3 keys never seen admitted alone, want them counted alone with the budget", fresh)
	}
}

// With the store down and memory full of attempts counted alone, a new key
// is refused as counted alone (429), not as an outage (503): a flood that
// fills memory does not fail its bystanders with 503s.
func TestDownWithMemoryFullRefusesAsCounted(t *testing.T) {
	ctx := context.Background()
	c, l := aloneLimiter(t, "down-full", 4)
	c.down.Store(true)
	fillAlone(ctx, t, l, "flood-", 10)
	d, err := l.Attempt(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if got := limiter.OutcomeOf(&d); got != limiter.DeniedLocal || d.RetryAfter != time.Minute {
		t.Fatalf("a new key, store down and memory full: %v, Retry-After %v; want %v, its window", got, d.RetryAfter, limiter.DeniedLocal)
	}
}

// Strangers' new keys fill memory only up to its bound; attempts vouched
// for (a known device's) still count new keys alone in the room kept for
// them, and only in that room.
func TestVouchedKeepRoom(t *testing.T) {
	const room, reserve = 32, 16 // an eighth of 32 is less than 16
	ctx := context.Background()
	c, l := aloneLimiter(t, "vouched", room)
	c.down.Store(true)
	if n := fillAlone(ctx, t, l, "stranger-", 2*room); n != room {
		t.Fatalf("strangers' new keys counted alone: %d, want the bound, %d", n, room)
	}
	if n := fillAlone(limiter.Vouch(ctx), t, l, "device-", 2*reserve); n != reserve {
		t.Fatalf("new keys vouched for, strangers having filled memory: %d counted alone, want the room kept, %d", n, reserve)
	}
}

// What was admitted alone reaches a full store once it answers again. A key
// the store holds takes its attempts at once, though the same update had a
// new key the store has no room for. The new key's attempts are kept, and
// land once another instance has made the key in the store.
func TestFullStoreTakesAttemptsAdmittedAlone(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 5, Window: time.Minute}, 8)
	if d, _ := l.Attempt(ctx, "held"); !d.Allowed {
		t.Fatalf("first attempt: %+v", d)
	}
	fillStore(ctx, t, l)
	c.down.Store(true)
	for range 2 {
		if d, _ := l.Attempt(ctx, "held", "new"); !d.Allowed || !d.Local {
			t.Fatalf("while down: %+v, want admitted alone", d)
		}
	}
	c.down.Store(false)
	h := l.Handle()
	waitCount := func(key string, want int64) {
		t.Helper()
		for i := 0; storedCount(t, h, key) != want; i++ {
			if i == 1000 {
				t.Fatalf("%q in the store: %d after 10 s, want %d", key, storedCount(t, h, key), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount("held", 3)
	// Another instance makes room, and the key.
	err := h.Update(ctx, []string{"fill0"}, func(now time.Time, es []store.Entry) error {
		es[0].Value = nil
		return nil
	})
	if err == nil {
		err = h.Update(ctx, []string{"new"}, func(now time.Time, es []store.Entry) error {
			es[0].Value, es[0].ExpiresAt = []byte("1"), now.Add(time.Minute)
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	waitCount("new", 3)
}

// A full store's counts of the keys it holds are remembered, though the
// attempt had a new key counted alone. Counting alone later goes on from
// them: a held key at 4 of 5 admits one more while the store is down, not
// what the count at its first attempt left.
func TestFullStoreCountsRemembered(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 5, Window: time.Minute}, 8)
	if d, _ := l.Attempt(ctx, "held"); !d.Allowed || d.Local {
		t.Fatalf("first attempt: %+v, want admitted by the store", d)
	}
	fillStore(ctx, t, l)
	for i := range 3 {
		if d, _ := l.Attempt(ctx, "held", "new"); !d.Allowed {
			t.Fatalf("attempt %d with a new key, store full: %+v", i, d)
		}
	}
	if n := storedCount(t, l.Handle(), "held"); n != 4 {
		t.Fatalf("held key in the store: %d, want 4", n)
	}
	c.down.Store(true)
	if admitted := admittedOf(ctx, l, 5, "held"); admitted != 1 {
		t.Errorf("held key at 4 of 5, store down: %d admitted alone, want 1", admitted)
	}
}

// admittedOf makes n attempts on keys through l and returns how many
// were admitted.
func admittedOf(ctx context.Context, l *limiter.Limiter, n int, keys ...string) int {
	admitted := 0
	for range n {
		if d, _ := l.Attempt(ctx, keys...); d.Allowed {
			admitted++
		}
	}
	return admitted
}

// fillStore makes attempts on new keys until the store has no room for
// one, which l then counts alone.
func fillStore(ctx context.Context, t *testing.T, l *limiter.Limiter) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("the store never filled")
		}
		if d, _ := l.Attempt(ctx, fmt.Sprint("fill", i)); d.Local {
			return
		}
	}
}

// An attempt admitted alone and given back no longer spends this
// instance's share, though it reached the store before the refund: an
// owner whose sign-ins succeed is not refused by them. Four times over a
// budget of 3, an attempt is admitted alone, lands in the store, and is
// refunded while the store is down again; each is admitted.
func TestRefundAfterSendFreesShare(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	ctx := context.Background()
	c, l := newCounting(t, limiter.Local, limiter.Budget{Limit: 3, Window: time.Minute}, 0)
	h := l.Handle()
	waitCount := func(want int64) {
		t.Helper()
		for i := 0; storedCount(t, h, "k") != want; i++ {
			if i == 1000 {
				t.Fatalf("the store's count: %d after 10 s, want %d", storedCount(t, h, "k"), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i := range 4 {
		c.down.Store(true)
		d, err := l.Attempt(ctx, "k")
		if err != nil || !d.Allowed || !d.Local {
			t.Fatalf("attempt %d, store down: %+v, %v; want admitted alone", i, d, err)
		}
		c.down.Store(false)
		waitCount(1) // sent
		c.down.Store(true)
		if err := l.Refund(ctx, d); err != nil {
			t.Fatalf("refund %d: %v", i, err)
		}
		c.down.Store(false)
		waitCount(0) // given back
	}
}

// The counts of an attempt vouched for are kept in memory filled by
// strangers' keys, so that it is counted alone from them while the store
// is down, rather than refused as a key memory forgot.
func TestVouchedCountsKept(t *testing.T) {
	const room = 32
	ctx := context.Background()
	c, l := aloneLimiter(t, "vouched", room)
	for i := range room { // past the three quarters memory keeps counts in
		if d, err := l.Attempt(ctx, fmt.Sprint("stranger-", i)); err != nil || !d.Allowed {
			t.Fatalf("stranger %d: %+v, %v", i, d, err)
		}
	}
	owner := limiter.Vouch(ctx)
	for range 3 {
		if d, err := l.Attempt(owner, "device"); err != nil || !d.Allowed || d.Local {
			t.Fatalf("vouched attempt, store up: %+v, %v", d, err)
		}
	}
	c.down.Store(true)
	if admitted := admittedOf(owner, l, 5, "device"); admitted != 2 {
		t.Errorf("vouched key at 3 of 5, store down: %d admitted alone, want 2", admitted)
	}
}

// A key a full store had no room for, counted alone by one instance, keeps
// that instance's share once another makes the key's entry: the first
// admitted 3 of 6 alone, the second admits only the other 3 in the store,
// and the first's 3 land in the entry. A key whose entry was made before
// keeps its whole budget.
func TestParkedKeyKeepsRoom(t *testing.T) {
	ctx := context.Background()
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}, Announce: 10 * time.Millisecond}.WithDefaults()
	shared := memory.NewBackend(memory.Options{Store: o, MaxEntries: 8})
	t.Cleanup(func() { shared.Close() })
	var ls [2]*limiter.Limiter
	for i := range ls {
		o := o
		o.InstanceID = [16]byte{byte(i + 1)} // two instances
		s := store.New(&counting{flaky: flaky{remote: shared}}, o)
		t.Cleanup(func() { s.Close() })
		h, _ := s.Handle("c:")
		var err error
		if ls[i], err = limiter.New(h, limiter.Options{Name: "parked", Budget: limiter.Budget{Limit: 6, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls[i].Close() })
	}
	for _, l := range ls {
		for i := 0; l.Handle().Store().Members() != 2; i++ {
			if i == 1000 {
				t.Fatal("the instances did not count each other within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a, b := ls[0], ls[1]
	if d, _ := b.Attempt(ctx, "old"); !d.Allowed {
		t.Fatalf("a key made before the store filled: %+v", d)
	}
	fillStore(ctx, t, a)
	for range 3 {
		if d, _ := a.Attempt(ctx, "k"); !d.Allowed || !d.Local {
			t.Fatalf("new key, store full: %+v, want admitted alone", d)
		}
	}
	for i := 0; ; i++ { // until the second keeps room for the first's share in a new entry
		if _, young, _ := b.Handle().Store().Reserved("k", 6); young == 3 {
			break
		}
		if i == 1000 {
			t.Fatal("the second instance keeps no room for the first's parked attempts after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// an entry made before the first parked keeps its whole budget
	if old := admittedOf(ctx, b, 6, "old"); old != 5 {
		t.Errorf("a key at 1 of 6 made before the first instance parked: %d more admitted, want 5", old)
	}
	err := a.Handle().Update(ctx, []string{"fill0"}, func(_ time.Time, es []store.Entry) error {
		es[0].Value = nil // room for one entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if admitted := admittedOf(ctx, b, 6, "k"); admitted != 3 {
		t.Errorf("the second instance, the first having admitted 3 of 6 alone: %d admitted, want 3", admitted)
	}
	for i := 0; storedCount(t, a.Handle(), "k") != 6; i++ {
		if i == 1000 {
			t.Fatalf("the key in the store: %d after 10 s, want 6", storedCount(t, a.Handle(), "k"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Strangers' attempts of several new keys each stop at memory's bound too:
// the room kept for attempts vouched for is still whole.
func TestVouchedRoomAfterManyKeyAttempts(t *testing.T) {
	const room, reserve = 32, 16
	ctx := context.Background()
	c, l := aloneLimiter(t, "vouched", room)
	c.down.Store(true)
	for i := 0; ; i++ {
		if i == room {
			t.Fatalf("strangers' attempts of 3 new keys still counted after %d", i)
		}
		d, err := l.Attempt(ctx, fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
	}
	// 10 attempts of 3 keys fill 30 of the 32: the 2 left and the room
	// kept are the vouched-for's.
	if n := fillAlone(limiter.Vouch(ctx), t, l, "device-", 2*room); n < reserve {
		t.Fatalf("new keys vouched for, strangers' attempts of 3 keys having filled memory: %d counted alone, want at least the room kept, %d", n, reserve)
	}
}

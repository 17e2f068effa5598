package postgres

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/store"
)

// faultPool opens a pool that reaches the database through a fault proxy
// the test controls. The proxy closes before the pool does, which ends at
// once the connections pgx is still closing after a timeout (it would
// drain them for 15 s).
func faultPool(t *testing.T) (*faultproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	newPool(t) // skips or fails when the database is unreachable; migrates
	u, err := url.Parse(testURL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	pool := newPoolURL(t, u.String(), false)
	t.Cleanup(func() { p.Close() })
	return p, pool
}

// faultStore opens a store over a faultPool.
func faultStore(t *testing.T, o Options) (*faultproxy.Proxy, *store.Handle) {
	t.Helper()
	p, pool := faultPool(t)
	return p, newHandle(t, newStore(t, pool, o), "fault")
}

var faultCaps = []store.Budget{{Limit: 1000, Window: time.Minute}}

func count(h *store.Handle) error {
	_, err := h.Count(context.Background(), []string{"k"}, faultCaps, 1)
	return err
}

// recovers waits, a bounded time, for h to answer again.
func recovers(t *testing.T, h *store.Handle) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := count(h)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not recover after Restore: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h.Store().BreakerOpen() {
		t.Fatal("breaker still open after a successful call")
	}
	// Update and Read work too.
	if err := h.Update(context.Background(), []string{"u"}, func(now time.Time, es []store.Entry) error {
		es[0] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(time.Minute)}
		return nil
	}); err != nil {
		t.Fatalf("Update after recovery: %v", err)
	}
	if _, err := h.Read(context.Background(), []string{"u"}); err != nil {
		t.Fatalf("Read after recovery: %v", err)
	}
}

// TestFaultCut: a database whose connections are cut is answered
// unavailable; after repeated failures the breaker answers at once without
// calling it; after Restore the probe closes the breaker.
func TestFaultCut(t *testing.T) {
	p, h := faultStore(t, Options{Store: store.Options{
		Breaker: store.BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
	}})
	if err := count(h); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	for i := range 3 {
		err := count(h)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("call %d to a cut database: %v, want ErrUnavailable", i, err)
		}
		if r := store.ReasonOf(err); r != store.ReasonDown && r != store.ReasonDeadline {
			t.Fatalf("call %d to a cut database: reason %v", i, r)
		}
	}
	if !h.Store().BreakerOpen() {
		t.Fatal("breaker closed after 3 failures in a row")
	}
	if err := count(h); !errors.Is(err, store.ErrBreakerOpen) {
		t.Fatalf("call with the breaker open: %v, want ErrBreakerOpen", err)
	}
	p.Restore()
	recovers(t, h)
}

// TestFaultBlackHole: a database that never answers is answered
// unavailable at the guard's deadline, with never more than MaxInFlight
// calls running; the store recovers once it answers again.
func TestFaultBlackHole(t *testing.T) {
	const maxInFlight = 16
	p, h := faultStore(t, Options{Store: store.Options{
		Deadline:    300 * time.Millisecond,
		MaxInFlight: maxInFlight,
		Breaker:     store.BreakerOptions{Failures: -1}, // every call reaches the backend
	}})
	if err := count(h); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	var wg sync.WaitGroup
	var mu sync.Mutex
	reasons := map[store.Reason]int{}
	peak := 0
	start := make(chan struct{}) // every call starts at once, within one deadline
	for range 4 * maxInFlight {
		wg.Go(func() {
			<-start
			err := count(h)
			mu.Lock()
			defer mu.Unlock()
			reasons[store.ReasonOf(err)]++
			peak = max(peak, h.Store().InFlight())
		})
	}
	close(start)
	wg.Wait()
	if reasons[0] != 0 {
		t.Fatalf("%d calls to a black hole succeeded", reasons[0])
	}
	if reasons[store.ReasonDeadline] == 0 {
		t.Fatalf("no call answered past its deadline: %v", reasons)
	}
	if reasons[store.ReasonOverloaded] == 0 {
		t.Fatalf("no call refused as overloaded with %d in flight: %v", maxInFlight, reasons)
	}
	if peak > maxInFlight {
		t.Fatalf("%d calls in flight, want at most %d", peak, maxInFlight)
	}
	p.Restore()
	recovers(t, h)
}

// TestFaultDelay: a database slower than the deadline is answered
// unavailable; one slower but within it answers.
func TestFaultDelay(t *testing.T) {
	p, h := faultStore(t, Options{Store: store.Options{
		Deadline: time.Second,
		Breaker:  store.BreakerOptions{Failures: -1},
	}})
	if err := count(h); err != nil {
		t.Fatal(err)
	}
	p.Delay(3 * time.Second)
	if err := count(h); store.ReasonOf(err) != store.ReasonDeadline {
		t.Fatalf("call to a database slower than the deadline: %v, want unavailable (deadline)", err)
	}
	p.Delay(5 * time.Millisecond)
	recovers(t, h)
	p.Restore()
	recovers(t, h)
}

// TestFaultDefaultDeadline: with the default guard, a database that hangs
// is answered unavailable (deadline) by the 2 s deadline.
func TestFaultDefaultDeadline(t *testing.T) {
	p, h := faultStore(t, Options{})
	if err := count(h); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	err := count(h)
	if store.ReasonOf(err) != store.ReasonDeadline {
		t.Fatalf("call to a hung database: %v, want unavailable (deadline)", err)
	}
	p.Restore()
	recovers(t, h)
}

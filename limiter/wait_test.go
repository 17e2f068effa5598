package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// A burst that overloads a shared store, on one key, admits at most the
// budget, every admission counted in the store: the attempts that find the
// queue full are refused as busy, to be tried again in a second, never
// counted alone, where they would race other instances. The queue never
// holds more than its bound.
func TestOverloadedBurstExact(t *testing.T) {
	const burst = 300
	for _, budget := range []int{1, 5, 30} {
		o := store.Options{Logger: quiet, MaxInFlight: 2, MaxQueued: 10, Breaker: store.BreakerOptions{Failures: -1}}.WithDefaults()
		b := &slow{counting{flaky: flaky{remote: memory.NewBackend(memory.Options{Store: o})}}}
		s := store.New(b, o)
		h, _ := s.Handle("c:")
		l, err := limiter.New(h, limiter.Options{Name: "burst", Budget: limiter.Budget{Limit: budget, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		announced(t, s)
		var mu sync.Mutex
		var admitted, refused, busy, other int
		var wg sync.WaitGroup
		for range burst {
			wg.Go(func() {
				d, err := l.Attempt(context.Background(), "k")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case d.Allowed && !d.Unavailable && !d.Local:
					admitted++
				case !d.Allowed && !d.Unavailable:
					refused++
				case !d.Allowed && d.Unavailable && d.Local && d.RetryAfter == time.Second:
					busy++
				default:
					other++
					t.Errorf("budget %d: %+v, want counted in the store or refused as busy", budget, d)
				}
			})
		}
		queued := 0 // the most calls seen waiting at once
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for waiting := true; waiting; {
			select {
			case <-done:
				waiting = false
			case <-time.After(time.Millisecond):
				queued = max(queued, s.Stats().Queued)
			}
		}
		t.Logf("budget %d: %d attempts at once: %d admitted, %d refused by the store, %d refused as busy; at most %d waited at once",
			budget, burst, admitted, refused, busy, queued)
		if admitted > budget || admitted != min(budget, admitted+refused) {
			t.Errorf("budget %d: %d admitted by the store of %d it decided, want min(budget, decided)", budget, admitted, admitted+refused)
		}
		if busy == 0 {
			t.Errorf("budget %d: no attempt found the queue full: the test tests nothing", budget)
		}
		if queued > o.MaxQueued {
			t.Errorf("budget %d: %d calls waited at once, want at most the queue's bound of %d", budget, queued, o.MaxQueued)
		}
		es, err := b.remote.Read(context.Background(), "c:", []string{"k"})
		if err != nil || string(es[0].Value) != strconv.Itoa(admitted) {
			t.Errorf("budget %d: the store's count %q (%v), want the %d admitted", budget, es[0].Value, err, admitted)
		}
		l.Close()
		s.Close()
	}
}

// An attempt waiting for a busy store stops waiting when its context ends,
// with the context's error, and is never counted: a request whose client
// is gone waits for nobody and spends nothing.
func TestWaitEndsWithContext(t *testing.T) {
	ctx := context.Background()
	l, g := gatedLimiter(t, 5)
	g.close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.Attempt(ctx, "other") }) // holds the store's one slot
	<-g.entered
	for _, end := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }, context.DeadlineExceeded},
	} {
		actx, cancel := end.ctx()
		done := make(chan error, 1)
		go func() {
			_, err := l.Attempt(actx, "k")
			done <- err
		}()
		for i := 0; l.Handle().Store().Queued() == 0; i++ { // it, or the store's own announcement, waits
			if i == 1000 {
				t.Fatalf("%s: the attempt did not wait for the store within 10 s", end.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if end.want == context.Canceled {
			cancel()
		}
		err := <-done
		cancel()
		if !errors.Is(err, end.want) {
			t.Errorf("%s: attempt whose context ended while it waited: %v, want %v", end.name, err, end.want)
		}
	}
	g.release()
	wg.Wait()
	es, err := g.remote.Read(ctx, "c:", []string{"k"})
	if err != nil || es[0].Live() {
		t.Errorf("the store's entry of the abandoned attempts' key: %q, %v; want none: they were never counted", es[0].Value, err)
	}
}

package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

func testHash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// TestBatcherCountsEveryCallOnce: many concurrent calls on distinct keys
// are each run exactly once, in batches of distinct keys of at most
// maxCountBatch, with never more than limit batches at a time, and some
// batches of more than one call.
func TestBatcherCountsEveryCallOnce(t *testing.T) {
	const calls, limit = 500, 2
	var (
		mu       sync.Mutex
		ran      = map[string]int{}
		running  atomic.Int32
		peak     atomic.Int32
		largest  atomic.Int32
		overflow atomic.Bool
	)
	bt := &countBatcher{limit: limit, run: func(_ context.Context, batch []*oneCount) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if int32(len(batch)) > largest.Load() {
			largest.Store(int32(len(batch)))
		}
		if len(batch) > maxCountBatch {
			overflow.Store(true)
		}
		time.Sleep(time.Millisecond) // so that calls queue behind the batches
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, r := range batch {
			if seen[string(r.hash)] {
				t.Errorf("key %x twice in one batch", r.hash[:4])
			}
			seen[string(r.hash)] = true
			ran[string(r.hash)]++
			r.counted, r.v = true, r.n
		}
		return nil
	}}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			r := &oneCount{hash: testHash(fmt.Sprint(i)), n: int64(i)}
			if err := bt.do(context.Background(), r); err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if !r.counted || r.v != int64(i) {
				t.Errorf("call %d: result %v %d, want its own", i, r.counted, r.v)
			}
		})
	}
	wg.Wait()
	if len(ran) != calls {
		t.Fatalf("%d keys run, want %d", len(ran), calls)
	}
	for k, n := range ran {
		if n != 1 {
			t.Fatalf("key %x run %d times", k[:4], n)
		}
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("%d batches at once, want at most %d", p, limit)
	}
	if overflow.Load() {
		t.Fatalf("a batch of more than %d", maxCountBatch)
	}
	if largest.Load() < 2 {
		t.Fatalf("no batch of more than one call among %d concurrent calls", calls)
	}
	if len(bt.queue) != 0 || len(bt.keys) != 0 || bt.running != 0 {
		t.Fatalf("left behind: queue %d, keys %d, running %d", len(bt.queue), len(bt.keys), bt.running)
	}
}

// TestBatcherSameKey: a call whose key another call has queued or running
// is refused with errSameKey, and accepted again once that call is done.
func TestBatcherSameKey(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	bt := &countBatcher{limit: 1, run: func(context.Context, []*oneCount) error {
		started <- struct{}{}
		<-release
		return nil
	}}
	done := make(chan error)
	go func() { done <- bt.do(context.Background(), &oneCount{hash: testHash("k")}) }()
	<-started
	if err := bt.do(context.Background(), &oneCount{hash: testHash("k")}); !errors.Is(err, errSameKey) {
		t.Fatalf("second call on a running key: %v, want errSameKey", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { <-started }()
	if err := bt.do(context.Background(), &oneCount{hash: testHash("k")}); err != nil {
		t.Fatalf("call after the first ended: %v", err)
	}
}

// TestBatcherCancel: a queued call whose context ends returns its error at
// once and is never run; a batch's error reaches every call of it; calls
// queued behind go on.
func TestBatcherCancel(t *testing.T) {
	release := make(chan struct{})
	started := make(chan []string, 10)
	boom := errors.New("boom")
	bt := &countBatcher{limit: 1, run: func(_ context.Context, batch []*oneCount) error {
		var keys []string
		for _, r := range batch {
			keys = append(keys, string(r.hash))
		}
		started <- keys
		<-release
		if len(batch) > 1 {
			return boom
		}
		return nil
	}}
	first := make(chan error)
	go func() { first <- bt.do(context.Background(), &oneCount{hash: testHash("first")}) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error)
	go func() { cancelled <- bt.do(ctx, &oneCount{hash: testHash("cancelled")}) }()
	waiters := make(chan error, 2)
	for _, k := range []string{"a", "b"} {
		go func() { waiters <- bt.do(context.Background(), &oneCount{hash: testHash(k)}) }()
	}
	for { // until all three wait in the queue
		bt.mu.Lock()
		n := len(bt.queue)
		bt.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	next := <-started
	if len(next) != 2 || next[0] == string(testHash("cancelled")) || next[1] == string(testHash("cancelled")) {
		t.Fatalf("next batch %d calls, want the two still waiting", len(next))
	}
	for range 2 {
		if err := <-waiters; !errors.Is(err, boom) {
			t.Fatalf("call of a failed batch: %v, want its error", err)
		}
	}
	if len(bt.keys) != 0 || bt.running != 0 {
		t.Fatalf("left behind: keys %d, running %d", len(bt.keys), bt.running)
	}
}

// TestExactBudgetManyKeys: 400 concurrent attempts on two pools over 8
// fresh keys, 50 per key, with a budget of 30: exactly 30 of each key's
// attempts are admitted, the single-key counts going in batches of
// several keys.
func TestExactBudgetManyKeys(t *testing.T) {
	poolA, poolB := newPool(t), newPool(t)
	const (
		keys    = 8
		perKey  = 50
		budget  = 30
		rounds  = 10
		workers = keys * perKey
	)
	prefix := randomPrefix("many")
	o := Options{Store: store.Options{MaxInFlight: workers}}
	a, err := newStore(t, poolA, o).Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newStore(t, poolB, o).Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	caps := []store.Budget{{Limit: budget, Window: time.Minute}}
	for round := range rounds {
		run := randomPrefix("r")
		var admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		for i := range workers {
			h := a
			if i%2 == 1 {
				h = b
			}
			k := i % keys
			wg.Go(func() {
				tl, err := h.Count(context.Background(), []string{fmt.Sprint(run, k)}, caps, 1)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				if tl.Allowed {
					admitted[k].Add(1)
				}
			})
		}
		wg.Wait()
		for k := range admitted {
			if got := admitted[k].Load(); got != budget {
				t.Fatalf("round %d key %d: %d of %d admitted, want exactly %d", round, k, got, perKey, budget)
			}
		}
	}
}

// TestRunCountsMany: one statement counts a batch of keys each on its own:
// a fresh key, a key with room, a key at its cap (refused, unchanged) and a
// key whose value is not a count (refused, unchanged), each with its own n,
// cap and window.
func TestRunCountsMany(t *testing.T) {
	pool := newPool(t)
	b, err := NewBackend(context.Background(), pool, Options{Secret: randomSecret()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	prefix := randomPrefix("many")
	set := func(key, value string) {
		if err := b.Update(ctx, prefix, []string{key}, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte(value), ExpiresAt: now.Add(time.Hour)}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	set("room", "5")
	set("full", "10")
	set("json", `{"a":1}`)
	hash := func(k string) []byte { h := b.hasher.Sum(prefix, k); return h[:] }
	batch := []*oneCount{
		{hash: hash("fresh"), n: 2, max: 10, window: 60_000},
		{hash: hash("room"), n: 3, max: 10, window: 60_000},
		{hash: hash("full"), n: 1, max: 10, window: 60_000},
		{hash: hash("json"), n: 1, max: 10, window: 60_000},
	}
	if err := b.runCounts(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		counted bool
		v       int64
	}{{true, 2}, {true, 8}, {false, 0}, {false, 0}} {
		r := batch[i]
		if r.counted != c.counted || r.v != c.v {
			t.Errorf("key %d: counted %v at %d, want %v at %d", i, r.counted, r.v, c.counted, c.v)
		}
	}
	if fresh := batch[0]; !fresh.exp.Equal(fresh.now.Add(time.Minute)) {
		t.Errorf("fresh key expires at %v, want now %v plus its window", fresh.exp, fresh.now)
	}
	es, err := b.Read(ctx, prefix, []string{"full", "json"})
	if err != nil {
		t.Fatal(err)
	}
	if string(es[0].Value) != "10" || string(es[1].Value) != `{"a":1}` {
		t.Fatalf("refused keys changed: %q, %q", es[0].Value, es[1].Value)
	}
	var tl store.Tally
	if err := b.Count(ctx, prefix, []string{"json"}, []store.Budget{{Limit: 10, Window: time.Minute}}, 1, &tl); !errors.Is(err, store.ErrNotCounter) {
		t.Fatalf("Count of a value that is not a count: %v, want ErrNotCounter", err)
	}
}

package loadtest

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storekit"
)

// heapBound is the most the heap may grow by a flood: a generous memory
// bound, not a timing.
const heapBound = 256 << 20

// A flood of distinct keys against the memory store through a limiter
// (1,000,000 keys against the default bound of 100,000; 200,000 against a
// bound of 20,000 in the short run): the store holds at most its bound, new
// keys past it are answered unavailable (ErrFull) rather than evicting
// anything, a count made before the flood is still there after it, and the
// heap stays bounded.
func TestMemoryFlood(t *testing.T) {
	keys, maxEntries := pick(200_000, 1_000_000), pick(20_000, storekit.DefaultMaxEntriesMemory)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	s := memory.New(memory.Options{MaxEntries: maxEntries, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, err := s.Handle("flood:")
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(h, limiter.Options{Name: "flood", Budget: limiter.Budget{Limit: 5, Window: time.Hour}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if d, err := l.Attempt(ctx, "victim"); err != nil || !d.Allowed {
			t.Fatalf("victim before the flood: %+v %v", d, err)
		}
	}

	const workers = 4
	var allowed, full atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	floodStart := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < keys; i += workers {
				d, err := l.Attempt(ctx, "k"+strconv.Itoa(i))
				switch {
				case err != nil:
					errc <- err
					return
				case d.Allowed:
					allowed.Add(1)
				case d.Unavailable && errors.Is(d.Cause, store.ErrFull):
					full.Add(1)
				default:
					errc <- errors.New("a new key refused other than as full: " + d.Cause.Error())
					return
				}
			}
		})
	}
	wg.Wait()
	floodTook := time.Since(floodStart)
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	b := s.Backend().(*memory.Backend)
	if n := b.Entries(); n > maxEntries || int64(n) != allowed.Load()+1 {
		t.Fatalf("%d entries after %d new keys admitted: want the victim plus each, at most %d", n, allowed.Load(), maxEntries)
	}
	if allowed.Load()+full.Load() != int64(keys) {
		t.Fatalf("%d admitted + %d full of %d keys", allowed.Load(), full.Load(), keys)
	}
	// Concurrent reservations may refuse a key or two early; one at a time,
	// the store fills exactly to its bound and refuses past it.
	for i := 0; b.Entries() < maxEntries; i++ {
		if d, _ := l.Attempt(ctx, "fill"+strconv.Itoa(i)); !d.Allowed {
			t.Fatalf("new key refused with %d of %d entries: %+v", b.Entries(), maxEntries, d)
		}
	}
	if d, _ := l.Attempt(ctx, "one-more"); d.Allowed || !errors.Is(d.Cause, store.ErrFull) {
		t.Fatalf("a new key in a full store: %+v, want unavailable (ErrFull)", d)
	}

	// Nothing live was evicted: the victim and the flood's first keys keep
	// their counts, and the victim's budget holds.
	es, err := h.Read(ctx, []string{"victim", "k0", "k1"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{3, 1, 1} {
		if n, err := store.ParseCount(es[i].Value); err != nil || n != want {
			t.Errorf("key %d after the flood: count %d (%v), want %d", i, n, err, want)
		}
	}
	for i := range 3 {
		d, err := l.Attempt(ctx, "victim")
		if err != nil || d.Allowed != (i < 2) || d.Unavailable {
			t.Errorf("victim's attempt %d after the flood: %+v %v", 4+i, d, err)
		}
	}

	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grown := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("flood of %d keys, bound %d, in %v (%.0f keys/s): %d admitted concurrently, %d answered full; heap %.1f MiB → %.1f MiB (+%.1f MiB, %.0f B per entry)",
		keys, maxEntries, floodTook.Round(time.Millisecond), float64(keys)/floodTook.Seconds(), allowed.Load(), full.Load(), mib(m0.HeapAlloc), mib(m1.HeapAlloc), float64(grown)/(1<<20), float64(grown)/float64(maxEntries))
	if grown > heapBound {
		t.Errorf("heap grew by %.1f MiB, over the bound of %d MiB", float64(grown)/(1<<20), heapBound>>20)
	}
	runtime.KeepAlive(l)
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

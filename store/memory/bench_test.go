package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/value"
)

// counter is an apply that adds one to a counter, with the store's own
// ParseCount and AppendCount, as a limiter does. It is bound once so that
// calls allocate nothing.
type counter struct{ fn store.ApplyFunc }

func newCounter() *counter {
	c := &counter{}
	c.fn = func(now time.Time, es []store.Entry) error {
		for i := range es {
			e := &es[i]
			n := int64(0)
			if e.Live() {
				var err error
				if n, err = store.ParseCount(e.Value); err != nil {
					return err
				}
			} else {
				e.ExpiresAt = now.Add(time.Hour)
			}
			e.Value = value.AppendCount(e.Value[:0], n+1)
		}
		return nil
	}
	return c
}

func benchHandle(b *testing.B) *store.Handle {
	s := memory.New(memory.Options{MaxEntries: 1 << 20})
	b.Cleanup(func() { s.Close() })
	h, err := s.Handle("bench:")
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkYardstickAllow is rate.Limiter.Allow, the yardstick for a
// one-key Update.
// manyKeys returns 100,000 one-key slices, "k0" to "k99999".
func manyKeys() [][]string {
	keys := make([][]string, 100_000)
	for i := range keys {
		keys[i] = []string{"k" + strconv.Itoa(i)}
	}
	return keys
}

func BenchmarkYardstickAllow(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkUpdateHotKey(b *testing.B) {
	h := benchHandle(b)
	c := newCounter()
	keys := []string{"hot"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h.Update(ctx, keys, c.fn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpdate100kKeys(b *testing.B) {
	h := benchHandle(b)
	c := newCounter()
	keys := manyKeys()
	n := len(keys)
	ctx := context.Background()
	for _, k := range keys { // every key held: the steady state
		if err := h.Update(ctx, k, c.fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := h.Update(ctx, keys[i%n], c.fn); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkUpdateParallel(b *testing.B) { updateInParallel(b, false) }

// updateInParallel runs Update from b.RunParallel's goroutines, on one hot
// key or on 100,000 held keys, each goroutine starting at its own place.
func updateInParallel(b *testing.B, hot bool) {
	h := benchHandle(b)
	keys := manyKeys()
	n := len(keys)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := newCounter()
		i := int(next.Add(7919))
		for pb.Next() {
			k := keys[0]
			if !hot {
				k = keys[i%n]
			}
			if err := h.Update(ctx, k, c.fn); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkYardstickAllowParallel(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

// BenchmarkUpdateConc8 runs Update from 8 goroutines (on the machine's
// cores), on one hot key and on 100,000 held keys.
func BenchmarkUpdateConc8(b *testing.B) {
	for _, hot := range []bool{true, false} {
		name := "random"
		if hot {
			name = "hot"
		}
		b.Run(name, func(b *testing.B) {
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			updateInParallel(b, hot)
		})
	}
}

// BenchmarkCountHotKey is a one-key Count on a key the store holds, next to
// BenchmarkYardstickAllow.
func BenchmarkCountHotKey(b *testing.B) {
	h := benchHandle(b)
	keys := []string{"hot"}
	caps := []store.Budget{{Limit: 1 << 30, Window: time.Hour}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if t, err := h.Count(ctx, keys, caps, 1); err != nil || !t.Allowed {
			b.Fatal(err)
		}
	}
}

// BenchmarkCountParallel is a one-key Count from b.RunParallel's goroutines
// on 100,000 held keys, next to BenchmarkYardstickAllowParallel.
func BenchmarkCountParallel(b *testing.B) {
	h := benchHandle(b)
	keys := manyKeys()
	n := len(keys)
	caps := []store.Budget{{Limit: 1 << 30, Window: time.Hour}}
	ctx := context.Background()
	for _, k := range keys {
		if _, err := h.Count(ctx, k, caps, 1); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			if _, err := h.Count(ctx, keys[i%n], caps, 1); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

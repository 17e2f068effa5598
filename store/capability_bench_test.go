package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// The benchmarks below give the figures in the doc comments of the
// capabilities that choose the guard's path (store.Inline, store.Prompt,
// store.Counter): the memory backend on each path, so that only the path
// differs.

// asRemote is the memory backend seen as a store that does I/O: no Inline,
// no Prompt, no Counter.
type asRemote struct{ store.Backend }

// asPrompt is asRemote that promises to return by its context's deadline.
type asPrompt struct{ store.Backend }

func (asPrompt) Prompt() bool { return true }

// asCounter is asPrompt with the memory backend's own Count.
type asCounter struct {
	asPrompt
	c store.Counter
}

func (b asCounter) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	return b.c.Count(ctx, prefix, keys, caps, n, t)
}

// asWide is the memory backend with a CountOne done by its CountInline,
// as a backend with no faster way does.
type asWide struct{ *memory.Backend }

func (b asWide) CountOne(prefix, key string, c store.Budget, n int64) (store.KeyTally, error) {
	t, err := b.CountInline(prefix, [store.MaxCountKeys]string{key}, []store.Budget{c}, n)
	return t.Key(), err
}

func pathHandle(b *testing.B, wrap func(*memory.Backend) store.Backend) *store.Handle {
	o := store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.WithDefaults()
	mb := memory.NewBackend(memory.Options{Store: o})
	s := store.New(wrap(mb), o)
	b.Cleanup(func() { s.Close() })
	h, err := s.Handle("bench:")
	if err != nil {
		b.Fatal(err)
	}
	return h
}

var paths = []struct {
	name string
	wrap func(*memory.Backend) store.Backend
}{
	{"inline", func(b *memory.Backend) store.Backend { return b }},
	{"prompt", func(b *memory.Backend) store.Backend { return asPrompt{b} }},
	{"goroutine", func(b *memory.Backend) store.Backend { return asRemote{b} }},
}

// BenchmarkGuardUpdate is a one-key Update of a held key on each of the
// guard's paths.
func BenchmarkGuardUpdate(b *testing.B) {
	apply := func(now time.Time, es []store.Entry) error {
		es[0].Value = append(es[0].Value[:0], '1')
		es[0].ExpiresAt = now.Add(time.Hour)
		return nil
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			h := pathHandle(b, p.wrap)
			keys := []string{"hot"}
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Update(context.Background(), keys, apply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGuardCount is a one-key Count of a held key in process
// (store.Inline's CountOne, and its CountInline; and CountOne through
// CountInto), and on the prompt path
// through a backend's own Count (store.Counter) and through its Update (the
// generic Count).
func BenchmarkGuardCount(b *testing.B) {
	for _, p := range []struct {
		name string
		wrap func(*memory.Backend) store.Backend
	}{
		{"inline", func(b *memory.Backend) store.Backend { return b }},
		{"inline-wide", func(b *memory.Backend) store.Backend { return asWide{b} }},
		{"counter", func(b *memory.Backend) store.Backend { return asCounter{asPrompt{b}, b} }},
		{"update", func(b *memory.Backend) store.Backend { return asPrompt{b} }},
	} {
		b.Run(p.name, func(b *testing.B) {
			h := pathHandle(b, p.wrap)
			keys := []string{"hot"}
			caps := []store.Budget{{Limit: 1 << 30, Window: time.Hour}}
			b.ReportAllocs()
			for b.Loop() {
				if t, err := h.Count(context.Background(), keys, caps, 1); err != nil || !t.Allowed {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("inline-into", func(b *testing.B) { // CountInto
		h := pathHandle(b, func(b *memory.Backend) store.Backend { return b })
		keys := []string{"hot"}
		caps := []store.Budget{{Limit: 1 << 30, Window: time.Hour}}
		b.ReportAllocs()
		for b.Loop() {
			var t store.Tally
			if err := h.CountInto(context.Background(), keys, caps, 1, &t); err != nil || !t.Allowed {
				b.Fatal(err)
			}
		}
	})
}

package memory_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storekit"
	"github.com/gatecount/gatecount/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// TestContract runs the contract suite on the memory store. It is not
// shared, so Second is left out (it is First); a shared store's test opens
// two instances over one server, as store/sqlite's does.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		s := memory.New(memory.Options{})
		t.Cleanup(func() { s.Close() })
		handle := func(prefix string) *store.Handle {
			h, err := s.Handle(prefix)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		return storetest.Pair{First: handle("contract:"), Other: handle("contract-other:"),
			NewBounded: func(max int) (*store.Handle, error) {
				return memory.New(memory.Options{MaxEntries: max}).Handle("bounded:") // a store of its own
			}}
	})
}

// TestContractOneShard runs the suite on a store of one shard, where every
// key shares a lock.
func TestContractOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		s := memory.New(memory.Options{Shards: 1, Store: store.Options{Logger: quiet}})
		t.Cleanup(func() { s.Close() })
		first, err := s.Handle("contract:")
		if err != nil {
			t.Fatal(err)
		}
		other, err := s.Handle("contract-other:")
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Pair{First: first, Other: other}
	})
}

// recorder is a slog.Handler that keeps every record with its attributes.
type recorder struct {
	mu    *sync.Mutex
	recs  *[]map[string]string
	attrs []slog.Attr
}

func newRecorder() *recorder { return &recorder{mu: new(sync.Mutex), recs: new([]map[string]string)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"level": rec.Level.String(), "msg": rec.Message}
	for _, a := range r.attrs {
		m[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	*r.recs = append(*r.recs, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{mu: r.mu, recs: r.recs, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) records() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), *r.recs...)
}

// kinds counts the records of each kind.
func (r *recorder) kinds() map[string]int {
	n := map[string]int{}
	for _, m := range r.records() {
		n[m["kind"]]++
	}
	return n
}

// put writes one key with a value expiring ttl after the store's now.
func put(ctx context.Context, h *store.Handle, key string, ttl time.Duration) error {
	return h.Update(ctx, []string{key}, func(now time.Time, es []store.Entry) error {
		es[0] = store.Entry{Value: []byte(`1`), ExpiresAt: now.Add(ttl)}
		return nil
	})
}

func TestBoundLogs(t *testing.T) {
	const max = 10
	rec := newRecorder()
	s := memory.New(memory.Options{MaxEntries: max, Store: store.Options{Logger: slog.New(rec)}})
	defer s.Close()
	h, err := s.Handle("logs:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := func(i int) string { return fmt.Sprintf("secret-account-%d@example.com", i) }
	// Below 80%: quiet.
	for i := range max*8/10 - 1 {
		if err := put(ctx, h, key(i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.kinds(); len(got) != 0 {
		t.Fatalf("logged %v below 80%% of the bound", got)
	}
	// From 80% on: one warning, however many more keys come.
	for i := max*8/10 - 1; i < max; i++ {
		if err := put(ctx, h, key(i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.kinds(); got[storekit.KindFilling] != 1 || got[storekit.KindFull] != 0 {
		t.Fatalf("after filling to the bound, logged %v, want one %s", got, storekit.KindFilling)
	}
	// Full: every new key refused, logged once.
	for i := max; i < max+5; i++ {
		err := put(ctx, h, key(i), time.Hour)
		if store.ReasonOf(err) != store.ReasonFull {
			t.Fatalf("new key %d in a full store: %v, want %v", i, err, store.ReasonFull)
		}
	}
	// Held keys keep counting and log nothing new.
	if err := put(ctx, h, key(0), time.Hour); err != nil {
		t.Fatalf("held key in a full store: %v", err)
	}
	if got := rec.kinds(); got[storekit.KindFilling] != 1 || got[storekit.KindFull] != 1 {
		t.Fatalf("after 5 refused keys, logged %v, want one of each kind", got)
	}
	for _, m := range rec.records() {
		want := map[string]string{storekit.KindFilling: "WARN", storekit.KindFull: "ERROR"}[m["kind"]]
		if m["level"] != want || m["prefix"] != "logs:" || m["max_entries"] != "10" || m["store"] != "memory" || m["instance"] != s.InstanceID().String() {
			t.Errorf("record %v: want level %s, prefix, max_entries, store and instance", m, want)
		}
		for k, v := range m {
			if strings.Contains(v, "secret-account") {
				t.Errorf("record %v carries a key in clear in %q", m, k)
			}
		}
	}
}

func TestFullStoreSweepsExpired(t *testing.T) {
	const max = 4
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := memory.New(memory.Options{MaxEntries: max, Now: clk.Now, Store: store.Options{Logger: quiet}})
	defer s.Close()
	b := s.Backend().(*memory.Backend)
	h, err := s.Handle("sweep:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ttls := []time.Duration{time.Minute, time.Minute, time.Hour, time.Hour}
	for i, ttl := range ttls {
		if err := put(ctx, h, fmt.Sprint("k", i), ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(ctx, h, "new-1", time.Hour); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("new key in a full store: %v, want %v", err, store.ReasonFull)
	}
	clk.Advance(time.Minute) // the two short entries expire, not yet removed
	if b.Entries() != max {
		t.Fatalf("Entries = %d before any sweep, want %d", b.Entries(), max)
	}
	for i := range 2 {
		if err := put(ctx, h, fmt.Sprint("new-", i+2), time.Hour); err != nil {
			t.Fatalf("new key %d once two entries had expired: %v", i, err)
		}
	}
	if err := put(ctx, h, "new-4", time.Hour); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("new key once the expired room was taken: %v, want %v", err, store.ReasonFull)
	}
	es, err := h.Read(ctx, []string{"k2", "k3", "new-2", "new-3"})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if !e.Live() {
			t.Errorf("live entry %d gone after the store made room", i)
		}
	}
	if b.Entries() != max {
		t.Errorf("Entries = %d, want %d", b.Entries(), max)
	}
}

func TestExpiryOnFakeClock(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		advance time.Duration
		live    bool
	}{
		{"before", time.Second - time.Millisecond, true},
		{"at", time.Second, false},
		{"after", time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(start)
			s := memory.New(memory.Options{Now: clk.Now, Store: store.Options{Logger: quiet}})
			defer s.Close()
			h, _ := s.Handle("exp:")
			ctx := t.Context()
			if err := put(ctx, h, "k", time.Second); err != nil {
				t.Fatal(err)
			}
			clk.Advance(tt.advance)
			es, err := h.Read(ctx, []string{"k"})
			if err != nil {
				t.Fatal(err)
			}
			if es[0].Live() != tt.live {
				t.Errorf("Read: live %v, want %v", es[0].Live(), tt.live)
			}
			var given bool
			if err := h.Update(ctx, []string{"k"}, func(_ time.Time, es []store.Entry) error {
				given = es[0].Live()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if given != tt.live {
				t.Errorf("apply given a live entry: %v, want %v", given, tt.live)
			}
			n, err := s.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				// Update removed an expired entry when it touched it.
				t.Errorf("Sweep removed %d, want 0", n)
			}
		})
	}
}

func TestBackgroundSweep(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := memory.New(memory.Options{Now: clk.Now, SweepInterval: time.Millisecond, Store: store.Options{Logger: quiet}})
	defer s.Close()
	b := s.Backend().(*memory.Backend)
	h, _ := s.Handle("bg:")
	for i := range 10 {
		if err := put(t.Context(), h, fmt.Sprint("k", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	for i := 0; b.Entries() != 0; i++ {
		if i == 5000 {
			t.Fatalf("Entries = %d long after every entry expired: the background sweep did not run", b.Entries())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCloseStopsSweep(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := memory.New(memory.Options{SweepInterval: time.Millisecond, Store: store.Options{Logger: quiet}})
	h, _ := s.Handle("close:")
	if err := put(t.Context(), h, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := memory.New(memory.Options{Store: store.Options{Logger: quiet}})
	for i := range 3 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close %d: %v", i+1, err)
		}
	}
	b := memory.NewBackend(memory.Options{})
	for i := range 3 {
		if err := b.Close(); err != nil {
			t.Fatalf("Backend.Close %d: %v", i+1, err)
		}
	}
}

func TestClosedStore(t *testing.T) {
	s := memory.New(memory.Options{Store: store.Options{Logger: quiet}})
	h, err := s.Handle("closed:")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ctx := t.Context()
	keys := []string{"k"}
	calls := []struct {
		name string
		call func() error
	}{
		{"Update", func() error { return put(ctx, h, "k", time.Hour) }},
		{"Read", func() error { _, err := h.Read(ctx, keys); return err }},
		{"Count", func() error {
			_, err := h.Count(ctx, keys, []store.Budget{{Limit: 1, Window: time.Minute}}, 1)
			return err
		}},
		{"Sweep", func() error { _, err := s.Sweep(ctx); return err }},
		{"Handle", func() error { _, err := s.Handle("another:"); return err }},
	}
	for _, c := range calls {
		err := c.call()
		if !errors.Is(err, store.ErrUnavailable) || store.ReasonOf(err) != store.ReasonClosed {
			t.Errorf("%s on a closed store: %v, want unavailable (%v)", c.name, err, store.ReasonClosed)
		}
	}
}

// A full store with nothing expired refuses new keys without sweeping for
// each: a flood of new keys must not make every refusal scan the store.
func TestFullStoreRefusesWithoutSweeping(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var reads atomic.Int64
	now := func() time.Time {
		reads.Add(1)
		return clk.Now()
	}
	const max = 100
	s := memory.New(memory.Options{MaxEntries: max, Now: now, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, _ := s.Handle("flood:")
	put := func(k string) error {
		return h.Update(context.Background(), []string{k}, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(time.Hour)}
			return nil
		})
	}
	for i := range max {
		if err := put(fmt.Sprint("held-", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := reads.Load()
	for i := range 100 {
		if err := put(fmt.Sprint("new-", i)); store.ReasonOf(err) != store.ReasonFull {
			t.Fatalf("new key %d in a full store: %v", i, err)
		}
	}
	// A sweep reads the clock once per shard (64); a refusal a few times.
	if per := (reads.Load() - before) / 100; per > 8 {
		t.Fatalf("%d clock reads per refused key: the store sweeps for every refusal", per)
	}
	clk.Advance(time.Hour) // now everything has expired: room is made
	if err := put("after-expiry"); err != nil {
		t.Fatalf("new key once entries expired: %v", err)
	}
}

// Count, done by the store in one step, keeps the bound as Update does: a
// new key finds a full store answered full, with nothing counted; held keys
// keep counting; a key whose window ended makes room once it has expired.
func TestCountFullStore(t *testing.T) {
	const max = 2
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s := memory.New(memory.Options{MaxEntries: max, Now: clk.Now, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, err := s.Handle("count:")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	count := func(key string, window time.Duration) (store.Tally, error) {
		return h.Count(ctx, []string{key}, []store.Budget{{Limit: 10, Window: window}}, 1)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := count(k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := count("c", time.Hour); store.ReasonOf(err) != store.ReasonFull {
		t.Fatalf("Count of a new key in a full store: %v, want %v", err, store.ReasonFull)
	}
	if tl, err := count("a", time.Minute); err != nil || !tl.Allowed || tl.Counts[0] != 2 {
		t.Fatalf("Count of a held key in a full store: %+v, %v; want allowed, count 2", tl, err)
	}
	clk.Advance(time.Minute) // a and b expire
	tl, err := count("c", time.Hour)
	if err != nil || !tl.Allowed || tl.Counts[0] != 1 || !tl.ExpiresAt[0].Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("Count of a new key once two had expired: %+v, %v", tl, err)
	}
}

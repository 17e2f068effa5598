package storetest_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storetest"
)

// flaw is the one way a test backend breaks the contract.
type flaw int

const (
	sound              flaw = iota
	losesUpdates            // reads, unlocks, applies, relocks, writes
	ignoresExpiry           // reads and applies expired entries
	evictsWhenFull          // removes a live entry to make room
	halfMultiKey            // writes key 0, unlocks, then writes the rest
	judgesAhead             // tells apply the time, judges expiry minutes later
	judgesBehind            // tells apply the time, judges expiry minutes earlier
	sweepsLive              // Sweep removes live entries too
	writesOnApplyError      // writes what apply left even when it failed
	retriesStale            // runs apply twice on the same entries, keeping the second
	countNotAtomic          // its own Count charges keys with room when another has none
)

// skew is how far a broken clock is off.
const skew = 5 * time.Minute

// world is the map a test backend keeps its entries in, shared by the
// backends of "instances" of a shared store.
type world struct {
	mu  sync.Mutex
	m   map[[2]string]item
	max int // live entries; 0 for no bound
}

type item struct {
	v   []byte
	exp time.Time
}

func newWorld(max int) *world { return &world{m: make(map[[2]string]item), max: max} }

// mapBackend is a store.Backend over a world, broken by its flaw.
type mapBackend struct {
	w      *world
	flaw   flaw
	shared bool
	inline bool
	clock  time.Duration // this instance's clock is off by clock
}

func (b *mapBackend) Shared() bool { return b.shared }
func (b *mapBackend) Inline() bool { return b.inline }
func (b *mapBackend) Close() error { return nil }

func (b *mapBackend) now() time.Time { return time.Now().Add(b.clock) }

// judge is the time expiry is judged at.
func (b *mapBackend) judge(now time.Time) time.Time {
	switch b.flaw {
	case judgesAhead:
		return now.Add(skew)
	case judgesBehind:
		return now.Add(-skew)
	}
	return now
}

func (b *mapBackend) live(it item, judge time.Time) bool {
	return b.flaw == ignoresExpiry || it.exp.After(judge)
}

func (b *mapBackend) Update(_ context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	w := b.w
	w.mu.Lock()
	now := b.now()
	judge := b.judge(now)
	es := make([]store.Entry, len(keys))
	held := make([]bool, len(keys))
	for i, k := range keys {
		if it, ok := w.m[[2]string{prefix, k}]; ok && b.live(it, judge) {
			es[i] = store.Entry{Value: bytes.Clone(it.v), ExpiresAt: it.exp}
			held[i] = true
		}
	}
	if b.flaw == losesUpdates {
		w.mu.Unlock()
		runtime.Gosched()
	}
	err := apply(now, es)
	if b.flaw == retriesStale && err == nil {
		err = apply(now, es)
	}
	if b.flaw == losesUpdates {
		w.mu.Lock()
	}
	defer func() { w.mu.Unlock() }()
	if err != nil && b.flaw != writesOnApplyError {
		return err
	}
	added := 0
	for i := range keys {
		if !held[i] && es[i].Live() {
			added++
		}
	}
	if added > 0 && w.max > 0 {
		if len(w.m)+added > w.max {
			b.sweepLocked(judge)
		}
		for len(w.m)+added > w.max {
			if b.flaw != evictsWhenFull {
				return store.ErrFull
			}
			for k := range w.m { // evict any other entry
				if k[0] != prefix || !slices.Contains(keys, k[1]) {
					delete(w.m, k)
					break
				}
			}
		}
	}
	for i, k := range keys {
		if i == 1 && b.flaw == halfMultiKey {
			w.mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			w.mu.Lock()
		}
		mk := [2]string{prefix, k}
		if es[i].Value == nil {
			delete(w.m, mk)
			continue
		}
		w.m[mk] = item{v: bytes.Clone(es[i].Value), exp: es[i].ExpiresAt}
	}
	return err
}

func (b *mapBackend) Read(_ context.Context, prefix string, keys []string) ([]store.Entry, error) {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	judge := b.judge(b.now())
	out := make([]store.Entry, len(keys))
	for i, k := range keys {
		if it, ok := w.m[[2]string{prefix, k}]; ok && b.live(it, judge) {
			out[i] = store.Entry{Value: bytes.Clone(it.v), ExpiresAt: it.exp}
		}
	}
	return out, nil
}

func (b *mapBackend) Sweep(context.Context) (int, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return b.sweepLocked(b.judge(b.now())), nil
}

func (b *mapBackend) sweepLocked(judge time.Time) int {
	n := 0
	for k, it := range b.w.m {
		if b.flaw == sweepsLive || !it.exp.After(judge) {
			delete(b.w.m, k)
			n++
		}
	}
	return n
}

// counterBackend is a mapBackend with a Count of its own.
type counterBackend struct{ *mapBackend }

func (b counterBackend) Count(_ context.Context, prefix string, keys []string, caps []store.Cap, n int64, t *store.Tally) error {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.UnixMilli(b.now().UnixMilli())
	judge := b.judge(now)
	*t = store.Tally{Now: now, Limiting: -1}
	its := make([]item, len(keys))
	added := 0
	for i, k := range keys {
		it, ok := w.m[[2]string{prefix, k}]
		if ok && b.live(it, judge) {
			v, err := store.ParseCount(it.v)
			if err != nil {
				return err
			}
			t.Counts[i], t.ExpiresAt[i] = v, it.exp
		} else {
			it = item{exp: now.Add(caps[i].Window).Truncate(time.Millisecond)}
			added++
		}
		its[i] = it
		if t.Limiting < 0 && t.Counts[i] > caps[i].Max-n {
			t.Limiting = i
		}
	}
	if t.Limiting >= 0 && b.flaw != countNotAtomic {
		return nil
	}
	if w.max > 0 && len(w.m)+added > w.max {
		return store.ErrFull
	}
	t.Allowed = t.Limiting < 0
	for i, k := range keys {
		if t.Counts[i] > caps[i].Max-n {
			continue
		}
		t.Counts[i] += n
		t.ExpiresAt[i] = its[i].exp
		w.m[[2]string{prefix, k}] = item{v: store.AppendCount(nil, t.Counts[i]), exp: its[i].exp}
	}
	return nil
}

// variant is a test backend and how to open a Pair on it.
type variant struct {
	name    string
	flaw    flaw
	shared  bool
	inline  bool
	counter bool
	// clockSecond is how far Second's clock is off, for a shared store.
	clockSecond time.Duration
	// want are the cases that must find the flaw.
	want []string
}

func (v variant) open(t *testing.T, w *world, clock time.Duration) *store.Store {
	b := &mapBackend{w: w, flaw: v.flaw, shared: v.shared, inline: v.inline, clock: clock}
	var be store.Backend = b
	if v.counter {
		be = counterBackend{b}
	}
	opts := store.Options{Logger: slog.New(slog.DiscardHandler), Breaker: store.BreakerOptions{Failures: -1}}
	s := store.New(be, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func (v variant) pair(t *testing.T) storetest.Pair {
	handle := func(s *store.Store, prefix string) *store.Handle {
		h, err := s.Handle(prefix)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	w := newWorld(0)
	first := v.open(t, w, 0)
	p := storetest.Pair{First: handle(first, "app:"), Other: handle(first, "other:")}
	p.Second = p.First
	if v.shared {
		p.Second = handle(v.open(t, w, v.clockSecond), "app:")
	}
	p.NewBounded = func(max int) (*store.Handle, error) {
		return v.open(t, newWorld(max), 0).Handle("bounded:")
	}
	return p
}

var variants = []variant{
	{name: "sound-shared", flaw: sound, shared: true},
	{name: "sound-shared-counter", flaw: sound, shared: true, counter: true},
	{name: "sound-inline", flaw: sound, inline: true},
	{name: "sound-inline-counter", flaw: sound, inline: true, counter: true},
	{name: "loses-updates", flaw: losesUpdates, shared: true, want: []string{"no-lost-update"}},
	{name: "ignores-expiry", flaw: ignoresExpiry, inline: true, want: []string{"expired-not-seen"}},
	{name: "evicts-when-full", flaw: evictsWhenFull, inline: true, want: []string{"bound"}},
	{name: "half-multi-key", flaw: halfMultiKey, shared: true, want: []string{"multi-key-atomic"}},
	{name: "judges-expiry-ahead", flaw: judgesAhead, inline: true, want: []string{"expiry-not-early"}},
	{name: "judges-expiry-behind", flaw: judgesBehind, inline: true, want: []string{"expired-not-seen"}},
	{name: "second-clock-ahead", flaw: sound, shared: true, clockSecond: skew, want: []string{"expiry-not-early"}},
	{name: "second-clock-behind", flaw: sound, shared: true, clockSecond: -skew, want: []string{"expiry-not-late"}},
	{name: "sweeps-live", flaw: sweepsLive, inline: true, want: []string{"sweep"}},
	{name: "writes-on-apply-error", flaw: writesOnApplyError, shared: true, want: []string{"apply-error", "value-limits"}},
	{name: "retries-with-stale-entries", flaw: retriesStale, shared: true, want: []string{"apply-retried-once", "no-lost-update"}},
	{name: "count-not-atomic", flaw: countNotAtomic, shared: true, counter: true, want: []string{"count-all-or-nothing"}},
}

// TestBrokenStores runs every case against each test backend: a sound one
// passes them all, and each broken one is caught by the cases that test
// what it breaks, with a *ContractViolation.
func TestBrokenStores(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			violated := map[string]string{}
			for _, c := range storetest.Cases {
				p := v.pair(t)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				err := c.Run(ctx, p)
				cancel()
				var cv *storetest.ContractViolation
				switch {
				case err == nil:
				case errors.Is(err, storetest.ErrNotApplicable):
					if v.shared && (c.Name == "round-trip" || c.Name == "shared-visibility") {
						t.Errorf("%s: skipped for a shared store: %v", c.Name, err)
					}
				case errors.As(err, &cv):
					if cv.Case != c.Name {
						t.Errorf("%s: violation names case %q", c.Name, cv.Case)
					}
					violated[c.Name] = cv.What
				default:
					t.Errorf("%s: failed with %T, not a *ContractViolation: %v", c.Name, err, err)
				}
			}
			if v.flaw == sound && v.clockSecond == 0 {
				for name, what := range violated {
					t.Errorf("a sound store violated %s: %s", name, what)
				}
				return
			}
			for _, name := range v.want {
				what, ok := violated[name]
				if !ok {
					t.Errorf("the broken store passed %q; violations found: %v", name, slices.Sorted(maps.Keys(violated)))
					continue
				}
				t.Logf("%s: %s", name, what)
			}
		})
	}
}

// TestRunSkips checks that Run skips the cases that do not apply to a store
// that is not shared and has no bound.
func TestRunSkips(t *testing.T) {
	v := variant{name: "unshared", inline: true}
	var skipped []string
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) storetest.Pair {
			p := v.pair(t)
			p.NewBounded = nil
			t.Cleanup(func() {
				if t.Skipped() {
					skipped = append(skipped, t.Name())
				}
			})
			return p
		})
	})
	want := []string{"TestRunSkips/suite/round-trip", "TestRunSkips/suite/shared-visibility", "TestRunSkips/suite/bound"}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
}

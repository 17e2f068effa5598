package degraded

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// The simulation's schedules driven through limiter.Limiter as it counts
// today, over the same fault layer. Its fleet runs on the process clock,
// so a schedule does not replay exactly: the virtual time of each step is
// slept, scaled down by oldScale. GATECOUNT_SIM_OLD=N runs N schedules.

const oldScale = 25 // a virtual second is 40 ms

// oldBackend is one life's way to the store, as a Backend of its own, so
// that each life gets a Store (and a fleet) of its own.
type oldBackend struct {
	w    *world
	s    *slot
	dead bool // crashed: no call of its own reaches the store
}

func (b *oldBackend) Shared() bool { return true }
func (b *oldBackend) Prompt() bool { return true }

func (b *oldBackend) fault() error {
	if b.dead {
		return errDown
	}
	return conn{w: b.w, s: b.s}.fault()
}

func (b *oldBackend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.fault(); err != nil {
		return err
	}
	return b.w.mem.Update(ctx, prefix, keys, apply)
}

func (b *oldBackend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.fault(); err != nil {
		return nil, err
	}
	return b.w.mem.Read(ctx, prefix, keys)
}

func (b *oldBackend) Sweep(context.Context) (int, error) { return 0, nil }
func (b *oldBackend) Close() error                       { return nil }

// oldNode is a life of limiter.Limiter under the Local policy.
type oldNode struct {
	w  *world
	b  *oldBackend
	st *store.Store
	l  *limiter.Limiter
}

func newOldNode(w *world, l *life) node {
	b := &oldBackend{w: w, s: l.s}
	st := store.New(b, store.Options{
		Logger: slog.New(slog.DiscardHandler), Deadline: 20 * time.Millisecond,
		Announce: time.Second / oldScale, Breaker: store.BreakerOptions{Cooldown: time.Second / oldScale},
	})
	h, err := st.Handle("keys")
	if err != nil {
		w.t.Fatal(err)
	}
	lim, err := limiter.New(h, limiter.Options{Name: "sim", Budget: w.budget, Unavailable: limiter.Local, Logger: slog.New(slog.DiscardHandler), LocalMaxEntries: 64})
	if err != nil {
		w.t.Fatal(err)
	}
	return &oldNode{w: w, b: b, st: st, l: lim}
}

func (n *oldNode) attempt(_ store.Budget, keys ...string) (Outcome, bool, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	d, err := n.l.Attempt(ctx, keys...)
	switch {
	case err != nil:
		return 0, false, -1, context.DeadlineExceeded
	case d.Local:
		return Alone, d.Allowed, d.Limiting, nil
	case d.Unavailable:
		return Down, d.Allowed, d.Limiting, nil
	}
	return Counted, d.Allowed, d.Limiting, nil
}

// beat reports whether the life can reach the store: its fleet announces
// itself on its own.
func (n *oldNode) beat() bool {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return !n.w.out(n.b.s)
}

func (n *oldNode) stop() bool {
	n.l.Close()
	n.st.Close()
	return true
}

func (n *oldNode) crash() {
	n.w.mu.Lock()
	n.b.dead = true
	n.w.mu.Unlock()
	go n.st.Close() // its fleet stops; it can no longer leave the fleet's entry
}

// TestSimOld runs the schedules against limiter.Limiter as it counts today
// and reports the rows each breaks; it fails on none.
func TestSimOld(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("GATECOUNT_SIM_OLD"))
	if runs == 0 {
		t.Skip("GATECOUNT_SIM_OLD=N runs N schedules against the limiter's present degraded path")
	}
	byRow := map[string]int{}
	first := uint64(1)
	if s, err := strconv.ParseUint(os.Getenv("GATECOUNT_SIM_SEED"), 10, 64); err == nil {
		first = s
	}
	for seed := first; seed < first+uint64(runs); seed++ {
		w := newWorld(t, seed, newOldNode, func(d time.Duration) { time.Sleep(d / oldScale) }, runs == 1)
		w.end = w.clk.Now().Add(simWindow - time.Second)
		for steps := 40 + w.rng.IntN(160); steps > 0 && w.clk.Now().Before(w.end); steps-- {
			w.step()
		}
		for _, b := range w.check() {
			row, _, _ := strings.Cut(b, ":")
			if byRow[row] == 0 {
				t.Logf("seed %d: %s", seed, b)
			}
			byRow[row]++
		}
		for _, s := range w.slots {
			if s.life != nil {
				s.life.n.stop()
			}
		}
		w.mem.Close()
		if runs == 1 {
			t.Log("\n" + strings.Join(w.log, "\n"))
		}
	}
	t.Logf("%d schedules: rows broken %v", runs, fmt.Sprint(byRow))
}

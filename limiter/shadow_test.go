package limiter_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// outcomes is an Observer that tallies outcomes.
type outcomes struct {
	mu sync.Mutex
	n  map[limiter.Outcome]int
}

func (o *outcomes) ObserveDecision(_ string, out limiter.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[limiter.Outcome]int{}
	}
	o.n[out]++
}

// A limiter in shadow counts as an enforcing one does, and reports its
// would-be refusals as ShadowDenied, logged once per key per window under
// an ID that is not the key.
func TestShadow(t *testing.T) {
	budget := limiter.Budget{Limit: 3, Window: time.Minute}
	attempts := []string{"alice", "alice", "alice", "alice", "alice", "bob", "alice", "bob"}
	for _, shadow := range []bool{false, true} {
		t.Run(map[bool]string{false: "enforcing", true: "shadow"}[shadow], func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			obs := &outcomes{}
			s := memory.New(memory.Options{Store: store.Options{Logger: quiet}})
			t.Cleanup(func() { s.Close() })
			h, _ := s.Handle("s:")
			l, err := limiter.New(h, limiter.Options{Name: "s", Budget: budget, Logger: log, Observer: obs, Shadow: shadow})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			var allowed []bool
			for _, key := range attempts {
				d, err := l.Attempt(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if d.Shadow != shadow {
					t.Errorf("Decision.Shadow %v, want %v", d.Shadow, shadow)
				}
				allowed = append(allowed, d.Allowed)
			}
			want := []bool{true, true, true, false, false, true, false, true}
			if !slices.Equal(allowed, want) {
				t.Errorf("allowed %v, want %v: shadow counts as enforcing does", allowed, want)
			}
			refused := limiter.Denied
			if shadow {
				refused = limiter.ShadowDenied
			}
			if obs.n[limiter.Allowed] != 5 || obs.n[refused] != 3 || len(obs.n) != 2 {
				t.Errorf("outcomes %v, want 5 allowed and 3 %v", obs.n, refused)
			}
			lines := strings.Count(logs.String(), limiter.KindShadowDenied)
			if want := map[bool]int{false: 0, true: 1}[shadow]; lines != want {
				t.Errorf("%d shadow lines, want %d (one per key per window):\n%s", lines, want, logs.String())
			}
			if strings.Contains(logs.String(), "alice") {
				t.Errorf("a log line names the key:\n%s", logs.String())
			}
		})
	}
}

// In shadow, an attempt the store cannot answer, which the Deny policy
// would refuse, is reported as AllowedUnavailable: it went ahead.
func TestShadowUnavailable(t *testing.T) {
	o := store.Options{Logger: quiet, Breaker: store.BreakerOptions{Failures: -1}}.WithDefaults()
	f := &flaky{remote: memory.NewBackend(memory.Options{Store: o})}
	f.down.Store(true)
	s := store.New(f, o)
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("u:")
	obs := &outcomes{}
	l, err := limiter.New(h, limiter.Options{Name: "u", Budget: limiter.Budget{Limit: 1, Window: time.Minute}, Unavailable: limiter.Deny, Logger: quiet, Observer: obs, Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d, err := l.Attempt(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Unavailable || d.Allowed || !d.Shadow {
		t.Fatalf("decision %+v, want unavailable, refused by policy, in shadow", d)
	}
	if got := limiter.OutcomeOf(&d); got != limiter.AllowedUnavailable || obs.n[limiter.AllowedUnavailable] != 1 {
		t.Errorf("outcome %v (observed %v), want %v", got, obs.n, limiter.AllowedUnavailable)
	}
}

// The shadow log's memory is bounded: past 4,096 keys logged in live
// windows, the would-be refusals of new keys are logged only now and then,
// and still counted.
func TestShadowLogBounded(t *testing.T) {
	var logs bytes.Buffer
	obs := &outcomes{}
	s := memory.New(memory.Options{Store: store.Options{Logger: quiet}})
	t.Cleanup(func() { s.Close() })
	h, _ := s.Handle("b:")
	l, err := limiter.New(h, limiter.Options{Name: "b", Budget: limiter.Budget{Limit: 1, Window: time.Hour},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observer: obs, Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const keys = 6000
	for i := range keys {
		for range 2 {
			if _, err := l.Attempt(context.Background(), fmt.Sprint("key-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	lines := strings.Count(logs.String(), "kind="+limiter.KindShadowDenied)
	if lines < 4096 || lines >= keys || obs.n[limiter.ShadowDenied] != keys {
		t.Errorf("%d lines for %d keys refused (%d counted), want 4,096 and a few", lines, keys, obs.n[limiter.ShadowDenied])
	}
}

package metrics

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/storekit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCounts(t *testing.T) {
	m := newMaps()
	s := memory.New(memory.Options{Store: store.Options{Observer: m}})
	defer s.Close()
	m.Watch("memory", s)
	h, _ := s.Handle("signin:")
	l, err := limiter.New(h, limiter.Options{Name: "signin", Budget: limiter.Budget{Limit: 2, Window: time.Minute}, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		l.Attempt(context.Background(), "alice@example.com")
	}
	var got struct {
		Decisions map[string]map[string]int
		Calls     map[string]int
		Latency   map[string]int `json:"latency_us"`
		Stores    map[string]map[string]any
	}
	out := m.Map().String()
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if d := got.Decisions["signin"]; d["allowed"] != 2 || d["denied"] != 1 {
		t.Errorf("decisions %v", got.Decisions)
	}
	if got.Calls["count"] != 3 || got.Latency["le_inf"] != 3 {
		t.Errorf("calls %v, latency %v", got.Calls, got.Latency)
	}
	if st := got.Stores["memory"]; st["entries"] != 1.0 || st["max_entries"] != float64(storekit.DefaultMaxEntriesMemory) || st["max_in_flight"] != float64(store.Options{}.WithDefaults().MaxInFlight) || st["breaker_open"] != false {
		t.Errorf("stats %+v", st)
	}
	for name, st := range got.Stores {
		for k := range st {
			if k != strings.ToLower(k) {
				t.Errorf("stores.%s.%s: not lower case", name, k)
			}
		}
	}
	// The buckets sort as their bounds do.
	var names []string
	for k := range got.Latency {
		names = append(names, k)
	}
	sort.Strings(names)
	want := []string{"le_0000100", "le_0000500", "le_0001000", "le_0005000", "le_0010000", "le_0050000", "le_0100000", "le_0500000", "le_1000000", "le_2000000", "le_inf"}
	if !slices.Equal(names, want) {
		t.Errorf("latency buckets in text order %v, want %v", names, want)
	}
	if strings.Contains(out, "alice") {
		t.Errorf("a key in the metrics: %s", out)
	}
}

package metrics

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
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
		Stores    map[string]store.Stats
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
	if st := got.Stores["memory"]; st.Entries != 1 || st.MaxEntries != store.DefaultMaxEntriesMemory || st.MaxInFlight != store.DefaultMaxInFlight {
		t.Errorf("stats %+v", st)
	}
	if strings.Contains(out, "alice") {
		t.Errorf("a key in the metrics: %s", out)
	}
}

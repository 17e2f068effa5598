package prometheus_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"

	gcprom "github.com/gatecount/gatecount/metrics/prometheus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The collector, registered in a real registry, reports decisions, store
// calls and the watched store's stats, passes the registry's consistency
// checks, and never carries a key or an address.
func TestCollectorInARegistry(t *testing.T) {
	c := gcprom.New("gatecount")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	s := memory.New(memory.Options{Store: store.Options{Observer: c}})
	defer s.Close()
	c.Watch("memory", s)
	h, err := s.Handle("health:")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := middleware.New(h, limiter.Budget{Limit: 2, Window: time.Minute},
		middleware.Options{Name: "health", Observer: c, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	ok := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = "198.51.100.7:1234"
		ok.ServeHTTP(httptest.NewRecorder(), r)
	}

	want := `
# HELP gatecount_decisions_total Decisions of each limiter, by outcome.
# TYPE gatecount_decisions_total counter
gatecount_decisions_total{limiter="health",outcome="allowed"} 2
gatecount_decisions_total{limiter="health",outcome="denied"} 1
# HELP gatecount_store_entries Live entries the store holds.
# TYPE gatecount_store_entries gauge
gatecount_store_entries{store="memory"} 1
# HELP gatecount_store_max_entries The store's bound on live entries.
# TYPE gatecount_store_max_entries gauge
gatecount_store_max_entries{store="memory"} 100000
# HELP gatecount_store_breaker_open 1 while a breaker of the store is open.
# TYPE gatecount_store_breaker_open gauge
gatecount_store_breaker_open{store="memory"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gatecount_decisions_total", "gatecount_store_entries", "gatecount_store_max_entries", "gatecount_store_breaker_open"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "gatecount_store_call_duration_seconds"); n != 1 {
		t.Fatalf("%d call series, want 1 (count, ok)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}

	// Scraped over HTTP as Prometheus would.
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, line := range []string{
		`gatecount_store_call_duration_seconds_count{op="count",result="ok"} 3`,
		`gatecount_store_in_flight{store="memory"} 0`,
		`gatecount_store_max_in_flight{store="memory"} 64`,
		`gatecount_store_waited_total{store="memory"} 0`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("scrape lacks %s:\n%s", line, body)
		}
	}
	if strings.Contains(body, "198.51.100") {
		t.Errorf("an address in the metrics:\n%s", body)
	}
}

// Unavailable calls are counted by their reason.
func TestCollectorCountsUnavailableByReason(t *testing.T) {
	c := gcprom.New("gc")
	c.ObserveCall(store.CallEvent{Op: "count", Duration: time.Millisecond, Reason: store.ReasonDeadline})
	c.ObserveCall(store.CallEvent{Op: "count", Duration: time.Millisecond, Reason: store.ReasonDeadline})
	c.ObserveCall(store.CallEvent{Op: "update", Duration: time.Millisecond})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "gc_store_call_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			got[key] = m.GetHistogram().GetSampleCount()
		}
	}
	if got["op=count result=deadline "] != 2 || got["op=update result=ok "] != 1 || len(got) != 2 {
		t.Fatalf("call series %v", got)
	}
}

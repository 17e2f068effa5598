package otel_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"

	gcotel "github.com/gatecount/gatecount/metrics/otel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	_ limiter.Observer = (*gcotel.Observer)(nil)
	_ store.Observer   = (*gcotel.Observer)(nil)
)

// newReader returns an Observer under namespace ns whose figures the
// returned in-memory reader reads back.
func newReader(t *testing.T, ns string) (*gcotel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	o, err := gcotel.New(mp, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Error(err)
		}
	})
	return o, r
}

// collect reads every metric of the Observer's scope, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != gcotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, gcotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

func sum(temporality metricdata.Temporality, monotonic bool, points ...metricdata.DataPoint[int64]) metricdata.Sum[int64] {
	return metricdata.Sum[int64]{DataPoints: points, Temporality: temporality, IsMonotonic: monotonic}
}

func point(v int64, attrs ...attribute.KeyValue) metricdata.DataPoint[int64] {
	return metricdata.DataPoint[int64]{Attributes: attribute.NewSet(attrs...), Value: v}
}

// Decisions, store calls and the watched stores' figures, made by a real
// middleware over a real store, read back through an in-memory reader:
// every instrument with its kind, unit and values, and never a key or an
// address among the attributes.
func TestObserverThroughAManualReader(t *testing.T) {
	o, r := newReader(t, "gatecount")
	s := memory.New(memory.Options{Store: store.Options{Observer: o}})
	defer s.Close()
	o.Watch("memory", s)
	// A store whose backend does not tell its entries (no store.Sizer).
	untold := store.New(struct{ store.Backend }{memory.NewBackend(memory.Options{Store: store.Options{}.WithDefaults()})}, store.Options{})
	defer untold.Close()
	o.Watch("untold", untold)

	h, err := s.Handle("health:")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := middleware.New(h, limiter.Budget{Limit: 2, Window: time.Minute},
		middleware.Options{Name: "health", Observer: o, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	ok := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		req := httptest.NewRequest("GET", "/health", nil)
		req.RemoteAddr = "198.51.100.7:1234"
		ok.ServeHTTP(httptest.NewRecorder(), req)
	}

	got := collect(t, r)
	mem, un := attribute.String("store", "memory"), attribute.String("store", "untold")
	cum := metricdata.CumulativeTemporality
	for _, want := range []metricdata.Metrics{
		{Name: "gatecount.decisions", Unit: "{decision}", Description: "Decisions of each limiter, by outcome.",
			Data: sum(cum, true,
				point(2, attribute.String("limiter", "health"), attribute.String("outcome", "allowed")),
				point(1, attribute.String("limiter", "health"), attribute.String("outcome", "denied")))},
		{Name: "gatecount.store.in_flight", Unit: "{call}", Description: "Calls running in the store now.",
			Data: sum(cum, false, point(0, mem), point(0, un))},
		{Name: "gatecount.store.queued", Unit: "{call}", Description: "Calls waiting for a slot under the in-flight bound now.",
			Data: sum(cum, false, point(0, mem), point(0, un))},
		{Name: "gatecount.store.waited", Unit: "{call}", Description: "Calls that have waited for a slot since the store opened.",
			Data: sum(cum, true, point(0, mem), point(0, un))},
		{Name: "gatecount.store.entries", Unit: "{entry}", Description: "Live entries the store holds.",
			Data: sum(cum, false, point(1, mem))},
		{Name: "gatecount.store.in_flight.limit", Unit: "{call}", Description: "The store's bound on calls in flight.",
			Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{point(64, mem), point(64, un)}}},
		{Name: "gatecount.store.breaker.open", Unit: "1", Description: "1 while a breaker of the store is open.",
			Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{point(0, mem), point(0, un)}}},
		{Name: "gatecount.store.entries.limit", Unit: "{entry}", Description: "The store's bound on live entries.",
			Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{point(100000, mem)}}},
		{Name: "gatecount.store.members", Unit: "{instance}", Description: "The instances sharing the store, as this one last counted them.",
			Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{point(1, mem), point(1, un)}}},
	} {
		t.Run(want.Name, func(t *testing.T) {
			m, found := got[want.Name]
			if !found {
				t.Fatalf("no %s among %v", want.Name, slices.Sorted(maps.Keys(got)))
			}
			metricdatatest.AssertEqual(t, want, m, metricdatatest.IgnoreTimestamp())
		})
	}

	t.Run("gatecount.store.call.duration", func(t *testing.T) {
		m := got["gatecount.store.call.duration"]
		if m.Unit != "s" {
			t.Errorf("unit %q, want s", m.Unit)
		}
		hist, isHist := m.Data.(metricdata.Histogram[float64])
		if !isHist || len(hist.DataPoints) != 1 {
			t.Fatalf("data %#v, want one histogram point", m.Data)
		}
		p := hist.DataPoints[0]
		want := attribute.NewSet(attribute.String("op", "count"), attribute.String("result", "ok"))
		if !p.Attributes.Equals(&want) || p.Count != 3 {
			t.Errorf("point %v count %d, want %v count 3", p.Attributes.ToSlice(), p.Count, want.ToSlice())
		}
		if !slices.Equal(p.Bounds, gcotel.Buckets) {
			t.Errorf("bounds %v, want %v", p.Bounds, gcotel.Buckets)
		}
	})

	for name, m := range got {
		if points(m.Data) == 0 {
			t.Errorf("%s: no points read", name)
		}
		for _, attrs := range attributeSets(m.Data) {
			for _, kv := range attrs.ToSlice() {
				if strings.Contains(kv.Value.String(), "198.51.100") {
					t.Errorf("%s: an address among the attributes: %v", name, kv)
				}
			}
		}
	}
}

// Unavailable calls are recorded under their reason as the result, each
// pair of kind and result a series of its own.
func TestObserverRecordsUnavailableByReason(t *testing.T) {
	o, r := newReader(t, "gc")
	for _, e := range []store.CallEvent{
		{Op: "count", Duration: time.Millisecond, Reason: store.ReasonDeadline},
		{Op: "count", Duration: time.Millisecond, Reason: store.ReasonDeadline},
		{Op: "update", Duration: 3 * time.Second},
		{Op: "read", Duration: 50 * time.Microsecond, Reason: store.ReasonOverloaded},
	} {
		o.ObserveCall(e)
	}
	hist, isHist := collect(t, r)["gc.store.call.duration"].Data.(metricdata.Histogram[float64])
	if !isHist {
		t.Fatal("no histogram gc.store.call.duration")
	}
	got := map[string]uint64{}
	for _, p := range hist.DataPoints {
		op, _ := p.Attributes.Value("op")
		result, _ := p.Attributes.Value("result")
		got[op.AsString()+" "+result.AsString()] = p.Count
	}
	want := map[string]uint64{"count deadline": 2, "update ok": 1, "read overloaded": 1}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("series %q: %d calls, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

// New refuses a namespace that makes no instrument name, and an empty one
// leaves the names bare.
func TestNewNamespace(t *testing.T) {
	for _, tc := range []struct {
		namespace string
		wantErr   bool
		wantName  string
	}{
		{namespace: "gatecount", wantName: "gatecount.decisions"},
		{namespace: "my_app.gatecount", wantName: "my_app.gatecount.decisions"},
		{namespace: "", wantName: "decisions"},
		{namespace: "9lives", wantErr: true},
		{namespace: "gate count", wantErr: true},
	} {
		t.Run(tc.namespace, func(t *testing.T) {
			r := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
			defer mp.Shutdown(context.Background())
			o, err := gcotel.New(mp, tc.namespace)
			if tc.wantErr {
				if !errors.Is(err, sdkmetric.ErrInstrumentName) || o != nil {
					t.Fatalf("New(%q) = %v, %v; want nil and an ErrInstrumentName", tc.namespace, o, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			o.ObserveDecision("health", limiter.Allowed)
			if _, found := collect(t, r)[tc.wantName]; !found {
				t.Errorf("no %s", tc.wantName)
			}
		})
	}
}

// After Close the watched stores are no longer read, while decisions are
// still counted; a second Close is harmless.
func TestCloseStopsReadingStores(t *testing.T) {
	o, r := newReader(t, "gatecount")
	s := memory.New(memory.Options{})
	defer s.Close()
	o.Watch("memory", s)
	if n := points(collect(t, r)["gatecount.store.members"].Data); n != 1 {
		t.Fatalf("%d members points before Close, want 1", n)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	o.ObserveDecision("health", limiter.Denied)
	got := collect(t, r)
	if n := points(got["gatecount.store.members"].Data); n != 0 {
		t.Errorf("%d members points after Close, want 0", n)
	}
	if n := points(got["gatecount.decisions"].Data); n != 1 {
		t.Errorf("%d decision points after Close, want 1", n)
	}
}

func attributeSets(data metricdata.Aggregation) []attribute.Set {
	var sets []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

func points(data metricdata.Aggregation) int { return len(attributeSets(data)) }

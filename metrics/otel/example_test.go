package otel_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"

	gcotel "github.com/gatecount/gatecount/metrics/otel"
)

// One Observer hears the store's calls and the limiter's decisions, and
// reads the store's figures when the provider collects. An app gives the
// provider a periodic reader and an exporter; here a manual reader reads
// the figures back.
func ExampleObserver() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	o, err := gcotel.New(provider, "gatecount")
	if err != nil {
		log.Fatal(err)
	}
	defer o.Close()
	s := memory.New(memory.Options{Store: store.Options{Observer: o}})
	defer s.Close()
	o.Watch("memory", s)
	h, err := s.Handle("health:")
	if err != nil {
		log.Fatal(err)
	}
	perIP, err := middleware.New(h, limiter.Budget{Limit: 2, Window: time.Minute},
		middleware.Options{Name: "health", Observer: o, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer perIP.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for range 3 {
		perIP.Wrap(ok).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "gatecount.decisions":
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if outcome, _ := p.Attributes.Value("outcome"); outcome.AsString() == "denied" {
						fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
					}
				}
			case "gatecount.store.entries":
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value)
				}
			case "gatecount.store.call.duration":
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					fmt.Println(m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count, "calls")
				}
			}
		}
	}
	// Unordered output:
	// gatecount.decisions limiter=health,outcome=denied 1
	// gatecount.store.entries store=memory 1
	// gatecount.store.call.duration op=count,result=ok 3 calls
}

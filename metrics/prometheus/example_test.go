package prometheus_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"

	gcprom "github.com/gatecount/gatecount/metrics/prometheus"
)

// One Collector hears the store's calls and the limiters' decisions, and
// reads the watched store's figures at each scrape.
func ExampleNew() {
	c := gcprom.New("gatecount")
	prometheus.MustRegister(c) // or your own registry
	s := memory.New(memory.Options{Store: store.Options{Observer: c}})
	defer s.Close()
	c.Watch("memory", s)
	h, err := s.Handle("search:")
	if err != nil {
		log.Fatal(err)
	}
	perIP, err := middleware.New(h, limiter.Budget{Limit: 1, Window: time.Minute},
		middleware.Options{Name: "search", Observer: c})
	if err != nil {
		log.Fatal(err)
	}
	defer perIP.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /search", perIP.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("GET /metrics", promhttp.Handler()) // on an address only operators reach

	for range 2 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/search", nil))
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "gatecount_decisions_total") || strings.HasPrefix(line, "gatecount_store_entries") {
			fmt.Println(line)
		}
	}
	// Output:
	// gatecount_decisions_total{limiter="search",outcome="allowed"} 1
	// gatecount_decisions_total{limiter="search",outcome="denied"} 1
	// gatecount_store_entries{store="memory"} 1
}

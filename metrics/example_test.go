package metrics_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/metrics"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// One Expvar hears the store's calls and the limiter's decisions; serve
// expvar.Handler() (on a separate, private address) to read them at
// /debug/vars.
func ExampleExpvar() {
	m := metrics.NewExpvar("gatecount_example")
	s := memory.New(memory.Options{Store: store.Options{Observer: m}})
	defer s.Close()
	m.Watch("memory", s)
	h, err := s.Handle("health:")
	if err != nil {
		panic(err)
	}
	perIP, err := middleware.New(h, limiter.Budget{Limit: 2, Window: time.Minute},
		middleware.Options{Name: "health", Observer: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer perIP.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for range 3 {
		perIP.Wrap(ok).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	}
	fmt.Println("decisions:", m.Map().Get("decisions"))
	fmt.Println("calls:", m.Map().Get("calls"))
	fmt.Println("stores:", m.Map().Get("stores"))
	// Output:
	// decisions: {"health": {"allowed": 2, "denied": 1}}
	// calls: {"count": 3}
	// stores: {"memory": {"breaker_open":false,"entries":1,"in_flight":0,"max_entries":100000,"max_in_flight":64,"members":1,"queued":0,"waited":0}}
}

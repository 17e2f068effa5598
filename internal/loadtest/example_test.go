package loadtest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/gatecount/gatecount/internal/loadtest"
)

// Run drives POST /execute at servers and Check holds what each caller was
// admitted against its budget. Here two loopback servers share one fake
// counter of 5 per caller, as servers over one shared store do.
func ExampleRun() {
	var mu sync.Mutex
	counts := map[string]int{}
	execute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		counts[r.Header.Get("Authorization")]++
		n := counts[r.Header.Get("Authorization")]
		mu.Unlock()
		w.Header().Set("RateLimit-Policy", `"execute";q=5;w=60`)
		w.Header().Set("RateLimit", fmt.Sprintf(`"execute";r=%d;t=60`, max(5-n, 0)))
		if n > 5 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	a, b := httptest.NewServer(execute), httptest.NewServer(execute)
	defer a.Close()
	defer b.Close()

	res, err := loadtest.Run(context.Background(), loadtest.LoadConfig{
		Targets:  []string{a.URL, b.URL},
		Callers:  loadtest.NewCallers(4),
		Clients:  8,
		Requests: 100,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range res.Callers {
		fmt.Println(c.Caller.Name, "admitted", c.TotalAdmitted())
	}
	fmt.Println("wrong windows:", len(res.Check(loadtest.Expect{Budget: 5, Shared: true})))
	var report strings.Builder
	res.Write(&report, loadtest.Expect{Budget: 5, Shared: true})
	fmt.Println(strings.Contains(report.String(), "budgets     exact"))
	// Output:
	// caller-000 admitted 5
	// caller-001 admitted 5
	// caller-002 admitted 5
	// caller-003 admitted 5
	// wrong windows: 0
	// true
}

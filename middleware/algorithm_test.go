package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// For each algorithm, the fields of a response follow it, and Retry-After
// is never early: retried exactly at Retry-After the request is admitted,
// one second earlier it is refused.
func TestRetryAfterAlgorithms(t *testing.T) {
	for _, c := range []struct {
		budget limiter.Budget
		policy string
		spend  []time.Duration // when each request of the budget is made
		first  string          // RateLimit of the first
		retry  string          // Retry-After of the one past the budget
	}{
		{limiter.Budget{Limit: 3, Window: time.Minute}, `"execute";q=3;w=60`,
			[]time.Duration{0, 10 * time.Second, 20*time.Second + 300*time.Millisecond}, `"execute";r=2;t=60`, "40"},
		{limiter.Budget{Limit: 3, Window: time.Minute, Algorithm: limiter.SlidingWindow}, `"execute";q=3;w=60`,
			[]time.Duration{0, 10*time.Second + 500*time.Millisecond, 30 * time.Second}, `"execute";r=2;t=60`, "30"},
		{limiter.Budget{Limit: 3, Window: time.Minute, Algorithm: limiter.TokenBucket}, `"execute";q=3;w=60`,
			[]time.Duration{0, 0, 5*time.Second + 250*time.Millisecond}, `"execute";r=2;t=20`, "15"},
		{limiter.Budget{Limit: 2, Window: time.Minute, Burst: 4, Algorithm: limiter.TokenBucket}, `"execute";q=4;w=120`,
			[]time.Duration{0, 0, 0, 0}, `"execute";r=3;t=30`, "30"},
	} {
		t.Run(c.budget.String(), func(t *testing.T) {
			clk := clock.NewFake(t0)
			s := memStore(t, clk)
			m, err := perCaller(handle(t, s, "execute:"), c.budget, middleware.Options{Name: "execute", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			h := m.Wrap(&counting{})
			serve := func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, asCaller("alice"))
				return w
			}
			for i, at := range c.spend {
				clk.Set(t0.Add(at))
				w := serve()
				if w.Code != http.StatusOK {
					t.Fatalf("request %d of the budget: %d", i+1, w.Code)
				}
				if got := w.Header().Get("RateLimit-Policy"); got != c.policy {
					t.Errorf("RateLimit-Policy %q, want %q", got, c.policy)
				}
				if got := w.Header().Get("RateLimit"); i == 0 && got != c.first {
					t.Errorf("RateLimit of the first request %q, want %q", got, c.first)
				}
			}
			w := serve()
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != c.retry {
				t.Fatalf("past the budget: %d, Retry-After %q; want 429, %q", w.Code, w.Header().Get("Retry-After"), c.retry)
			}
			if got, want := w.Header().Get("RateLimit"), `"execute";r=0;t=`+c.retry; got != want {
				t.Errorf("RateLimit of a refusal %q, want %q", got, want)
			}
			secs, _ := strconv.Atoi(c.retry)
			at := clk.Now().Add(time.Duration(secs) * time.Second)
			clk.Set(at.Add(-time.Second))
			if w := serve(); w.Code != http.StatusTooManyRequests {
				t.Fatalf("a second before Retry-After: %d, want 429", w.Code)
			}
			clk.Set(at)
			if w := serve(); w.Code != http.StatusOK {
				t.Fatalf("at Retry-After: %d, want 200", w.Code)
			}
		})
	}
}

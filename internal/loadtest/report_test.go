package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParam(t *testing.T) {
	for _, tc := range []struct {
		field, name string
		want        int64
		ok          bool
	}{
		{`"execute";r=12;t=42`, "t", 42, true},
		{`"execute";r=12;t=42`, "r", 12, true},
		{`"execute";q=30;w=60`, "w", 60, true},
		{`"execute";t=42`, "r", 0, false},
		{`"a";t=1, "b";t=2`, "t", 1, true},
		{`"execute";t=x`, "t", 0, false},
		{``, "t", 0, false},
	} {
		got, ok := param(tc.field, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("param(%q, %q) = %d, %v; want %d, %v", tc.field, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	w := func(target int, end time.Duration, admitted, refused int) Window {
		return Window{Target: target, End: t0.Add(end), Length: time.Minute, Admitted: admitted, Refused: refused}
	}
	for _, tc := range []struct {
		name    string
		windows []Window
		expect  Expect
		wrong   int
	}{
		{"shared exact", []Window{w(0, 0, 14, 100), w(1, time.Second, 16, 90)}, Expect{30, true}, 0},
		{"shared over", []Window{w(0, 0, 20, 100), w(1, time.Second, 16, 90)}, Expect{30, true}, 1},
		{"shared under with refusals", []Window{w(0, 0, 10, 100), w(1, time.Second, 10, 90)}, Expect{30, true}, 1},
		{"shared under, too few answers", []Window{w(0, 0, 10, 0), w(1, time.Second, 10, 0)}, Expect{30, true}, 0},
		{"shared two windows", []Window{w(0, 0, 30, 5), w(1, time.Minute+time.Second, 30, 5)}, Expect{30, true}, 0},
		{"shared second window over", []Window{w(0, 0, 30, 5), w(1, time.Minute, 31, 5)}, Expect{30, true}, 1},
		{"memory exact", []Window{w(0, 0, 30, 100), w(1, 2*time.Second, 30, 90)}, Expect{30, false}, 0},
		{"memory one server short", []Window{w(0, 0, 30, 100), w(1, 2*time.Second, 29, 90)}, Expect{30, false}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{Targets: []string{"a", "b"}, Callers: []CallerResult{{Caller: Caller{Name: "c"}, Windows: tc.windows}}}
			if v := r.Check(tc.expect); len(v) != tc.wrong {
				t.Errorf("Check = %v, want %d wrong windows", v, tc.wrong)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	r := &Result{}
	for i := 1; i <= 1000; i++ {
		r.Latencies = append(r.Latencies, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond, 0.999: 999 * time.Millisecond, 1: time.Second} {
		if got := r.Percentile(p); got != want {
			t.Errorf("Percentile(%v) = %v, want %v", p, got, want)
		}
	}
	if (&Result{}).Percentile(0.5) != 0 {
		t.Error("Percentile of no latencies is not 0")
	}
}

// counter is a fake POST /execute: budget per token per minute, in one
// window per token, with the RateLimit fields the middleware writes.
type counter struct {
	budget int
	extra  int // admitted past the budget: a broken limiter
	mu     sync.Mutex
	n      map[string]int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	c.mu.Lock()
	c.n[token]++
	n := c.n[token]
	c.mu.Unlock()
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"execute";q=%d;w=60`, c.budget))
	w.Header().Set("RateLimit", fmt.Sprintf(`"execute";r=%d;t=60`, max(c.budget-n, 0)))
	if n > c.budget+c.extra {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Write([]byte("ok\n"))
}

func TestRun(t *testing.T) {
	callers := NewCallers(3)
	serve := func(t *testing.T, h http.Handler) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}
	fresh := func(extra int) *counter { return &counter{budget: 5, extra: extra, n: map[string]int{}} }
	for _, tc := range []struct {
		name    string
		targets func(t *testing.T) []string
		expect  Expect
		wrong   int
		errors  string
	}{
		{"shared", func(t *testing.T) []string {
			c := fresh(0)
			return []string{serve(t, c), serve(t, c)}
		}, Expect{5, true}, 0, ""},
		{"not shared", func(t *testing.T) []string {
			return []string{serve(t, fresh(0)), serve(t, fresh(0))}
		}, Expect{5, false}, 0, ""},
		{"not shared, taken for shared", func(t *testing.T) []string {
			return []string{serve(t, fresh(0)), serve(t, fresh(0))}
		}, Expect{5, true}, 3, ""},
		{"over-admitting", func(t *testing.T) []string {
			return []string{serve(t, fresh(1))}
		}, Expect{5, true}, 3, ""},
		{"down", func(t *testing.T) []string {
			s := httptest.NewServer(http.NotFoundHandler())
			s.Close()
			return []string{s.URL}
		}, Expect{5, true}, 0, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), LoadConfig{
				Targets: tc.targets(t), Callers: callers, Clients: 4, Requests: 60,
				ProgressEvery: time.Millisecond, Progress: func(Progress) {},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 60 || len(res.Latencies) != 60 {
				t.Errorf("%d requests, %d latencies, want 60", res.Requests, len(res.Latencies))
			}
			if v := res.Check(tc.expect); len(v) != tc.wrong {
				t.Errorf("Check = %v, want %d wrong", v, tc.wrong)
			}
			if tc.errors != "" && res.Errors[tc.errors] != 60 {
				t.Errorf("errors %v, want 60 %q", res.Errors, tc.errors)
			}
			var out strings.Builder
			res.Write(&out, tc.expect)
			if !strings.Contains(out.String(), "latency     p50") {
				t.Errorf("report:\n%s", out.String())
			}
		})
	}
}

func TestRunOnlyLoopback(t *testing.T) {
	for _, target := range []string{"http://192.0.2.1:8080", "http://example.com", "http://10.0.0.1"} {
		_, err := Run(context.Background(), LoadConfig{Targets: []string{target}, Callers: NewCallers(1), Requests: 1})
		if !errors.Is(err, ErrUsage) {
			t.Errorf("Run(%q) = %v, want ErrUsage", target, err)
		}
	}
}

func TestParseStore(t *testing.T) {
	for _, name := range []string{"memory", "SQLite", "postgres", "redis"} {
		if _, err := ParseStore(name); err != nil {
			t.Errorf("ParseStore(%q): %v", name, err)
		}
	}
	if _, err := ParseStore("mysql"); !errors.Is(err, ErrUsage) {
		t.Errorf("ParseStore(mysql) = %v, want ErrUsage", err)
	}
}

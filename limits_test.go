package gatecount_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// InMemory's store and LimitByIP's limiters live as long as the process, by
// design; every Limits a test makes with New is checked on its own
// (goleak.VerifyNone after Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/gatecount/gatecount/store/memory.(*Backend).sweepEvery"),
		goleak.IgnoreTopFunction("github.com/gatecount/gatecount/internal/clock.(*Coarse).run"))
}

type counting struct{ runs atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.runs.Add(1) }

func get(h http.Handler, ip string, caller string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = ip + ":1234"
	if caller != "" {
		r = r.WithContext(keyfunc.WithCallerID(r.Context(), caller))
	}
	h.ServeHTTP(w, r)
	return w
}

// noLeaks checks, after the test's cleanups, that it left no goroutine.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func newLimits(t *testing.T, log *slog.Logger) *gatecount.Limits {
	t.Helper()
	s := memory.New(memory.Options{Store: store.Options{Logger: log}})
	l := gatecount.New(s, gatecount.Options{Logger: log})
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		s.Close()
	})
	return l
}

// The one-line forms limit exactly, each address or caller on its own.
func TestLimitsCount(t *testing.T) {
	noLeaks(t)
	quiet := slog.New(slog.DiscardHandler)
	l := newLimits(t, quiet)
	next := &counting{}
	byIP := l.PerIP("", 3, time.Minute)(next)
	byCaller := l.PerCaller("api", 2, time.Hour)(next)
	for _, tc := range []struct {
		h      http.Handler
		ip     string
		caller string
		codes  []int
	}{
		{byIP, "192.0.2.1", "", []int{200, 200, 200, 429, 429}},
		{byIP, "192.0.2.2", "", []int{200}},
		{byCaller, "192.0.2.1", "alice", []int{200, 200, 429}},
		{byCaller, "192.0.2.1", "bob", []int{200}},
		{byCaller, "192.0.2.1", "", []int{401}},
	} {
		for i, want := range tc.codes {
			if w := get(tc.h, tc.ip, tc.caller); w.Code != want {
				t.Fatalf("%s %q request %d: %d, want %d", tc.ip, tc.caller, i+1, w.Code, want)
			}
		}
	}
	if got := next.runs.Load(); got != 3+1+2+1 {
		t.Fatalf("handler ran %d times, want 7", got)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}

// Automatic names come from the budget, and differ when one is used twice;
// stacked, each limiter keeps its member in the RateLimit fields.
func TestLimitsNames(t *testing.T) {
	noLeaks(t)
	l := newLimits(t, slog.New(slog.DiscardHandler))
	h := l.PerIP("", 10, time.Minute)(l.PerIP("", 2, 24*time.Hour)(l.PerIP("", 2, 24*time.Hour)(&counting{})))
	w := get(h, "192.0.2.1", "")
	const policy = `"ip-10-per-1m";q=10;w=60, "ip-2-per-1d";q=2;w=86400, "ip-2-per-1d-2";q=2;w=86400`
	if got := w.Header().Get("RateLimit-Policy"); got != policy {
		t.Fatalf("RateLimit-Policy: %s, want %s", got, policy)
	}
	if got := w.Header().Get("RateLimit"); got != `"ip-10-per-1m";r=9;t=60, "ip-2-per-1d";r=1;t=86400, "ip-2-per-1d-2";r=1;t=86400` {
		t.Fatalf("RateLimit: %s", got)
	}
}

// A limiter that cannot be built is never a free budget: its middleware
// answers 500 without the handler, the error is logged once with its kind,
// and Err returns every such error; nothing panics.
func TestLimitsInvalid(t *testing.T) {
	noLeaks(t)
	var logs bytes.Buffer
	l := newLimits(t, slog.New(slog.NewTextHandler(&logs, nil)))
	next := &counting{}
	ok := l.PerIP("api", 5, time.Minute)
	for _, mw := range []func(http.Handler) http.Handler{
		l.PerIP("", 0, time.Minute),          // no budget
		l.PerIP("", 5, 0),                    // no window
		l.PerCaller("", -1, time.Hour),       // negative
		l.PerIP("api", 5, time.Minute),       // name taken
		l.PerIP("not a token", 5, time.Hour), // not a token
	} {
		w := get(mw(next), "192.0.2.1", "alice")
		if w.Code != 500 || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("invalid limiter answered %d %q, want a 500 problem", w.Code, w.Header().Get("Content-Type"))
		}
	}
	if next.runs.Load() != 0 {
		t.Fatalf("the handler ran behind an invalid limiter")
	}
	err := l.Err()
	if !errors.Is(err, limiter.ErrInvalidBudget) || !errors.Is(err, store.ErrDuplicatePrefix) || strings.Count(err.Error(), "\n") != 4 {
		t.Fatalf("Err: %v, want five errors, budget and name", err)
	}
	if n := strings.Count(logs.String(), "kind="+gatecount.KindInvalidLimit); n != 5 {
		t.Fatalf("%d error logs, want 5:\n%s", n, logs.String())
	}
	if w := get(ok(next), "192.0.2.1", ""); w.Code != 200 {
		t.Fatalf("the valid limiter answered %d", w.Code)
	}
}

// LimitByIP on bad input neither panics nor lets requests through; its
// error is InMemory().Err()'s.
func TestLimitByIPInvalid(t *testing.T) {
	next := &counting{}
	if w := get(gatecount.LimitByIP(0, time.Minute)(next), "192.0.2.1", ""); w.Code != 500 || next.runs.Load() != 0 {
		t.Fatalf("LimitByIP(0, 1m): %d, handler ran %d times", w.Code, next.runs.Load())
	}
	if err := gatecount.InMemory().Err(); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Fatalf("InMemory().Err(): %v", err)
	}
}

// down is a backend that cannot be reached.
type down struct{ store.Backend }

func (down) Update(context.Context, string, []string, store.ApplyFunc) error {
	return errors.New("connection refused")
}

// Each kind of route limiter has its own policy when the store is down:
// per address through, per caller counted in memory, by key refused 503.
func TestKindPolicies(t *testing.T) {
	noLeaks(t)
	quiet := slog.New(slog.DiscardHandler)
	o := store.Options{Logger: quiet}.WithDefaults()
	s := store.New(down{memory.NewBackend(memory.Options{Store: o})}, o)
	defer s.Close()
	l := gatecount.New(s, gatecount.Options{Logger: quiet})
	defer l.Close()
	byHeader := keyfunc.Header("X-Key")
	for _, tc := range []struct {
		name  string
		mw    func(http.Handler) http.Handler
		codes []int
	}{
		{"PerIP", l.PerIP("", 2, time.Minute), []int{200, 200, 200}},
		{"PerCaller", l.PerCaller("", 2, time.Minute), []int{200, 200, 429}},
		{"By", l.By("", 2, time.Minute, byHeader), []int{503, 503, 503}},
	} {
		h := tc.mw(&counting{})
		for i, want := range tc.codes {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1"
			r.Header.Set("X-Key", "k")
			r = r.WithContext(keyfunc.WithCallerID(r.Context(), "alice"))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != want {
				t.Errorf("%s, request %d with the store down: %d, want %d", tc.name, i+1, w.Code, want)
			}
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}

// By counts each key of its key function; a request without one is
// answered 400, and By without a key function is an error.
func TestBy(t *testing.T) {
	noLeaks(t)
	l := newLimits(t, slog.New(slog.DiscardHandler))
	h := l.By("export", 1, time.Hour, keyfunc.Header("X-API-Key"))(&counting{})
	for i, c := range []struct {
		key  string
		want int
	}{{"k1", 200}, {"k1", 429}, {"k2", 200}, {"", 400}} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.key != "" {
			r.Header.Set("X-API-Key", c.key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want || (c.want == 200 && w.Header().Get("RateLimit-Policy") != `"export";q=1;w=3600`) {
			t.Errorf("request %d with key %q: %d %q, want %d", i+1, c.key, w.Code, w.Header().Get("RateLimit-Policy"), c.want)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if w := get(l.By("", 1, time.Hour, nil)(&counting{}), "192.0.2.1", ""); w.Code != 500 || l.Err() == nil {
		t.Errorf("By without a key function: %d, Err %v", w.Code, l.Err())
	}
}

// CountedBy counts a route's budget by another algorithm: a token bucket
// of burst 3 admits 3 at once where a fixed window of 1 admits 1.
func TestCountedBy(t *testing.T) {
	noLeaks(t)
	l := newLimits(t, slog.New(slog.DiscardHandler))
	h := l.PerIP("bucket", 1, time.Minute, gatecount.CountedBy(limiter.TokenBucket, 3))(&counting{})
	for i, want := range []int{200, 200, 200, 429} {
		if w := get(h, "192.0.2.1", ""); w.Code != want {
			t.Errorf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}

package middleware_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// signInDefaults are the sign-in guard's defaults, as WithDefaults gives them.
var signInDefaults = middleware.SignInOptions{}.WithDefaults()

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func handle(t testing.TB, s *store.Store, prefix string) *store.Handle {
	t.Helper()
	h, err := s.Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// perCaller builds with New what gatecount's Limits.PerCaller builds: keyed
// by caller ID, 401 without one, counted locally when the store is down.
func perCaller(h *store.Handle, b limiter.Budget, o middleware.Options) (*middleware.Middleware, error) {
	o.Name = cmp.Or(o.Name, "caller")
	o.KeyErrorStatus = cmp.Or(o.KeyErrorStatus, http.StatusUnauthorized)
	if o.Key == nil {
		o.Key = keyfunc.CallerID
	}
	o.Unavailable = o.Unavailable.Or(limiter.Local)
	return middleware.New(h, b, o)
}

// perIP builds with New what gatecount's Limits.PerIP builds: keyed by
// client address, through uncounted when the store is down.
func perIP(h *store.Handle, b limiter.Budget, o middleware.Options) (*middleware.Middleware, error) {
	o.Name = cmp.Or(o.Name, "ip")
	o.Unavailable = o.Unavailable.Or(limiter.Allow)
	return middleware.New(h, b, o)
}

func memStore(t testing.TB, clk *clock.Fake) *store.Store {
	t.Helper()
	o := memory.Options{Store: store.Options{Logger: quiet}}
	if clk != nil {
		o.Now = clk.Now
	}
	s := memory.New(o)
	t.Cleanup(func() { s.Close() })
	return s
}

// counting is a handler that counts its runs: a rejected request's side
// effect must never happen.
type counting struct {
	runs   atomic.Int64
	status int
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.runs.Add(1)
	if c.status != 0 {
		w.WriteHeader(c.status)
	}
	io.WriteString(w, "done")
}

func asCaller(id string) *http.Request {
	r := httptest.NewRequest("POST", "/execute", nil)
	return r.WithContext(keyfunc.WithCallerID(r.Context(), id))
}

func TestPerCallerLimits(t *testing.T) {
	clk := clock.NewFake(t0)
	s := memStore(t, clk)
	m, err := perCaller(handle(t, s, "execute:"), limiter.Budget{Limit: 3, Window: time.Minute}, middleware.Options{Name: "execute", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	next := &counting{}
	h := m.Wrap(next)
	for i := range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, asCaller("alice"))
		if w.Code != 200 {
			t.Fatalf("attempt %d: %d", i+1, w.Code)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"execute";q=3;w=60`; got != want {
			t.Errorf("RateLimit-Policy %q, want %q", got, want)
		}
		if got, want := w.Header().Get("RateLimit"), `"execute";r=`+strconv.Itoa(2-i)+`;t=60`; got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Error("Retry-After on an allowed response")
		}
	}
	clk.Advance(20*time.Second + 300*time.Millisecond)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, asCaller("alice"))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("over budget: %d", w.Code)
	}
	// 39.7 s left: t and Retry-After round up to 40.
	if got := w.Header().Get("Retry-After"); got != "40" {
		t.Errorf("Retry-After %q, want 40", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"execute";r=0;t=40` {
		t.Errorf("RateLimit %q", got)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 429 || p.Title == "" {
		t.Errorf("problem body %q: %v", w.Body, err)
	}
	if next.runs.Load() != 3 {
		t.Errorf("handler ran %d times, want 3", next.runs.Load())
	}
	// One limited caller does not limit another.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, asCaller("bob"))
	if w.Code != 200 {
		t.Errorf("bob: %d", w.Code)
	}
	// The last millisecond of the window still asks for a whole second.
	clk.Set(t0.Add(time.Minute - time.Millisecond))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, asCaller("alice"))
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("last millisecond: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestPerCallerWithoutCallerID(t *testing.T) {
	s := memStore(t, nil)
	m, _ := perCaller(handle(t, s, "execute:"), limiter.Budget{Limit: 3, Window: time.Minute}, middleware.Options{Logger: quiet})
	defer m.Close()
	next := &counting{}
	w := httptest.NewRecorder()
	m.Wrap(next).ServeHTTP(w, httptest.NewRequest("POST", "/execute", nil))
	if w.Code != http.StatusUnauthorized || next.runs.Load() != 0 {
		t.Fatalf("no caller ID: %d, handler ran %d", w.Code, next.runs.Load())
	}
}

func TestPerIPAndSkip(t *testing.T) {
	s := memStore(t, nil)
	m, err := perIP(handle(t, s, "health:"), limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{
		Logger: quiet,
		Skip:   func(r *http.Request) bool { return r.Header.Get("User-Agent") == "platform-checker" },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Wrap(&counting{})
	get := func(remote, ua string) int {
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = remote
		r.Header.Set("User-Agent", ua)
		r.Header.Set("X-Forwarded-For", "203.0.113.9") // untrusted: ignored
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if c := get("192.0.2.1:1000", ""); c != 200 {
		t.Fatal(c)
	}
	if c := get("192.0.2.1:2000", ""); c != 429 {
		t.Fatalf("same address, other port: %d", c)
	}
	if c := get("192.0.2.2:1000", ""); c != 200 {
		t.Fatalf("other address: %d", c)
	}
	for range 3 {
		if c := get("192.0.2.1:1000", "platform-checker"); c != 200 {
			t.Fatalf("skipped request limited: %d", c)
		}
	}
	if c := get("not an address", ""); c != 400 {
		t.Fatalf("unparsable peer: %d", c)
	}
}

func TestOneHandlePerMiddleware(t *testing.T) {
	s := memStore(t, nil)
	h := handle(t, s, "shared:")
	b := limiter.Budget{Limit: 1, Window: time.Minute}
	m, err := perCaller(h, b, middleware.Options{Name: "execute"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := perIP(h, b, middleware.Options{Name: "health"}); !errors.Is(err, store.ErrStoreReuse) {
		t.Fatalf("second middleware on one handle: %v", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	s := memStore(t, nil)
	b := limiter.Budget{Limit: 1, Window: time.Minute}
	for name, o := range map[string]middleware.Options{
		"bad name":   {Name: `a"b`},
		"bad status": {KeyErrorStatus: 200},
		"bad policy": {Unavailable: 42},
		"bad ipv6":   {IP: keyfunc.IPOptions{IPv6Prefix: 7}},
	} {
		if _, err := perIP(handle(t, s, name), b, o); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if _, err := perIP(handle(t, s, "zero"), limiter.Budget{}, middleware.Options{}); !errors.Is(err, limiter.ErrInvalidBudget) {
		t.Errorf("zero budget: %v", err)
	}
}

// New without a key function counts each client address.
func TestNewByClientAddress(t *testing.T) {
	m, err := middleware.New(handle(t, memStore(t, nil), "ip:"), limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Wrap(&counting{})
	for i, c := range []struct {
		addr string
		want int
	}{{"198.51.100.7:1", 200}, {"198.51.100.7:2", 429}, {"198.51.100.8:1", 200}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("request %d from %s: %d, want %d", i, c.addr, w.Code, c.want)
		}
	}
}

func TestLegacyAndHiddenRemaining(t *testing.T) {
	s := memStore(t, nil)
	m, _ := perCaller(handle(t, s, "x:"), limiter.Budget{Limit: 5, Window: time.Hour}, middleware.Options{Name: "signin", Logger: quiet, LegacyHeaders: true, Remaining: middleware.RemainingHidden})
	defer m.Close()
	w := httptest.NewRecorder()
	m.Wrap(&counting{}).ServeHTTP(w, asCaller("a"))
	hd := w.Header()
	if hd.Get("RateLimit") != `"signin";t=3600` || hd.Get("X-RateLimit-Limit") != "5" || hd.Get("X-RateLimit-Reset") != "3600" {
		t.Errorf("headers %v", hd)
	}
	if _, ok := hd["X-Ratelimit-Remaining"]; ok {
		t.Error("remaining shown though hidden")
	}
	m2, _ := perCaller(handle(t, s, "y:"), limiter.Budget{Limit: 5, Window: time.Hour}, middleware.Options{Logger: quiet, LegacyHeaders: true})
	defer m2.Close()
	w = httptest.NewRecorder()
	m2.Wrap(&counting{}).ServeHTTP(w, asCaller("a"))
	if w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("headers %v", w.Header())
	}
}

// down is a backend that cannot be reached.
type down struct{ store.Backend }

func (down) Update(context.Context, string, []string, store.ApplyFunc) error {
	return errors.New("connection refused")
}

func TestStoreUnavailable(t *testing.T) {
	for _, tc := range []struct {
		policy limiter.Policy
		want   int
		runs   int64
	}{
		{limiter.Deny, 503, 0},
		{limiter.Allow, 200, 3},
		{limiter.Local, 200, 2}, // counted in memory: the third is over
	} {
		o := store.Options{Logger: quiet}.WithDefaults()
		s := store.New(down{memory.NewBackend(memory.Options{Store: o})}, o)
		defer s.Close()
		m, err := perCaller(handle(t, s, "x:"), limiter.Budget{Limit: 2, Window: time.Minute}, middleware.Options{Unavailable: tc.policy, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		next := &counting{}
		var last *httptest.ResponseRecorder
		for range 3 {
			last = httptest.NewRecorder()
			m.Wrap(next).ServeHTTP(last, asCaller("a"))
		}
		if tc.policy == limiter.Deny && (last.Code != 503 || last.Header().Get("Retry-After") != "5") {
			t.Errorf("deny: %d, Retry-After %q", last.Code, last.Header().Get("Retry-After"))
		}
		if tc.policy == limiter.Local && last.Code != 429 {
			t.Errorf("local: third request %d", last.Code)
		}
		if next.runs.Load() != tc.runs {
			t.Errorf("policy %d: handler ran %d times, want %d", tc.policy, next.runs.Load(), tc.runs)
		}
	}
}

func TestCountFailures(t *testing.T) {
	s := memStore(t, nil)
	m, _ := middleware.New(handle(t, s, "signin:"), limiter.Budget{Limit: 5, Window: time.Minute}, middleware.Options{
		Key: keyfunc.Header("X-Account"), Logger: quiet, CountFailures: true,
	})
	defer m.Close()
	var checks atomic.Int64
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks.Add(1)
		switch r.Header.Get("X-Outcome") {
		case "ok":
			w.WriteHeader(200)
		case "said-ok":
			middleware.ReportSuccess(r)
			w.WriteHeader(401)
		case "said-fail":
			middleware.ReportFailure(r)
			w.WriteHeader(200)
		default:
			w.WriteHeader(401)
		}
	}))
	send := func(account, outcome string) int {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-Account", account)
		r.Header.Set("X-Outcome", outcome)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 50 {
		if c := send("a", "ok"); c != 200 {
			t.Fatalf("success %d throttled: %d", i, c)
		}
		if c := send("a", "said-ok"); c != 401 {
			t.Fatalf("reported success %d: %d", i, c)
		}
	}
	// Concurrent failures: exactly the budget reaches the handler.
	checks.Store(0)
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() { defer wg.Done(); send("b", "fail") }()
	}
	wg.Wait()
	if checks.Load() != 5 {
		t.Fatalf("%d concurrent failures reached the handler, want 5", checks.Load())
	}
	// A reported failure is counted whatever the status.
	for range 5 {
		send("c", "said-fail")
	}
	if c := send("c", "ok"); c != 429 {
		t.Fatalf("after 5 reported failures: %d", c)
	}
}

func TestReportOutsideMiddleware(t *testing.T) {
	if middleware.ReportSuccess(httptest.NewRequest("GET", "/", nil)) {
		t.Error("ReportSuccess claims a middleware")
	}
}

// The wrapper of CountFailures keeps the writer's optional interfaces.
func TestWriterInterfaces(t *testing.T) {
	s := memStore(t, nil)
	m, _ := middleware.New(handle(t, s, "w:"), limiter.Budget{Limit: 100, Window: time.Minute}, middleware.Options{
		Key: func(*http.Request) (string, error) { return "k", nil }, Logger: quiet, CountFailures: true,
	})
	defer m.Close()
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flush":
			io.WriteString(w, "a")
			if _, ok := w.(http.Flusher); !ok {
				t.Error("no Flusher")
			}
			w.(http.Flusher).Flush()
		case "/controller":
			if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("ResponseController: %v", err)
			}
			io.WriteString(w, "b")
		case "/readfrom":
			rf, ok := w.(io.ReaderFrom)
			if !ok {
				t.Error("no ReaderFrom")
				return
			}
			rf.ReadFrom(strings.NewReader("c"))
		case "/hijack":
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nd")
			buf.Flush()
			conn.Close()
		}
	})))
	defer srv.Close()
	for path, want := range map[string]string{"/flush": "a", "/controller": "b", "/readfrom": "c", "/hijack": "d"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != want {
			t.Errorf("%s: body %q, want %q", path, body, want)
		}
	}
}

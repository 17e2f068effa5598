package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// outcomes tallies the decisions an Observer hears of.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) ObserveDecision(_ string, out limiter.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[out.String()]++
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.n)
}

// settings are what every form of limiter is built with in these tests.
type settings struct {
	shadow bool
	skip   func(*http.Request) bool
	nets   keyfunc.Networks
	obs    limiter.Observer
}

// recorder is a handler that counts its runs, those that could read the
// account a guard counted, and answers status.
type recorder struct {
	status        int
	runs, account atomic.Int64
}

func (h *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	if _, ok := middleware.Account(r); ok {
		h.account.Add(1)
	}
	w.WriteHeader(h.status)
}

// A limiterForm is one way to build a limiter, each with a budget of 3 for one
// client: per key for the middleware, per account from one address and per
// address for the sign-in guard, per destination and per address for the
// send guard.
type limiterForm struct {
	name   string
	status int // the handler's answer: a failure for the sign-in guard
	build  func(t *testing.T, s settings) func(http.Handler) http.Handler
	// req is the i-th request from addr; with distinct, each names an
	// account or destination of its own.
	req func(i int, addr string, distinct bool) *http.Request
}

var budget3 = limiter.Budget{Limit: 3, Window: time.Minute}

func formRequest(path, field, value, addr string) *http.Request {
	r := httptest.NewRequest("POST", path, strings.NewReader(url.Values{field: {value}, "password": {"wrong"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = addr + ":4000"
	return r
}

var forms = []limiterForm{
	{name: "per-caller", status: 200,
		build: func(t *testing.T, s settings) func(http.Handler) http.Handler {
			m, err := perCaller(handle(t, memStore(t, nil), "c:"), budget3, middleware.Options{Logger: quiet, Observer: s.obs, Shadow: s.shadow, Skip: s.skip, Networks: s.nets})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			return m.Wrap
		},
		req: func(_ int, addr string, _ bool) *http.Request {
			r := asCaller("alice")
			r.RemoteAddr = addr + ":4000"
			return r
		}},
	{name: "per-ip", status: 200,
		build: func(t *testing.T, s settings) func(http.Handler) http.Handler {
			m, err := perIP(handle(t, memStore(t, nil), "ip:"), budget3, middleware.Options{Logger: quiet, Observer: s.obs, Shadow: s.shadow, Skip: s.skip, Networks: s.nets})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			return m.Wrap
		},
		req: func(_ int, addr string, _ bool) *http.Request {
			r := httptest.NewRequest("GET", "/health", nil)
			r.RemoteAddr = addr + ":4000"
			return r
		}},
	{name: "sign-in", status: 401,
		build: func(t *testing.T, s settings) func(http.Handler) http.Handler {
			g, err := middleware.SignIn(handle(t, memStore(t, nil), "login:"), middleware.SignInOptions{
				AccountIPFailures: budget3, IPAttempts: budget3, Device: middleware.DeviceOptions{Off: true},
				Logger: quiet, Observer: s.obs, Shadow: s.shadow, Skip: s.skip, Networks: s.nets})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			return g.Wrap
		},
		req: func(i int, addr string, distinct bool) *http.Request {
			user := "alice"
			if distinct {
				user = fmt.Sprintf("user%d", i)
			}
			return formRequest("/login", "username", user, addr)
		}},
	{name: "send", status: 202,
		build: func(t *testing.T, s settings) func(http.Handler) http.Handler {
			g, err := middleware.Send(handle(t, memStore(t, nil), "reset:"), middleware.SendOptions{
				PerDestination: budget3, PerIP: budget3,
				Logger: quiet, Observer: s.obs, Shadow: s.shadow, Skip: s.skip, Networks: s.nets})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			return g.Wrap
		},
		req: func(i int, addr string, distinct bool) *http.Request {
			dest := "alice@example.com"
			if distinct {
				dest = fmt.Sprintf("user%d@example.com", i)
			}
			return formRequest("/password-reset", "email", dest, addr)
		}},
}

// In shadow every form counts as it would, reports each would-be refusal
// as shadow_denied, lets every request reach the handler, and adds no
// rate-limit field to any answer.
func TestShadowEveryForm(t *testing.T) {
	for _, f := range forms {
		for _, shadow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shadow=%v", f.name, shadow), func(t *testing.T) {
				obs := &outcomes{}
				h := &recorder{status: f.status}
				wrapped := f.build(t, settings{shadow: shadow, obs: obs})(h)
				fields := 0
				for i := range 5 {
					w := httptest.NewRecorder()
					wrapped.ServeHTTP(w, f.req(i, "192.0.2.1", false))
					for _, name := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
						if w.Header().Get(name) != "" {
							fields++
						}
					}
					if shadow && w.Code != f.status {
						t.Errorf("request %d answered %d in shadow, want the handler's %d", i+1, w.Code, f.status)
					}
				}
				wantRuns, refused := 3, "denied"
				if shadow {
					wantRuns, refused = 5, "shadow_denied"
				}
				if n := h.runs.Load(); n != int64(wantRuns) {
					t.Errorf("handler ran %d times, want %d", n, wantRuns)
				}
				if obs.n["allowed"] != 3 || obs.n[refused] != 2 || len(obs.n) != 2 {
					t.Errorf("outcomes %v, want 3 allowed and 2 %s", obs, refused)
				}
				if shadow && fields != 0 {
					t.Errorf("%d rate-limit fields in shadow answers, want none", fields)
				}
				if !shadow && f.name != "send" && fields == 0 {
					t.Error("no rate-limit fields while enforcing") // the send guard hides them
				}
			})
		}
	}
}

// Skip lets requests through every form uncounted; the guards still hand
// the handler the account they read.
func TestSkipEveryForm(t *testing.T) {
	skip := func(r *http.Request) bool { return r.Header.Get("X-Skip") != "" }
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			obs := &outcomes{}
			h := &recorder{status: f.status}
			wrapped := f.build(t, settings{skip: skip, obs: obs})(h)
			for i := range 5 {
				r := f.req(i, "192.0.2.1", false)
				r.Header.Set("X-Skip", "1")
				wrapped.ServeHTTP(httptest.NewRecorder(), r)
			}
			if h.runs.Load() != 5 || len(obs.n) != 0 {
				t.Errorf("skipped: %d runs, outcomes %v; want 5 runs and no decision", h.runs.Load(), obs)
			}
			if guard := f.name == "sign-in" || f.name == "send"; guard && h.account.Load() != 5 {
				t.Errorf("the handler read the account in %d of 5 skipped requests", h.account.Load())
			}
			for i := range 5 { // the budget is whole
				wrapped.ServeHTTP(httptest.NewRecorder(), f.req(i, "192.0.2.1", false))
			}
			if h.runs.Load() != 8 {
				t.Errorf("%d runs after 5 counted requests, want 3 more", h.runs.Load()-5)
			}
		})
	}
}

// A blocked network is answered 403 by every form with nothing counted; an
// exempt one skips the address budgets (the per-IP middleware, the guards'
// NAME-ip), never a caller's, an account's or a destination's.
func TestNetworksEveryForm(t *testing.T) {
	nets := keyfunc.Networks{
		Exempt: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		Block:  []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")},
	}
	// Runs of the handler for 5 requests from an exempt address, and from
	// one that is not, with distinct accounts and with one.
	want := map[string]struct{ exemptDistinct, exemptSame, plainDistinct int }{
		"per-caller": {3, 3, 3},
		"per-ip":     {5, 5, 3},
		"sign-in":    {5, 3, 3},
		"send":       {5, 3, 3},
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			runs := func(addr string, distinct bool) (int64, *outcomes) {
				obs := &outcomes{}
				h := &recorder{status: f.status}
				wrapped := f.build(t, settings{nets: nets, obs: obs})(h)
				for i := range 5 {
					w := httptest.NewRecorder()
					wrapped.ServeHTTP(w, f.req(i, addr, distinct))
					if nets.Blocked(netip.MustParseAddr(addr)) && w.Code != http.StatusForbidden {
						t.Errorf("blocked %s answered %d, want 403", addr, w.Code)
					}
				}
				return h.runs.Load(), obs
			}
			for _, addr := range []string{"192.0.2.9", "2001:db8::1"} {
				if n, obs := runs(addr, false); n != 0 || len(obs.n) != 0 {
					t.Errorf("blocked %s: %d runs, outcomes %v", addr, n, obs)
				}
			}
			w := want[f.name]
			if n, _ := runs("198.51.100.7", true); n != int64(w.exemptDistinct) {
				t.Errorf("exempt, distinct accounts: %d runs, want %d", n, w.exemptDistinct)
			}
			if n, _ := runs("198.51.100.7", false); n != int64(w.exemptSame) {
				t.Errorf("exempt, one account: %d runs, want %d", n, w.exemptSame)
			}
			if n, _ := runs("203.0.113.5", true); n != int64(w.plainDistinct) {
				t.Errorf("not exempt, distinct accounts: %d runs, want %d", n, w.plainDistinct)
			}
		})
	}
}

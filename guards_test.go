package gatecount_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

const envSecret = "a secret of at least thirty-two bytes, for tests"

// fromEnv returns the Limits FromEnv builds from vars, closed at cleanup.
func fromEnv(t *testing.T, vars map[string]string, opts ...gatecount.Option) *gatecount.Limits {
	t.Helper()
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	opts = append([]gatecount.Option{gatecount.WithLookup(lookup), gatecount.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := gatecount.FromEnv(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// signIn is a sign-in handler: alice's password is right, every other
// guess wrong.
var signIn = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	account, _ := middleware.Account(r)
	if account == "alice" && r.PostFormValue("password") == "right" {
		middleware.ReportSuccess(r)
		return
	}
	middleware.ReportFailure(r)
	w.WriteHeader(http.StatusUnauthorized)
})

func postForm(h http.Handler, ip string, form url.Values, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = ip + ":1234"
	for _, c := range cookies {
		r.AddCookie(c)
	}
	h.ServeHTTP(w, r)
	return w
}

// Limits.SignIn and Limits.Send of a Limits from the environment count
// against the budgets of RATE_LIMIT_LOGIN_* and RATE_LIMIT_RESET_*.
func TestFromEnvGuardBudgets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		send     bool // the send guard, else the sign-in guard
		requests int
		want     int // requests let through to the handler
	}{
		{"sign-in attempts per address, default", nil, false, 8, 5}, // 5 failures per account and address
		{"sign-in failures per account and address", map[string]string{"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES": "2"}, false, 8, 2},
		{"sign-in failures per account", map[string]string{"RATE_LIMIT_LOGIN_ACCOUNT_FAILURES": "3"}, false, 8, 3},
		{"sign-in attempts per address", map[string]string{"RATE_LIMIT_LOGIN_IP_ATTEMPTS": "1"}, false, 8, 1},
		{"sign-in consecutive failures", map[string]string{"RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES": "2"}, false, 8, 2},
		{"sign-in delays", map[string]string{"RATE_LIMIT_LOGIN_DELAY_AFTER": "3"}, false, 8, 3}, // the 4th waits 30 s
		{"sends per destination, default", nil, true, 8, 3},
		{"sends per destination", map[string]string{"RATE_LIMIT_RESET_PER_DESTINATION": "1"}, true, 8, 1},
		{"sends per address", map[string]string{"RATE_LIMIT_RESET_PER_DESTINATION": "5", "RATE_LIMIT_RESET_PER_IP": "4"}, true, 8, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"RATE_LIMIT_SINGLE_INSTANCE": "true"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			l := fromEnv(t, vars)
			var mw func(http.Handler) http.Handler
			form := url.Values{"username": {"alice"}, "password": {"wrong"}, "email": {"alice@example.com"}}
			if tc.send {
				mw = l.Send(middleware.SendOptions{})
			} else {
				mw = l.SignIn(middleware.SignInOptions{})
			}
			if err := l.Err(); err != nil {
				t.Fatal(err)
			}
			h, reached := reaching(mw)
			for range tc.requests {
				postForm(h, "192.0.2.1", form)
			}
			if reached.Load() != int64(tc.want) {
				t.Errorf("%d of %d requests reached the handler, want %d", reached.Load(), tc.requests, tc.want)
			}
		})
	}
}

// The sign-in guards of two instances sign device cookies with one
// GATECOUNT_SECRET: a cookie from one keeps its owner out of a lock-out on
// the other. Under another secret it is not accepted.
func TestFromEnvDeviceSecret(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string // the second instance's
		want   int
	}{
		{"same secret", envSecret, http.StatusOK},
		{"another secret", strings.Repeat("x", 32), http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := func(secret string) map[string]string {
				return map[string]string{"RATE_LIMIT_SINGLE_INSTANCE": "true", "GATECOUNT_SECRET": secret, "RATE_LIMIT_LOGIN_ACCOUNT_FAILURES": "1"}
			}
			a := fromEnv(t, vars(envSecret)).SignIn(middleware.SignInOptions{})(signIn)
			b := fromEnv(t, vars(tc.secret)).SignIn(middleware.SignInOptions{})(signIn)
			res := postForm(a, "192.0.2.1", url.Values{"username": {"alice"}, "password": {"right"}})
			cookies := res.Result().Cookies()
			if res.Code != http.StatusOK || len(cookies) != 1 {
				t.Fatalf("alice's sign-in on the first instance: %d, cookies %v", res.Code, cookies)
			}
			// A stranger spends alice's account budget on the second.
			postForm(b, "198.51.100.9", url.Values{"username": {"alice"}, "password": {"guess"}})
			if res := postForm(b, "203.0.113.5", url.Values{"username": {"alice"}, "password": {"right"}}); res.Code != http.StatusTooManyRequests {
				t.Fatalf("alice without her cookie: %d, want 429", res.Code)
			}
			if res := postForm(b, "203.0.113.5", url.Values{"username": {"alice"}, "password": {"right"}}, cookies...); res.Code != tc.want {
				t.Errorf("alice with her cookie: %d, want %d", res.Code, tc.want)
			}
		})
	}
}

// observer records what it hears, as a metrics package does.
type observer struct {
	mu        sync.Mutex
	decisions map[string]int
	calls     int
}

func (o *observer) ObserveDecision(name string, _ limiter.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decisions[name]++
}

func (o *observer) ObserveCall(store.CallEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
}

// WithObserver hears of every limiter's decisions and of the store's
// calls; WithLogger receives the logs.
func TestFromEnvOptions(t *testing.T) {
	obs := &observer{decisions: map[string]int{}}
	var buf strings.Builder
	l := fromEnv(t, nil, gatecount.WithObserver(obs), gatecount.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	login := l.SignIn(middleware.SignInOptions{})(signIn)
	reset := l.Send(middleware.SendOptions{Name: "reset"})(signIn)
	api := l.PerIP("api", 10, time.Minute)(signIn)
	postForm(login, "192.0.2.1", url.Values{"username": {"alice"}, "password": {"right"}})
	postForm(reset, "192.0.2.1", url.Values{"email": {"alice@example.com"}})
	postForm(api, "192.0.2.1", nil)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, name := range []string{"login", "reset", "api"} {
		if obs.decisions[name] != 1 {
			t.Errorf("decisions of %s heard: %d, want 1 (all: %v)", name, obs.decisions[name], obs.decisions)
		}
	}
	if obs.calls == 0 {
		t.Error("no store call heard")
	}
	if !strings.Contains(buf.String(), "kind="+config.KindMemoryNotShared) {
		t.Errorf("the memory store's warning did not reach the logger:\n%s", buf.String())
	}
}

// A guard that cannot be built answers 500 and is reported by Err, as the
// short forms are.
func TestGuardNotBuilt(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name  string
		build func(l *gatecount.Limits) func(http.Handler) http.Handler
	}{
		{"a backoff shorter than its window", func(l *gatecount.Limits) func(http.Handler) http.Handler {
			return l.SignIn(middleware.SignInOptions{Backoff: middleware.Backoff{Max: time.Minute}})
		}},
		{"a name taken by a sign-in guard", func(l *gatecount.Limits) func(http.Handler) http.Handler {
			l.SignIn(middleware.SignInOptions{})
			return l.SignIn(middleware.SignInOptions{})
		}},
		{"a name taken by a limiter", func(l *gatecount.Limits) func(http.Handler) http.Handler {
			l.PerIP("reset", 10, time.Minute)
			return l.Send(middleware.SendOptions{Name: "reset"})
		}},
		{"a budget out of range", func(l *gatecount.Limits) func(http.Handler) http.Handler {
			return l.Send(middleware.SendOptions{PerIP: limiter.Budget{Limit: -1, Window: time.Hour}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			l := newLimits(t, slog.New(slog.NewTextHandler(&buf, nil)))
			c := &counting{}
			h := tc.build(l)(c)
			res := postForm(h, "192.0.2.1", url.Values{"username": {"alice"}, "email": {"a@example.com"}})
			if res.Code != http.StatusInternalServerError || c.runs.Load() != 0 {
				t.Errorf("answered %d, handler ran %d times; want 500 and never", res.Code, c.runs.Load())
			}
			if l.Err() == nil || !strings.Contains(buf.String(), "kind="+gatecount.KindInvalidLimit) {
				t.Errorf("Err %v; log:\n%s", l.Err(), buf.String())
			}
		})
	}
}

// A Limits built with New gives its guards the budgets of Options where
// their own options leave them zero.
func TestNewGuardBudgets(t *testing.T) {
	perHour := func(n int) limiter.Budget { return limiter.Budget{Limit: n, Window: time.Hour} }
	for _, tc := range []struct {
		name    string
		o       gatecount.Options
		options middleware.SignInOptions
		want    int // attempts let through, each a success
	}{
		{"middleware's defaults (100 an hour)", gatecount.Options{}, middleware.SignInOptions{}, 8},
		{"Options.SignIn", gatecount.Options{SignIn: config.SignInBudgets{IPAttempts: perHour(2)}}, middleware.SignInOptions{}, 2},
		{"the guard's own", gatecount.Options{SignIn: config.SignInBudgets{IPAttempts: perHour(2)}}, middleware.SignInOptions{IPAttempts: perHour(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memory.New(memory.Options{Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
			defer s.Close()
			tc.o.Logger = slog.New(slog.DiscardHandler)
			l := gatecount.New(s, tc.o)
			defer l.Close()
			c := &counting{}
			h := l.SignIn(tc.options)(c)
			for range 8 {
				postForm(h, "192.0.2.1", url.Values{"username": {"alice"}})
			}
			if got := c.runs.Load(); got != int64(tc.want) {
				t.Errorf("%d attempts reached the handler, want %d", got, tc.want)
			}
		})
	}
}

// Limits.SignIn counts failures per password as RATE_LIMIT_LOGIN_SPRAY and
// RATE_LIMIT_LOGIN_SPRAY_FIELD say: one password on 10 accounts from 10
// addresses reaches the handler the budget's times, or 10 when off.
func TestFromEnvSpray(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		field string
		want  int
	}{
		{"budget", map[string]string{"RATE_LIMIT_LOGIN_SPRAY": "3"}, "password", 3},
		{"off", map[string]string{"RATE_LIMIT_LOGIN_SPRAY": "off"}, "password", 10},
		{"field", map[string]string{"RATE_LIMIT_LOGIN_SPRAY": "4", "RATE_LIMIT_LOGIN_SPRAY_FIELD": "pw"}, "pw", 4},
		{"another field than the one read", map[string]string{"RATE_LIMIT_LOGIN_SPRAY": "4", "RATE_LIMIT_LOGIN_SPRAY_FIELD": "pw"}, "password", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"RATE_LIMIT_SINGLE_INSTANCE": "true"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			l := fromEnv(t, vars)
			mw := l.SignIn(middleware.SignInOptions{})
			if err := l.Err(); err != nil {
				t.Fatal(err)
			}
			h, reached := reaching(mw)
			for i := range 10 {
				postForm(h, fmt.Sprintf("192.0.2.%d", i+1), url.Values{"username": {fmt.Sprintf("user%d", i)}, tc.field: {"Summer2026!"}})
			}
			if reached.Load() != int64(tc.want) {
				t.Errorf("%d of 10 accounts reached the handler, want %d", reached.Load(), tc.want)
			}
		})
	}
}

// reaching returns signIn wrapped in mw, and the count of requests that
// reached signIn.
func reaching(mw func(http.Handler) http.Handler) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		signIn.ServeHTTP(w, r)
	})), &n
}

// Limits.SignIn with Code guards a one-time code on a handle of its own
// (verify:): five wrong codes for an account from one address spend its
// budget there, and the right one is then refused too. The sign-in
// budgets of the environment are the password's, not the code's.
func TestSignInCode(t *testing.T) {
	l := fromEnv(t, map[string]string{"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES": "8"})
	check := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("code") == "123456" {
			middleware.ReportSuccess(r)
			return
		}
		middleware.ReportFailure(r)
		w.WriteHeader(http.StatusUnauthorized)
	})
	h := l.SignIn(middleware.SignInOptions{Code: true})(check)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		code string
		want int
	}{{"1", 401}, {"2", 401}, {"3", 401}, {"4", 401}, {"5", 401}, {"123456", 429}} {
		if w := postForm(h, "192.0.2.1", url.Values{"username": {"alice"}, "code": {c.code}}); w.Code != c.want {
			t.Fatalf("attempt %d: %d, want %d", i+1, w.Code, c.want)
		}
	}
	if w := postForm(h, "192.0.2.2", url.Values{"username": {"alice"}, "code": {"123456"}}); w.Code != 200 {
		t.Errorf("the right code from another address: %d, want 200", w.Code)
	}
	if _, err := l.Store().Handle("verify:"); err == nil {
		t.Error("the guard's handle verify: was not claimed")
	}
}

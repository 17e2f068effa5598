package demotest

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/standin"
	"github.com/gatecount/gatecount/middleware"
)

// RoutesEnv is the environment CheckRoutes serves an example with: small
// route budgets, the memory store, and clients told apart by
// X-Forwarded-For from the loopback proxy.
var RoutesEnv = map[string]string{
	"RATE_LIMIT_EXECUTE_PER_MINUTE": "3",
	"RATE_LIMIT_HEALTH_PER_MINUTE":  "2",
	"RATE_LIMIT_SINGLE_INSTANCE":    "true",
	"TRUSTED_PROXIES":               "127.0.0.1/32,::1/128",
}

// CheckRoutes serves the app newApp builds with RoutesEnv, over loopback
// until the test ends. It checks the routes examples/chi and
// examples/gorilla share with examples/stdlib. Each limiter refuses past its
// budget, the sign-in guard counts failures only, and the send guard
// throttles silently.
func CheckRoutes(t *testing.T, newApp standin.NewApp) {
	logs := &Logs{}
	lookup := func(k string) (string, bool) { v, ok := RoutesEnv[k]; return v, ok }
	h, closeApp, err := newApp(t.Context(), lookup, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		if err := closeApp(); err != nil {
			t.Errorf("closing the app: %v", err)
		}
	})
	t.Run("per caller", func(t *testing.T) { checkPerCaller(t, srv.URL) })
	t.Run("per IP group", func(t *testing.T) { checkHealthGroup(t, srv.URL) })
	t.Run("sign-in", func(t *testing.T) { checkSignInRoute(t, srv.URL) })
	t.Run("password reset", func(t *testing.T) { checkResetRoute(t, srv.URL, logs) })
}

// checkPerCaller: a caller gets its budget of 3, then 429 with Retry-After,
// the RateLimit fields and a problem body; another caller is not limited by
// it; a missing or unknown token is answered 401.
func checkPerCaller(t *testing.T, base string) {
	for i := range 3 {
		res, body := Do(t, "POST", base+"/execute", "alice-token")
		if res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"execute";q=3;w=60` {
			t.Fatalf("alice's attempt %d: %d %q %s", i+1, res.StatusCode, res.Header.Get("RateLimit-Policy"), body)
		}
	}
	res, body := Do(t, "POST", base+"/execute", "alice-token")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("alice over budget: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Errorf("Retry-After %q", res.Header.Get("Retry-After"))
	}
	if r, tt, err := readRateLimit(res.Header.Get("RateLimit")); err != nil || r != 0 || tt > retry {
		t.Errorf("RateLimit %q with Retry-After %d", res.Header.Get("RateLimit"), retry)
	}
	if res, body := Do(t, "POST", base+"/execute", "bob-token"); res.StatusCode != 200 || !strings.Contains(body, "bob") {
		t.Errorf("bob limited by alice: %d %s", res.StatusCode, body)
	}
	for _, token := range []string{"wrong-token", ""} {
		if res, _ := Do(t, "POST", base+"/execute", token); res.StatusCode != 401 {
			t.Errorf("token %q: %d, want 401", token, res.StatusCode)
		}
	}
}

// checkHealthGroup: /health and /ready share one budget of 2 per client IP.
func checkHealthGroup(t *testing.T, base string) {
	for _, path := range []string{"/health", "/ready"} {
		if res, body := Do(t, "GET", base+path, ""); res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"health";q=2;w=60` {
			t.Fatalf("%s: %d %q %s", path, res.StatusCode, res.Header.Get("RateLimit-Policy"), body)
		}
	}
	for _, path := range []string{"/health", "/ready"} {
		if res, _ := Do(t, "GET", base+path, ""); res.StatusCode != 429 {
			t.Errorf("%s past the group's budget: %d, want 429", path, res.StatusCode)
		}
	}
}

// checkSignInRoute: 5 wrong passwords for an account from one address spend
// its budget there. Even the right one is then refused with 429, while the
// account still signs in from another address. A success clears the
// failures counted before it. An unknown account is answered as a wrong
// password.
func checkSignInRoute(t *testing.T, base string) {
	login := func(ip, user, password string) (*http.Response, string) {
		return Post(t, base+"/login", ip, url.Values{"username": {user}, "password": {password}})
	}
	_, wrong := login("192.0.2.1", "alice", "wrong")
	for i := range 4 {
		if res, body := login("192.0.2.1", "alice", "wrong"); res.StatusCode != 401 || body != wrong {
			t.Fatalf("wrong password %d: %d %s", i+2, res.StatusCode, body)
		}
	}
	if res, _ := login("192.0.2.1", "alice", "correct-horse"); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("right password after 5 failures from one address: %d %v, want 429", res.StatusCode, res.Header)
	}
	if res, body := login("192.0.2.2", "alice", "correct-horse"); res.StatusCode != 200 {
		t.Fatalf("right password from another address: %d %s", res.StatusCode, body)
	}
	// bob, as "Bob " (one account with "bob"): 4 failures, a success, then
	// 5 more failures before the budget refuses.
	for i, want := range []int{401, 401, 401, 401, 200, 401, 401, 401, 401, 401, 429} {
		password := "wrong"
		if want == 200 {
			password = "battery-staple"
		}
		if res, body := login("192.0.2.3", "Bob ", password); res.StatusCode != want {
			t.Fatalf("bob's attempt %d with %q: %d %s, want %d", i+1, password, res.StatusCode, body, want)
		}
	}
	if res, body := login("192.0.2.4", "mallory", "wrong"); res.StatusCode != 401 || body != wrong {
		t.Errorf("unknown account: %d %s, want the wrong password's %s", res.StatusCode, body, wrong)
	}
}

// checkResetRoute: a destination gets its budget of 3 mails, and past it
// the same answer with no mail sent, logged as throttled without naming the
// destination or the client.
func checkResetRoute(t *testing.T, base string, logs *Logs) {
	var first string
	for i := range 5 {
		res, body := Post(t, base+"/password-reset", "192.0.2."+strconv.Itoa(10+i), url.Values{"email": {"carol@example.com"}})
		if i == 0 {
			first = body
		}
		if res.StatusCode != 202 || body != first {
			t.Fatalf("reset %d: %d %s, want 202 %s", i+1, res.StatusCode, body, first)
		}
	}
	if sent := logs.Lines("password-reset-sent"); len(sent) != 3 {
		t.Fatalf("%d mails sent, want the budget of 3: %q", len(sent), sent)
	}
	throttled := logs.Lines(middleware.KindLimited)
	if len(throttled) != 2 || !strings.Contains(throttled[0], "limiter=reset") ||
		strings.Contains(throttled[0], "carol") || strings.Contains(throttled[0], "192.0.2") {
		t.Fatalf("throttled resets logged as %q", throttled)
	}
}

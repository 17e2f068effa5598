// Package demotest starts an example server for real, on a loopback port,
// and checks what every example must do: the whole demo for
// examples/stdlib, and the routes examples/chi and examples/gorilla share
// with it (CheckRoutes).
package demotest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demo"
)

// Routes is an example's router over the demo app.
type Routes func(*demo.App) http.Handler

// Server is a running example.
type Server struct {
	URL string
	App *demo.App
}

// Start runs an example's routes with env (ADDR defaults to a free loopback port)
// until the test ends.
func Start(t testing.TB, routes Routes, env map[string]string) *Server {
	t.Helper()
	return StartLogged(t, routes, env, slog.New(slog.DiscardHandler))
}

// StartLogged is Start with the server's logs going to log.
func StartLogged(t testing.TB, routes Routes, env map[string]string, log *slog.Logger) *Server {
	t.Helper()
	vars := map[string]string{"ADDR": "127.0.0.1:0", "RATE_LIMIT_SINGLE_INSTANCE": "true"}
	for k, v := range env {
		vars[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *Server, 1)
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(ctx, lookup, log, routes, func(app *demo.App, addr string) {
			started <- &Server{URL: "http://" + addr, App: app}
		})
	}()
	select {
	case s := <-started:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server: %v", err)
			}
		})
		return s
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
		return nil
	}
}

// Do sends a request and returns the response with its body read.
func Do(t testing.TB, method, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

// send sends req and returns the response with its body read.
func send(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

// CheckLimits checks, against a server started with
// RATE_LIMIT_EXECUTE_PER_MINUTE=3 and RATE_LIMIT_HEALTH_PER_MINUTE=2, that
// traffic under budget passes, one limited caller does not limit another,
// a 429 carries Retry-After and the RateLimit fields, and a rejected
// request's work is never done.
func CheckLimits(t *testing.T, s *Server) {
	t.Helper()
	for i := range 3 {
		res, body := Do(t, "POST", s.URL+"/execute", "alice-token")
		if res.StatusCode != 200 || !strings.Contains(body, `"executions":`+strconv.Itoa(i+1)) {
			t.Fatalf("alice's attempt %d: %d %s", i+1, res.StatusCode, body)
		}
		if res.Header.Get("RateLimit-Policy") != `"execute";q=3;w=60` {
			t.Errorf("RateLimit-Policy %q", res.Header.Get("RateLimit-Policy"))
		}
	}
	res, body := Do(t, "POST", s.URL+"/execute", "alice-token")
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("alice over budget: %d %s", res.StatusCode, body)
	}
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 {
		t.Errorf("Retry-After %q", res.Header.Get("Retry-After"))
	}
	if r, tt, err := readRateLimit(res.Header.Get("RateLimit")); err != nil || r != 0 || tt > retry {
		t.Errorf("RateLimit %q with Retry-After %d", res.Header.Get("RateLimit"), retry)
	}
	if res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("429 Content-Type %q", res.Header.Get("Content-Type"))
	}
	if n := s.App.Executions("alice"); n != 3 {
		t.Errorf("alice's work done %d times, want 3: a rejected request ran the handler", n)
	}
	if res, body := Do(t, "POST", s.URL+"/execute", "bob-token"); res.StatusCode != 200 {
		t.Errorf("bob limited by alice: %d %s", res.StatusCode, body)
	}
	if res, _ := Do(t, "POST", s.URL+"/execute", "wrong-token"); res.StatusCode != 401 {
		t.Errorf("unknown token: %d", res.StatusCode)
	}
	if res, _ := Do(t, "POST", s.URL+"/execute", ""); res.StatusCode != 401 {
		t.Errorf("no token: %d", res.StatusCode)
	}
	for i, path := range []string{"/health", "/ready"} {
		if res, body := Do(t, "GET", s.URL+path, ""); res.StatusCode != 200 {
			t.Errorf("%s (request %d): %d %s", path, i+1, res.StatusCode, body)
		}
	}
	if res, _ := Do(t, "GET", s.URL+"/health", ""); res.StatusCode != 429 {
		t.Errorf("third health check from one IP: %d", res.StatusCode)
	}
}

// readRateLimit reads the r and t of `"name";r=R;t=T`.
func readRateLimit(field string) (r, t int, err error) {
	_, params, ok := strings.Cut(field, ";")
	if !ok {
		return 0, 0, fmt.Errorf("RateLimit %q has no parameters", field)
	}
	for _, part := range strings.Split(params, ";") {
		k, v, _ := strings.Cut(part, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, 0, fmt.Errorf("RateLimit %q: %w", field, err)
		}
		switch k {
		case "r":
			r = n
		case "t":
			t = n
		}
	}
	return r, t, nil
}

// CheckExample runs every check on an example's routes, each on a server of
// its own.
func CheckExample(t *testing.T, routes Routes) {
	t.Run("limits", func(t *testing.T) {
		CheckLimits(t, Start(t, routes, map[string]string{
			"RATE_LIMIT_EXECUTE_PER_MINUTE": "3",
			"RATE_LIMIT_HEALTH_PER_MINUTE":  "2",
		}))
	})
	t.Run("sign-in", func(t *testing.T) {
		CheckSignIn(t, Start(t, routes, SignInEnv))
	})
	t.Run("device cookies", func(t *testing.T) {
		CheckDeviceCookies(t, Start(t, routes, AttackEnv))
	})
	t.Run("multipart", func(t *testing.T) {
		CheckMultipart(t, Start(t, routes, AttackEnv))
	})
	t.Run("one reading", func(t *testing.T) {
		CheckUnreadable(t, Start(t, routes, AttackEnv))
	})
	t.Run("retry-after", func(t *testing.T) {
		CheckRetryAfter(t, Start(t, routes, AttackEnv))
	})
	t.Run("forwarding", func(t *testing.T) {
		CheckForwarding(t, routes)
	})
	t.Run("reset logs", func(t *testing.T) {
		CheckResetLogs(t, routes)
	})
	t.Run("verify", func(t *testing.T) {
		CheckVerify(t, routes)
	})
	t.Run("debug vars", func(t *testing.T) {
		CheckDebugVars(t, routes)
	})
}

// CheckDebugVars checks that with DEBUG_ADDR set the example serves
// /debug/vars there, with the limiters' decisions and the store's stats,
// and never on its own address; without it, nowhere.
func CheckDebugVars(t *testing.T, routes Routes) {
	s := Start(t, routes, map[string]string{"DEBUG_ADDR": "127.0.0.1:0", "RATE_LIMIT_HEALTH_PER_MINUTE": "1"})
	Do(t, "GET", s.URL+"/health", "")
	Do(t, "GET", s.URL+"/health", "")
	res, body := Do(t, "GET", "http://"+s.App.DebugAddr+"/debug/vars", "")
	var vars struct {
		Gatecount struct {
			Decisions map[string]map[string]int
			Stores    map[string]map[string]any
		}
	}
	if err := json.Unmarshal([]byte(body), &vars); res.StatusCode != 200 || err != nil {
		t.Fatalf("GET /debug/vars on DEBUG_ADDR: %d %v\n%s", res.StatusCode, err, body)
	}
	if d := vars.Gatecount.Decisions["health"]; d["allowed"] < 1 || d["denied"] < 1 {
		t.Errorf("decisions of health: %v", vars.Gatecount.Decisions)
	}
	if _, ok := vars.Gatecount.Stores["limits"]["max_entries"]; !ok {
		t.Errorf("the store's stats are not published: %v", vars.Gatecount.Stores)
	}
	if res, _ := Do(t, "GET", s.URL+"/debug/vars", ""); res.StatusCode != 404 {
		t.Errorf("/debug/vars on the app's own address: %d, want 404", res.StatusCode)
	}
	plain := Start(t, routes, nil)
	if plain.App.DebugAddr != "" {
		t.Errorf("DebugAddr %q without DEBUG_ADDR", plain.App.DebugAddr)
	}
}

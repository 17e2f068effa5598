package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// gatecount.InMemory's store, behind LimitByIP, lives as long as the
// process, by design.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/gatecount/gatecount/store/memory.(*Backend).sweepEvery"),
		goleak.IgnoreTopFunction("github.com/gatecount/gatecount/internal/clock.(*Coarse).run"))
}

const secret = "an-example-secret-that-is-long-enough-0123456789"

func start(t *testing.T) http.Handler {
	t.Helper()
	h, closeApp, err := app(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeApp(); err != nil {
			t.Error(err)
		}
	})
	return h
}

func do(h http.Handler, method, path, ip, user string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = ip + ":4321"
	if user != "" {
		r.Header.Set("X-User", user)
	}
	h.ServeHTTP(w, r)
	return w
}

// expect sends n requests and checks each is answered code.
func expect(t *testing.T, h http.Handler, n int, code int, method, path, ip, user string) {
	t.Helper()
	for i := range n {
		if w := do(h, method, path, ip, user); w.Code != code {
			t.Fatalf("%s %s from %s as %q, request %d of %d: %d %s, want %d", method, path, ip, user, i+1, n, w.Code, w.Body, code)
		}
	}
}

// The one-line limiters: the chi group shares one budget per address over
// its routes, the gorilla route has its own, and each answers with the
// RateLimit fields and Retry-After.
func TestOneLineLimiters(t *testing.T) {
	t.Setenv("RATE_LIMIT_SINGLE_INSTANCE", "true")
	h := start(t)
	expect(t, h, 60, 200, "GET", "/status", "192.0.2.1", "")
	expect(t, h, 40, 200, "GET", "/version", "192.0.2.1", "")
	w := do(h, "GET", "/version", "192.0.2.1", "")
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || !strings.HasPrefix(w.Header().Get("RateLimit"), `"ip-100-per-1m`) {
		t.Fatalf("101st request of the chi group: %d %v", w.Code, w.Header())
	}
	expect(t, h, 1, 200, "GET", "/status", "192.0.2.2", "") // another address

	expect(t, h, 10, 200, "GET", "/legacy/report", "192.0.2.1", "")
	w = do(h, "GET", "/legacy/report", "192.0.2.1", "")
	if w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit-Policy"), ";q=10;w=60") {
		t.Fatalf("11th request of the gorilla route: %d %v", w.Code, w.Header())
	}
	expect(t, h, 1, 405, "POST", "/legacy/report", "192.0.2.1", "") // gorilla's own answer, before the limiter

	expect(t, h, 30, 200, "POST", "/api", "192.0.2.1", "alice")
	expect(t, h, 1, 429, "POST", "/api", "192.0.2.3", "alice") // per user, from any address
	expect(t, h, 1, 200, "POST", "/api", "192.0.2.1", "bob")
	expect(t, h, 1, 401, "POST", "/api", "192.0.2.1", "")
}

// The per-user route counts in the shared store the environment chooses:
// two instances of the app share one budget.
func TestPerUserOnASharedStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"sqlite", func(t *testing.T) map[string]string {
			return map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "counts.db")}
		}},
		{"postgres", func(t *testing.T) map[string]string {
			u := service(t, "GATECOUNT_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", "5432")
			migrate(t, u)
			return map[string]string{"DATABASE_URL": u}
		}},
		{"redis", func(t *testing.T) map[string]string {
			return map[string]string{"RATE_LIMIT_STORE_URL": service(t, "GATECOUNT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0", "6379")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GATECOUNT_SECRET", secret)
			for k, v := range tc.env(t) {
				t.Setenv(k, v)
			}
			a, b := start(t), start(t)
			user := "user-" + tc.name + "-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + randomSuffix(t)
			expect(t, a, 20, 200, "POST", "/api", "192.0.2.1", user)
			expect(t, b, 10, 200, "POST", "/api", "192.0.2.2", user)
			expect(t, a, 1, 429, "POST", "/api", "192.0.2.1", user)
			expect(t, b, 1, 429, "POST", "/api", "192.0.2.2", user)
		})
	}
}

// service returns the URL in env (def when unset) once its server answers,
// or ends the test: failing under CI=true, skipped elsewhere, as the
// gatecount module's own store tests do.
func service(t *testing.T, env, def, port string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		u = def
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	host := parsed.Host
	if parsed.Port() == "" {
		host = net.JoinHostPort(parsed.Hostname(), port)
	}
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (%s) is unreachable: %v", env, host, err)
		}
		t.Skipf("%s (%s) is unreachable, skipped outside CI: %v", env, host, err)
	}
	c.Close()
	return u
}

// migrate runs the migration as the README tells an app outside the
// repository to.
func migrate(t *testing.T, dbURL string) {
	t.Helper()
	cmd := exec.Command("go", "run", "github.com/gatecount/gatecount/cmd/gatecount", "migrate")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "u")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return filepath.Base(f.Name())
}

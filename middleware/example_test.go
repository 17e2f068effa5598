package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

func ExamplePerCaller() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("execute:")
	m, err := middleware.PerCaller(h, limiter.Budget{Limit: 1, Window: time.Minute}, middleware.Options{Name: "execute"})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	execute := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "done") }))

	for range 2 {
		r := httptest.NewRequest("POST", "/execute", nil)
		r = r.WithContext(keyfunc.WithCallerID(r.Context(), "alice")) // as authentication would
		w := httptest.NewRecorder()
		execute.ServeHTTP(w, r)
		fmt.Printf("%d %s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "execute";r=0;t=60 Retry-After=""
	// 429 "execute";r=0;t=60 Retry-After="60"
}

func ExamplePerIP() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("health:")
	proxies, _ := keyfunc.ParseTrustedProxies("10.0.0.0/8")
	m, _ := middleware.PerIP(h, limiter.Budget{Limit: 300, Window: time.Minute}, middleware.Options{
		Name: "health",
		IP:   keyfunc.IPOptions{TrustedProxies: proxies},
	})
	defer m.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /health", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "10.1.2.3:5000"                  // a trusted proxy
	r.Header.Set("X-Forwarded-For", "198.51.100.7") // so the client is this
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output: 200 "health";q=300;w=60
}

func ExampleSignIn() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("login:")
	g, err := middleware.SignIn(h, middleware.SignInOptions{Name: "login"})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	login := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := middleware.Account(r) // the account the guard counted
		fields, _ := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password")
		if name != "alice" || fields[0] != "correct-horse" {
			middleware.ReportFailure(r)
			http.Error(w, "invalid username or password", http.StatusUnauthorized)
			return
		}
		middleware.ReportSuccess(r)
		fmt.Fprintln(w, "signed in", name)
	}))

	for _, body := range []string{
		"username=+Alice&password=correct-horse",
		"username=alice&password=correct-horse&USERNAME=mallory", // unreadable: never reaches the handler
	} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		login.ServeHTTP(w, r)
		device := false
		for _, c := range w.Result().Cookies() {
			device = device || c.Name == middleware.DefaultDeviceCookie
		}
		fmt.Printf("%d %q device cookie: %v\n", w.Code, strings.TrimSpace(w.Body.String()), device)
	}
	// Output:
	// 200 "signed in alice" device cookie: true
	// 401 "{\"type\":\"about:blank\",\"title\":\"Unauthorized\",\"status\":401}" device cookie: false
}

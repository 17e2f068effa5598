package gatecount_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/keyfunc"
)

// The short form: each client address gets 100 requests a minute, counted
// in this process's memory.
func ExampleLimitByIP() {
	search := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "results") })
	mux := http.NewServeMux()
	mux.Handle("GET /search", gatecount.LimitByIP(100, time.Minute)(search))

	for i := 1; i <= 101; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/search", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		mux.ServeHTTP(w, r)
		if i >= 99 {
			fmt.Printf("%d: %d RateLimit: %s Retry-After: %q\n", i, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 99: 200 RateLimit: "ip-100-per-1m";r=1;t=60 Retry-After: ""
	// 100: 200 RateLimit: "ip-100-per-1m";r=0;t=60 Retry-After: ""
	// 101: 429 RateLimit: "ip-100-per-1m";r=0;t=60 Retry-After: "60"
}

// Limits from the environment: the store that RATE_LIMIT_STORE,
// DATABASE_URL or RATE_LIMIT_STORE_URL choose (here none is set, so memory),
// the secret, the bound and the trusted proxies. Real apps call
// gatecount.FromEnv(ctx), which reads os.LookupEnv.
func ExampleFromEnv() {
	env := map[string]string{"RATE_LIMIT_SINGLE_INSTANCE": "true", "TRUSTED_PROXIES": "10.0.0.0/8"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	limits, err := gatecount.FromEnv(context.Background(), gatecount.WithLookup(lookup), gatecount.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "done") })
	perUser := limits.PerCaller("api", 1, time.Hour) // keyed by keyfunc.WithCallerID
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}
	h := authenticate(perUser(api))

	for _, user := range []string{"alice", "alice", "bob", ""} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/api", nil)
		r.RemoteAddr = "10.0.0.2:1234" // the proxy
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		r.Header.Set("X-User", user)
		h.ServeHTTP(w, r)
		policy := w.Header().Get("RateLimit-Policy")
		if policy == "" {
			policy = "(no policy: answered before counting)"
		}
		fmt.Printf("%q: %d %s\n", user, w.Code, policy)
	}
	fmt.Println("client address:", clientOf(limits))
	// Output:
	// "alice": 200 "api";q=1;w=3600
	// "alice": 429 "api";q=1;w=3600
	// "bob": 200 "api";q=1;w=3600
	// "": 401 (no policy: answered before counting)
	// client address: 198.51.100.7
}

// authenticate stands for the app's authentication middleware: it names
// the caller with keyfunc.WithCallerID.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			r = r.WithContext(keyfunc.WithCallerID(r.Context(), u))
		}
		next.ServeHTTP(w, r)
	})
}

// clientOf shows whom a request through the proxy is counted as.
func clientOf(l *gatecount.Limits) string {
	k, err := keyfunc.NewIP(l.IP())
	if err != nil {
		return err.Error()
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:1234"
	r.Header.Set("X-Forwarded-For", "198.51.100.7")
	key, _ := k.Key(r)
	return key
}

// Skip sets requests apart from a one-line limiter: here a platform's
// health checker, which is never counted.
func ExampleSkip() {
	isChecker := func(r *http.Request) bool { return r.Header.Get("User-Agent") == "platform-checker" }
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	health := gatecount.LimitByIP(1, time.Hour, gatecount.Skip(isChecker))(ok)

	for _, ua := range []string{"platform-checker", "platform-checker", "browser", "browser"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("User-Agent", ua)
		health.ServeHTTP(w, r)
		fmt.Println(ua, w.Code)
	}
	// Output:
	// platform-checker 200
	// platform-checker 200
	// browser 200
	// browser 429
}

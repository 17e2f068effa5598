package gatecount_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

// send sends n requests to h from one client address and prints the
// status of each.
func send(h http.Handler, n int, method, target string, set func(*http.Request)) {
	for i := 1; i <= n; i++ {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if set != nil {
			set(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d: %d\n", i, w.Code)
	}
}

// submit sends a form to h from one client address and returns the
// status.
func submit(h http.Handler, form url.Values) int {
	r := httptest.NewRequest("POST", "/", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// New builds limiters on a store of the program's: here the memory store.
// The Limits closes its limiters; the program closes the store.
func ExampleNew() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{Logger: slog.New(slog.DiscardHandler)})
	defer limits.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	search := limits.PerIP("search", 2, time.Minute)(ok)
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	send(search, 3, "GET", "/search", nil)
	// Output:
	// 1: 200
	// 2: 200
	// 3: 429
}

// InMemory is the Limits of LimitByIP, in this process's memory. It builds
// the other kinds of limiter too: here one per caller, named after its
// budget.
func ExampleInMemory() {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	api := authenticate(gatecount.InMemory().PerCaller("", 1, time.Hour)(ok))

	send(api, 2, "POST", "/api", func(r *http.Request) { r.Header.Set("X-User", "alice") })
	// Output:
	// 1: 200
	// 2: 429
}

// PerIP limits each client address, behind the proxies Options.IP trusts.
// While the store cannot answer, requests go through uncounted.
func ExampleLimits_PerIP() {
	proxies, err := keyfunc.ParseNetworks("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{IP: keyfunc.IPOptions{TrustedProxies: proxies}})
	defer limits.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	health := limits.PerIP("health", 1, time.Minute)(ok)

	for _, client := range []string{"198.51.100.7", "198.51.100.7", "198.51.100.8"} {
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = "10.0.0.2:1234" // the proxy
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		health.ServeHTTP(w, r)
		fmt.Println(client, w.Code)
	}
	// Output:
	// 198.51.100.7 200
	// 198.51.100.7 429
	// 198.51.100.8 200
}

// PerCaller limits each caller that the app's authentication names with
// keyfunc.WithCallerID. A request without one is answered 401.
func ExampleLimits_PerCaller() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{Logger: slog.New(slog.DiscardHandler)})
	defer limits.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	api := authenticate(limits.PerCaller("api", 1, time.Hour)(ok))

	for _, user := range []string{"alice", "alice", "bob", ""} {
		r := httptest.NewRequest("POST", "/api", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Printf("%q: %d\n", user, w.Code)
	}
	// Output:
	// "alice": 200
	// "alice": 429
	// "bob": 200
	// "": 401
}

// By limits by any key: here an API key from a header. While the store
// cannot answer, requests are refused 503.
func ExampleLimits_By() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{})
	defer limits.Close()
	apiKey := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Api-Key"); k != "" {
			return k, nil
		}
		return "", keyfunc.ErrNoKey
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	export := limits.By("export", 2, time.Hour, apiKey)(ok)
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	send(export, 3, "POST", "/export", func(r *http.Request) { r.Header.Set("X-Api-Key", "k1") })
	// Output:
	// 1: 200
	// 2: 200
	// 3: 429
}

// CountedBy counts a route's budget by a token bucket: a burst of 3, then
// one request each 20 seconds.
func ExampleCountedBy() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{})
	defer limits.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	upload := limits.PerIP("upload", 3, time.Minute, gatecount.CountedBy(limiter.TokenBucket, 0))(ok)

	send(upload, 4, "POST", "/upload", nil)
	// Output:
	// 1: 200
	// 2: 200
	// 3: 200
	// 4: 429
}

// SignIn with Code guards a route that checks a one-time code, with
// budgets of its own: 5 failures per account and address per 15 minutes by
// default.
func ExampleLimits_SignIn_code() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{Logger: slog.New(slog.DiscardHandler)})
	defer limits.Close()
	wrongCode := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	check := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("code") != "246810" { // compare in constant time in real code
			middleware.ReportFailure(r)
			wrongCode.ServeHTTP(w, r)
			return
		}
		middleware.ReportSuccess(r)
	})
	verify := limits.SignIn(middleware.SignInOptions{Code: true, Field: "email", Failed: wrongCode})(check)
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	for i := 1; i <= 6; i++ {
		fmt.Println(i, submit(verify, url.Values{"email": {"alice@example.com"}, "code": {"000000"}}))
	}
	// Output:
	// 1 401
	// 2 401
	// 3 401
	// 4 401
	// 5 401
	// 6 429
}

// Send guards a route that sends mail or codes: 3 per destination per hour
// by default. A throttled request is answered as an accepted one, and the
// handler does not run.
func ExampleLimits_Send() {
	s := memory.New(memory.Options{})
	defer s.Close()
	limits := gatecount.New(s, gatecount.Options{Logger: slog.New(slog.DiscardHandler)})
	defer limits.Close()
	sent := 0
	reset := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++ // send the mail here
		w.WriteHeader(http.StatusAccepted)
	})
	h := limits.Send(middleware.SendOptions{Name: "reset"})(reset)
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	for i := 1; i <= 4; i++ {
		fmt.Println(i, submit(h, url.Values{"email": {"alice@example.com"}}))
	}
	fmt.Println("mails sent:", sent)
	// Output:
	// 1 202
	// 2 202
	// 3 202
	// 4 202
	// mails sent: 3
}

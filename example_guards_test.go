package gatecount_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/gatecount/gatecount"
	"github.com/gatecount/gatecount/metrics"
	"github.com/gatecount/gatecount/middleware"
)

// A sign-in form and a password-reset route guarded with the budgets of
// the environment (RATE_LIMIT_LOGIN_*, RATE_LIMIT_RESET_*), device cookies
// signed with GATECOUNT_SECRET, and every decision published through
// expvar. Real apps leave WithLookup out: FromEnv then reads os.LookupEnv.
func ExampleLimits_SignIn() {
	env := map[string]string{
		"RATE_LIMIT_SINGLE_INSTANCE":           "true",
		"GATECOUNT_SECRET":                     "an-example-secret-of-at-least-32-bytes",
		"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES": "2",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	wrongPassword := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	})
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "correct-horse" {
			middleware.ReportFailure(r)
			wrongPassword.ServeHTTP(w, r)
			return
		}
		middleware.ReportSuccess(r)
		fmt.Fprintln(w, "welcome")
	})
	reset := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to, _ := middleware.Account(r) // the address the send guard counted
		fmt.Println("reset mail sent to", to)
		w.WriteHeader(http.StatusAccepted)
	})

	m := metrics.NewExpvar("gatecount_example_signin")
	limits, err := gatecount.FromEnv(context.Background(), gatecount.WithObserver(m),
		gatecount.WithLookup(lookup), gatecount.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	m.Watch("limits", limits.Store())
	mux := http.NewServeMux()
	mux.Handle("POST /login", limits.SignIn(middleware.SignInOptions{Failed: wrongPassword})(login))
	mux.Handle("POST /password-reset", limits.Send(middleware.SendOptions{Name: "reset"})(reset))
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	post := func(path string, form url.Values) int {
		r := httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	for _, password := range []string{"guess", "guess again", "correct-horse"} {
		fmt.Println(password+":", post("/login", url.Values{"username": {"alice"}, "password": {password}}))
	}
	fmt.Println("reset:", post("/password-reset", url.Values{"email": {"Alice@Example.com"}}))
	fmt.Println("decisions:", m.Map().Get("decisions"))
	// Output:
	// guess: 401
	// guess again: 401
	// correct-horse: 429
	// reset mail sent to alice@example.com
	// reset: 202
	// decisions: {"login": {"allowed": 2, "denied": 1}, "reset": {"allowed": 1}}
}

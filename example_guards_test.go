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

// A sign-in form guarded with the budgets of the environment
// (RATE_LIMIT_LOGIN_*), its device cookies signed with GATECOUNT_SECRET,
// and every decision published through expvar. Real apps call
// gatecount.FromEnv(ctx, gatecount.WithObserver(m)), which reads
// os.LookupEnv.
func ExampleLimits_SignIn() {
	env := map[string]string{
		"RATE_LIMIT_SINGLE_INSTANCE":           "true",
		"GATECOUNT_SECRET":                     "an-example-secret-of-at-least-32-bytes",
		"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES": "2",
	}
	m := metrics.NewExpvar("gatecount_example_signin")
	limits, err := gatecount.FromEnv(context.Background(),
		gatecount.WithLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok }),
		gatecount.WithObserver(m),
		gatecount.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	m.Watch("limits", limits.Store())

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
	h := limits.SignIn(middleware.SignInOptions{Failed: wrongPassword})(login)
	if err := limits.Err(); err != nil {
		log.Fatal(err)
	}

	for _, password := range []string{"guess", "guess again", "correct-horse"} {
		form := url.Values{"username": {"alice"}, "password": {password}}
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(password+":", w.Code)
	}
	fmt.Println("decisions:", m.Map().Get("decisions"))
	// Output:
	// guess: 401
	// guess again: 401
	// correct-horse: 429
	// decisions: {"login": {"allowed": 2, "denied": 1}}
}

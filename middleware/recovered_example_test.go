package middleware_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

// recovered ends a password-reset completion handler, once the code checked
// out and the new password is stored. The owner proved control of the
// account: its cap, delay and budgets are cleared, and its lock-outs at the
// address the reset was completed from.
func recovered(r *http.Request, guard *middleware.SignInGuard, ipKeyer *keyfunc.IPKeyer, account string) {
	addr, _ := ipKeyer.ClientAddr(r) // keyfunc.NewIP with the guard's IPOptions
	if err := guard.Recovered(context.WithoutCancel(r.Context()), account, addr); err != nil {
		slog.Error("recovery not recorded", "kind", "account-recovery-failed", "err", err)
	}
}

// A guesser spread over many addresses reaches the cap on alice's
// consecutive failures; the app hears of it through OnEvent, and a
// completed password reset lifts it with Recovered.
func ExampleSignInGuard_Recovered() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("login:")
	g, err := middleware.SignIn(h, middleware.SignInOptions{
		ConsecutiveFailures: 3,
		Delay:               middleware.Delay{After: 3}, // no delays before the cap
		Logger:              slog.New(slog.DiscardHandler),
		OnEvent: func(e middleware.Event) {
			fmt.Printf("event %s: %s, %d failures, from %v\n", e.Kind, e.Account, e.Failures, e.Addr)
		},
	})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	signIn := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := middleware.Account(r)
		if name == "alice" && r.PostFormValue("password") == "right" {
			middleware.ReportSuccess(r)
			return
		}
		middleware.ReportFailure(r)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	attempt := func(ip, password string) int {
		form := url.Values{"username": {"alice"}, "password": {password}}
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = ip + ":4000"
		w := httptest.NewRecorder()
		signIn.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 4 {
		fmt.Println("guess:", attempt(fmt.Sprintf("198.51.100.%d", i+1), "wrong"))
	}
	fmt.Println("alice:", attempt("203.0.113.7", "right"))

	// alice completes a password reset from her address.
	ipKeyer, err := keyfunc.NewIP(keyfunc.IPOptions{})
	if err != nil {
		panic(err)
	}
	reset := httptest.NewRequest("POST", "/password-reset/complete", nil)
	reset.RemoteAddr = "203.0.113.7:4000"
	recovered(reset, g, ipKeyer, "alice")
	fmt.Println("alice after the reset:", attempt("203.0.113.7", "right"))
	// Output:
	// guess: 401
	// guess: 401
	// event limit-account-cap-reached: alice, 3 failures, from 198.51.100.3
	// guess: 401
	// guess: 429
	// alice: 429
	// event limit-account-recovered: alice, 0 failures, from invalid IP
	// alice after the reset: 200
}

package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

// SignIn under Code guards the second step of a sign-in: the account comes
// from the session the password step opened, the code from the body. Five wrong
// codes from one address spend its budget: even the right code is then
// refused, and never checked, until Unlock.
func ExampleSignIn_code() {
	// pendingUser is your session lookup: the account whose password step
	// passed, waiting for its code.
	pendingUser := func(r *http.Request) (string, error) {
		if c, err := r.Cookie("pending-mfa"); err == nil && c.Value == "s1" {
			return "alice", nil
		}
		return "", keyfunc.ErrNoKey
	}
	wrongCode := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid code", http.StatusUnauthorized)
	})
	verifyHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _ := middleware.Account(r) // the account the guard counted
		code, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "code")
		if err != nil || name != "alice" || code[0] != "246810" { // compare in constant time in real code
			middleware.ReportFailure(r)
			wrongCode.ServeHTTP(w, r)
			return
		}
		middleware.ReportSuccess(r) // clears the account's code failures
		fmt.Fprintln(w, "verified", name)
	})

	s := memory.New(memory.Options{})
	defer s.Close()
	h, err := s.Handle("verify:") // its own handle, never the sign-in guard's
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.SignIn(h, middleware.SignInOptions{Code: true, Account: pendingUser, Failed: wrongCode})
	if err != nil {
		log.Fatal(err)
	}
	defer guard.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /verify", guard.Wrap(verifyHandler))

	try := func(code string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/verify", strings.NewReader("code="+code))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: "pending-mfa", Value: "s1"})
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(code, w.Code)
		return w
	}
	for _, code := range []string{"000000", "111111", "222222", "333333", "444444"} {
		try(code)
	}
	w := try("246810")
	fmt.Println("  RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))

	// An operator (or your account recovery) lets alice in again from her address.
	if err := guard.Unlock(context.Background(), "alice", netip.MustParseAddr("192.0.2.1")); err != nil {
		log.Fatal(err)
	}
	try("246810")
	// Output:
	// 000000 401
	// 111111 401
	// 222222 401
	// 333333 401
	// 444444 401
	// 246810 429
	//   RateLimit-Policy: "verify-account-ip";q=5;w=900, "verify-account";q=10;w=3600, "verify-consecutive";q=100;w=31622400, "verify-network";q=1000;w=3600, "verify-network-wide";q=16000;w=3600, "verify-ip";q=100;w=3600
	// 246810 200
}

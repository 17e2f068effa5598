package middleware_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store/memory"
)

func ExampleSignInGuard_Unlock() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("login:")
	g, err := middleware.SignIn(h, middleware.SignInOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	signIn := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		middleware.ReportFailure(r) // every password is wrong here
		w.WriteHeader(http.StatusUnauthorized)
	}))
	attempt := func(ip string) int {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"username": {"alice"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = ip + ":4000"
		w := httptest.NewRecorder()
		signIn.ServeHTTP(w, r)
		return w.Code
	}
	for range 5 {
		attempt("198.51.100.7") // spends alice's failures from this address
	}
	ctx := context.Background()
	addr := netip.MustParseAddr("198.51.100.7")
	before, _ := g.Show(ctx, "alice", addr)
	fmt.Println("before:", before.RefusedFrom(addr), attempt("198.51.100.7"))

	if err := g.Unlock(ctx, "alice", addr); err != nil {
		panic(err)
	}
	fmt.Println("after:", attempt("198.51.100.7")) // counted again, from zero; the address's attempts on all accounts stay
	after, _ := g.Show(ctx, "alice", addr)
	for _, b := range after.Budgets {
		from := "all clients"
		if b.Addr.IsValid() {
			from = b.Addr.String()
		}
		fmt.Printf("%s, %s: %d of %d\n", b.Budget, from, b.Used, b.Limit)
	}
	// Output:
	// before: true 429
	// after: 401
	// login-account, all clients: 1 of 20
	// login-consecutive, all clients: 1 of 100
	// login-account-ip, 198.51.100.7: 1 of 5
	// login-ip, 198.51.100.7: 6 of 100
	// login-network, 198.51.100.7: 6 of 1000
}

package middleware_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// lockedOut returns a sign-in guard whose account alice strangers have
// locked: 2 failures per account and IP, 4 per account. Her own address
// 192.0.2.7 spent its failures first; the strangers are 198.51.100.1 and .2.
func lockedOut(t *testing.T) (*middleware.SignInGuard, *passwords, func(ip, password string) int) {
	t.Helper()
	g, p, h := signIn(t, nil, middleware.SignInOptions{
		AccountIPFailures: limiter.Budget{Limit: 2, Window: 15 * time.Minute},
		AccountFailures:   limiter.Budget{Limit: 6, Window: time.Hour},
		IPAttempts:        limiter.Budget{Limit: 10, Window: time.Hour},
		Device:            middleware.DeviceOptions{Off: true},
	})
	try := func(ip, password string) int { return login(h, ip, "alice", password).Code }
	for _, ip := range []string{"192.0.2.7", "192.0.2.7", "198.51.100.1", "198.51.100.1", "198.51.100.2", "198.51.100.2"} {
		if c := try(ip, "wrong"); c != 401 {
			t.Fatalf("wrong password from %s: %d, want 401", ip, c)
		}
	}
	if c := try("192.0.2.9", "right"); c != 429 {
		t.Fatalf("right password once the account is spent: %d, want 429", c)
	}
	return g, p, try
}

func TestSignInUnlock(t *testing.T) {
	own := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		name  string
		named []netip.Addr
		from  string
		want  int
	}{
		{"fresh address", nil, "192.0.2.9", 200},
		{"own address not named", nil, "192.0.2.7", 429},
		{"own address named", []netip.Addr{own}, "192.0.2.7", 200},
		{"stranger's spent address", []netip.Addr{own}, "198.51.100.1", 429},
		{"stranger's spent address, named by its IPv4-mapped form", []netip.Addr{netip.MustParseAddr("::ffff:198.51.100.1")}, "198.51.100.1", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, try := lockedOut(t)
			if err := g.Unlock(context.Background(), "Alice ", tc.named...); err != nil {
				t.Fatal(err)
			}
			if c := try(tc.from, "right"); c != tc.want {
				t.Fatalf("right password from %s after Unlock(alice, %v): %d, want %d", tc.from, tc.named, c, tc.want)
			}
		})
	}
}

func TestSignInShow(t *testing.T) {
	g, _, _ := lockedOut(t)
	ctx := context.Background()
	own, stranger := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("198.51.100.2")
	s, err := g.Show(ctx, "ALICE", own, stranger)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		budget  string
		addr    netip.Addr
		used    int
		refused bool
	}
	want := []row{
		{"login-account", netip.Addr{}, 6, true},
		{"login-consecutive", netip.Addr{}, 6, false},
		{"login-account-ip", own, 2, true},
		{"login-ip", own, 2, false},
		{"login-network", own, 2, false},
		{"login-account-ip", stranger, 2, true},
		{"login-ip", stranger, 2, false},
		{"login-network", stranger, 4, false},
	}
	if s.Key != "alice" || !s.Refused || len(s.Budgets) != len(want) {
		t.Fatalf("Show = %+v, want alice refused with %d budgets", s, len(want))
	}
	for i, b := range s.Budgets {
		if got := (row{b.Budget, b.Addr, b.Used, b.Refused}); got != want[i] || b.Reset.IsZero() {
			t.Errorf("budget %d = %+v, want %+v with a reset", i, b, want[i])
		}
	}
	if err := g.Unlock(ctx, "alice", own); err != nil {
		t.Fatal(err)
	}
	s, err = g.Show(ctx, "alice", own, stranger)
	if err != nil {
		t.Fatal(err)
	}
	if s.Refused || s.RefusedFrom(own) || !s.RefusedFrom(stranger) || s.Budgets[0].Used != 0 {
		t.Fatalf("after Unlock(alice, %v): %+v; want the account and its own address free, the stranger refused", own, s)
	}
	// Show counts nothing.
	again, err := g.Show(ctx, "alice", own, stranger)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again.Budgets {
		if again.Budgets[i].Used != s.Budgets[i].Used {
			t.Fatalf("a second Show read %+v, the first %+v", again.Budgets[i], s.Budgets[i])
		}
	}
}

func TestUnlockRejects(t *testing.T) {
	g, _, _ := signIn(t, nil, middleware.SignInOptions{})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		account string
		addrs   []netip.Addr
		want    error
	}{
		{"empty account", "", nil, keyfunc.ErrInvalidAccount},
		{"control character", "al\x00ice", nil, keyfunc.ErrInvalidAccount},
		{"zero address", "alice", []netip.Addr{{}}, keyfunc.ErrNoKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := g.Unlock(ctx, tc.account, tc.addrs...); !errors.Is(err, tc.want) {
				t.Errorf("Unlock: %v, want %v", err, tc.want)
			}
			if _, err := g.Show(ctx, tc.account, tc.addrs...); !errors.Is(err, tc.want) {
				t.Errorf("Show: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSendUnlock(t *testing.T) {
	s := memStore(t, nil)
	g, err := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	m := &mailer{}
	h := g.Wrap(m)
	for range 5 {
		reset(h, "192.0.2.1", "Alice@Example.com")
	}
	ctx := context.Background()
	st, err := g.Show(ctx, "alice@example.com", netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	if m.sent.Load() != 3 || !st.Refused || st.Budgets[0].Used != 3 || st.Budgets[1].Used != 3 {
		t.Fatalf("sent %d, Show %+v; want 3 sent and the destination refused", m.sent.Load(), st)
	}
	if err := g.Unlock(ctx, "ALICE@example.com"); err != nil {
		t.Fatal(err)
	}
	reset(h, "192.0.2.1", "alice@example.com")
	if m.sent.Load() != 4 {
		t.Fatalf("sent %d after Unlock, want 4", m.sent.Load())
	}
}

// Unlock of an address ends its back-off lock-out and forgets its history:
// the next lock-out from there is the first again.
func TestSignInUnlockBackoff(t *testing.T) {
	clk := clock.NewFake(t0)
	g, _, h := signIn(t, clk, middleware.SignInOptions{
		AccountIPFailures: limiter.Budget{Limit: 2, Window: time.Minute},
		Backoff:           middleware.Backoff{Max: 10 * time.Minute},
	})
	lockOut := func() string {
		login(h, "192.0.2.1", "alice", "wrong")
		login(h, "192.0.2.1", "alice", "wrong")
		return login(h, "192.0.2.1", "alice", "wrong").Header().Get("Retry-After")
	}
	if got := lockOut(); got != "60" {
		t.Fatalf("first lock-out: Retry-After %q, want 60", got)
	}
	clk.Advance(time.Minute)
	if got := lockOut(); got != "120" {
		t.Fatalf("second lock-out: Retry-After %q, want 120", got)
	}
	if err := g.Unlock(context.Background(), "alice", netip.MustParseAddr("192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	if c := login(h, "192.0.2.1", "alice", "wrong").Code; c != 401 {
		t.Fatalf("a failure right after Unlock: %d, want 401", c)
	}
	login(h, "192.0.2.1", "alice", "wrong")
	if got := login(h, "192.0.2.1", "alice", "wrong").Header().Get("Retry-After"); got != "60" {
		t.Fatalf("the lock-out after Unlock: Retry-After %q, want 60, the first's", got)
	}
}

// Recovery and unlock touch only the account's own keys: an address that
// spent its attempts budget on other accounts stays refused on them after
// a reset of its own password, an unlock, or a code guard's unlock, on
// every store.
func TestUnlockLeavesAddressBudget(t *testing.T) {
	ctx := context.Background()
	ipBudget := limiter.Budget{Limit: 3, Window: time.Hour}
	own := netip.MustParseAddr("192.0.2.7")
	type guard struct {
		free func(account string) error
		try  func(account string) int
	}
	signInGuard := func(t *testing.T, s *store.Store, recovered bool) guard {
		g, err := middleware.SignIn(handle(t, s, fresh("signin")), middleware.SignInOptions{Logger: quiet, IP: trustLoopback, IPAttempts: ipBudget,
			Device: middleware.DeviceOptions{Off: true, Secret: deviceSecret}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		h := g.Wrap(&passwords{})
		free := func(a string) error { return g.Unlock(ctx, a, own) }
		if recovered {
			free = func(a string) error { return g.Recovered(ctx, a, own) }
		}
		return guard{free, func(a string) int { return login(h, own.String(), a, "wrong").Code }}
	}
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				new  func(t *testing.T, s *store.Store) guard
			}{
				{"Recovered", func(t *testing.T, s *store.Store) guard { return signInGuard(t, s, true) }},
				{"Unlock", func(t *testing.T, s *store.Store) guard { return signInGuard(t, s, false) }},
				{"SignInGuard.Unlock, code", func(t *testing.T, s *store.Store) guard {
					g, _, h := verifyOn(t, handle(t, s, fresh("verify")), middleware.SignInOptions{IPAttempts: ipBudget})
					return guard{func(a string) error { return g.Unlock(ctx, a, own) }, func(a string) int { return tryCode(h, own.String(), a, "000000").Code }}
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					g := tc.new(t, open(t))
					for i, a := range []string{"alice", "bob", "carol"} {
						if c := g.try(a); c != 401 {
							t.Fatalf("attempt %d from %v: %d, want 401", i+1, own, c)
						}
					}
					if c := g.try("dave"); c != 429 {
						t.Fatalf("a fourth account from %v: %d, want 429", own, c)
					}
					for range 3 { // three resets of its own account
						if err := g.free("alice"); err != nil {
							t.Fatal(err)
						}
						if c := g.try("dave"); c != 429 {
							t.Fatalf("another account from %v after it freed its own: %d, want 429 (the address budget is not the account's)", own, c)
						}
					}
				})
			}
		})
	}
}

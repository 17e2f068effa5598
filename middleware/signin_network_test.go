package middleware_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// refusedBy reports whether w is a refusal whose fields name budget.
func refusedBy(w *httptest.ResponseRecorder, budget string) bool {
	return w.Code == 429 && strings.HasPrefix(w.Header().Get("RateLimit"), `"`+budget+`";`)
}

// An attacker with many addresses in one network pays for the network: by
// default a /48 of fresh /64s, or a /24 of fresh addresses, gets
// DefaultNetworkAttempts in all, each attempt on a made-up name with a
// fresh password, which no other budget sees.
func TestSignInNetworkDefaults(t *testing.T) {
	const limit = 1000 // DefaultNetworkAttempts
	for _, tc := range []struct {
		name string
		addr func(i int) string
	}{
		{"IPv6 /48 of fresh /64s", func(i int) string { return fmt.Sprintf("2001:db8:1:%x::1", i) }},
		{"IPv4 /24", func(i int) string { return fmt.Sprintf("192.0.2.%d", i%250+1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, h := signIn(t, nil, middleware.SignInOptions{Device: middleware.DeviceOptions{Off: true}})
			for i := range limit {
				if w := login(h, tc.addr(i), fmt.Sprintf("made-up-%d", i), fmt.Sprintf("guess-%d", i)); w.Code != 401 {
					t.Fatalf("attempt %d: %d %s, want 401", i+1, w.Code, w.Header().Get("RateLimit"))
				}
			}
			w := login(h, tc.addr(limit), "made-up", "guess")
			if !refusedBy(w, "login-network") {
				t.Fatalf("attempt %d from the network: %d %q, want 429 by login-network", limit+1, w.Code, w.Header().Get("RateLimit"))
			}
			if n := p.checks.Load(); n != limit {
				t.Fatalf("%d checks, want %d", n, limit)
			}
			if w := login(h, "203.0.113.9", "alice", "right"); w.Code != 200 {
				t.Fatalf("alice from another network: %d, want 200", w.Code)
			}
		})
	}
}

// Each network budget binds, in one store update with the rest, on every
// store; exempt networks skip them as they skip the address budget, and
// A code guard counts them as a password's does.
func TestSignInNetworkBudgets(t *testing.T) {
	network := limiter.Budget{Limit: 4, Window: time.Hour}
	exempt, _ := keyfunc.ParseNetworks("2001:db8:1::/48")
	for _, tc := range []struct {
		name   string
		verify bool
		exempt bool
		addr   func(i int) string
		admits int    // attempts before the refusal
		budget string // the refusing budget, "" for none
	}{
		{"/48 of fresh /64s", false, false, func(i int) string { return fmt.Sprintf("2001:db8:1:%x::1", i) }, 4, "login-network"},
		{"/32 of fresh /48s", false, false, func(i int) string { return fmt.Sprintf("2001:db8:%x::1", i) }, 64, "login-network-wide"},
		{"/24", false, false, func(i int) string { return fmt.Sprintf("192.0.2.%d", i+1) }, 4, "login-network"},
		{"6to4 of one /24", false, false, func(i int) string { return fmt.Sprintf("2002:c000:02%02x::1", i+1) }, 4, "login-network"},
		{"exempt /48", false, true, func(i int) string { return fmt.Sprintf("2001:db8:1:%x::1", i) }, 20, ""},
		{"code, /48 of fresh /64s", true, false, func(i int) string { return fmt.Sprintf("2001:db8:1:%x::1", i) }, 4, "verify-network"},
	} {
		for name, open := range exactStores() {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				h := handle(t, open(t), fresh("network"))
				var nets keyfunc.Networks
				if tc.exempt {
					nets.Exempt = exempt
				}
				var try func(ip string, i int) *httptest.ResponseRecorder
				if tc.verify {
					_, _, vh := verifyOn(t, h, middleware.SignInOptions{NetworkAttempts: network, Networks: nets})
					try = func(ip string, i int) *httptest.ResponseRecorder {
						return tryCode(vh, ip, fmt.Sprintf("made-up-%d", i), "000000")
					}
				} else {
					g, err := middleware.SignIn(h, middleware.SignInOptions{
						Logger: quiet, IP: trustLoopback, NetworkAttempts: network, Networks: nets,
						Device: middleware.DeviceOptions{Secret: deviceSecret},
					})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { g.Close() })
					sh := g.Wrap(&passwords{})
					try = func(ip string, i int) *httptest.ResponseRecorder {
						return login(sh, ip, fmt.Sprintf("made-up-%d", i), fmt.Sprintf("guess-%d", i))
					}
				}
				for i := range tc.admits {
					if w := try(tc.addr(i), i); w.Code != 401 {
						t.Fatalf("attempt %d from %s: %d %q, want 401", i+1, tc.addr(i), w.Code, w.Header().Get("RateLimit"))
					}
				}
				w := try(tc.addr(tc.admits), tc.admits)
				if tc.budget == "" {
					if w.Code != 401 {
						t.Fatalf("attempt %d from an exempt network: %d %q, want 401", tc.admits+1, w.Code, w.Header().Get("RateLimit"))
					}
					return
				}
				if !refusedBy(w, tc.budget) || w.Header().Get("Retry-After") == "" {
					t.Fatalf("attempt %d from %s: %d %q, want 429 by %s", tc.admits+1, tc.addr(tc.admits), w.Code, w.Header().Get("RateLimit"), tc.budget)
				}
			})
		}
	}
}

// Show tells an address's network budgets, as an attempt from it counts
// them.
func TestSignInShowNetworks(t *testing.T) {
	g, _, h := signIn(t, nil, middleware.SignInOptions{NetworkAttempts: limiter.Budget{Limit: 2, Window: time.Hour}})
	for i := range 2 {
		login(h, fmt.Sprintf("2001:db8:1:%x::1", i), "made-up", "guess")
	}
	s, err := g.Show(t.Context(), "alice", netip.MustParseAddr("2001:db8:1:ff::7"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range s.Budgets[2:] {
		got = append(got, fmt.Sprintf("%s %s %d/%d %v", b.Budget, b.Key, b.Used, b.Limit, b.Refused))
	}
	want := []string{
		"login-account-ip 10:account-ip5:alice18:2001:db8:1:ff::/64 0/5 false",
		"login-ip 2:ip18:2001:db8:1:ff::/64 0/100 false",
		"login-network 7:network15:2001:db8:1::/48 2/2 true",
		"login-network-wide 7:network13:2001:db8::/32 2/32 false",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || !s.RefusedFrom(netip.MustParseAddr("2001:db8:1:ff::7")) {
		t.Fatalf("Show =\n%s\nwant\n%s\nand refused", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

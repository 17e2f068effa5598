package middleware_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// twoInstances returns two sign-in guards of one app on one store, as two
// instances have them, and their handlers, which check passwords with p:
// on memory, one guard twice.
func twoInstances(t *testing.T, kind string, o middleware.SignInOptions) (g [2]*middleware.SignInGuard, h [2]http.Handler, p *passwords) {
	t.Helper()
	o.Logger, o.IP = quiet, trustLoopback
	o.Device.Secret = deviceSecret
	var stores [2]*store.Store
	switch kind {
	case "memory":
		stores[0] = memStore(t, nil)
	default:
		u := migratedPostgres(t)
		if kind == "redis" {
			u = servicetest.RedisURL(t)
		}
		secret := make([]byte, 32)
		rand.Read(secret)
		stores[0], stores[1] = openShared(t, u, secret), openShared(t, u, secret)
	}
	prefix := fresh("signin")
	p = &passwords{}
	for i, s := range stores {
		if s == nil {
			g[i], h[i] = g[0], h[0]
			continue
		}
		var err error
		if g[i], err = middleware.SignIn(handle(t, s, prefix), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g[i].Close() })
		h[i] = g[i].Wrap(p)
	}
	return g, h, p
}

// Recovered revokes the account's device tokens issued before it, on every
// instance: a cookie issued before it counts as no device afterwards, and
// is refused, like any client, by the account's spent budget; one issued
// after it is a known device.
func TestSignInRecoveredRevokesDevices(t *testing.T) {
	for _, kind := range []string{"memory", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			g, h, _ := twoInstances(t, kind, middleware.SignInOptions{AccountFailures: limiter.Budget{Limit: 3, Window: time.Hour}})
			alice := func(i int, ip, pw string, c ...*http.Cookie) *httptest.ResponseRecorder {
				return post(h[i], ip, formCT, form("alice", pw), c...)
			}
			strangers := func(from int) {
				t.Helper()
				for i := range 3 {
					if w := alice(0, fmt.Sprintf("198.51.100.%d", from+i), "wrong"); w.Code != 401 {
						t.Fatalf("stranger %d: %d, want 401", i+1, w.Code)
					}
				}
			}
			stolen := deviceCookie(t, alice(0, "192.0.2.1", "right"))
			strangers(1)
			if w := alice(1, "203.0.113.9", "right"); w.Code != 429 {
				t.Fatalf("alice without a device once strangers spent her account: %d, want 429", w.Code)
			}
			if w := alice(1, "203.0.113.9", "right", stolen); w.Code != 200 {
				t.Fatalf("the device cookie before the recovery: %d, want 200", w.Code)
			}
			if err := g[0].Recovered(context.Background(), "alice"); err != nil {
				t.Fatal(err)
			}
			fresh := deviceCookie(t, alice(0, "192.0.2.2", "right"))
			strangers(10)
			if w := alice(1, "203.0.113.10", "right", stolen); w.Code != 429 {
				t.Fatalf("the device cookie issued before the recovery, on the other instance: %d, want 429 (revoked: a client like any other)", w.Code)
			}
			if w := alice(1, "203.0.113.10", "right", fresh); w.Code != 200 {
				t.Fatalf("the device cookie issued after the recovery: %d, want 200", w.Code)
			}
		})
	}
}

// Known devices are capped by their own consecutive failures, at the
// account's cap (here NIST's 100), cleared by that device's success. A
// stolen device cookie paced under its windowed budget, 5 per 15 minutes,
// reaches the check 100 times in a row, not 300; from then on it counts as
// any client, which the account's cap, reached by its failures, refuses.
// The owner's own device still signs in.
func TestSignInDeviceCap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		success int // the stolen cookie's attempt, counted from 1, with the right password; 0: none
		checks  int // of the 300 attempts, those that reach the check
		refused bool
	}{
		{"300 wrong in a row", 0, 100, true},
		{"a success after 99", 100, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			var ev events
			_, p, h := signIn(t, clk, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}, OnEvent: ev.on})
			own := deviceCookie(t, post(h, "192.0.2.1", formCT, form("alice", "right")))
			stolen := deviceCookie(t, post(h, "192.0.2.2", formCT, form("alice", "right")))
			p.checks.Store(0)
			last := 0
			for i := 1; i <= 300; i++ {
				pw := "wrong"
				if i == tc.success {
					pw = "right"
				}
				last = post(h, "198.51.100.1", formCT, form("alice", pw), stolen).Code
				if i%5 == 0 {
					clk.Advance(15 * time.Minute) // the device's windowed budget, 5 per 15 minutes
				}
			}
			if n := int(p.checks.Load()); n != tc.checks || (last == 429) != tc.refused {
				t.Fatalf("%d of 300 attempts with a stolen device cookie reached the check, the last answered %d; want %d, refused %v", n, last, tc.checks, tc.refused)
			}
			if w := post(h, "203.0.113.5", formCT, form("alice", "right"), own); w.Code != 200 {
				t.Fatalf("alice from her own device: %d, want 200", w.Code)
			}
			if capped := ev.of(middleware.EventCapReached); tc.refused && (len(capped) != 1 || capped[0].Budget != "login-device-consecutive") {
				t.Fatalf("cap events %+v, want one of login-device-consecutive", capped)
			}
		})
	}
}

// 300 concurrent wrong passwords with one device cookie reach the check
// exactly the cap, on every store.
func TestSignInDeviceCapExact(t *testing.T) {
	const limit = 10
	for _, kind := range []string{"memory", "postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			o := outOfTheWay
			o.ConsecutiveFailures = limit
			o.Device.Failures = limiter.Budget{Limit: 1000, Window: time.Hour}
			_, h, p := twoInstances(t, kind, o)
			device := deviceCookie(t, post(h[0], "192.0.2.1", formCT, form("alice", "right")))
			p.checks.Store(0)
			var wg sync.WaitGroup
			for i := range 300 {
				wg.Go(func() { post(h[i%2], guessAddr(i), formCT, form("alice", "wrong"), device) })
			}
			wg.Wait()
			if n := p.checks.Load(); n != limit {
				t.Fatalf("%d of 300 concurrent wrong passwords with one device cookie reached the check, want %d", n, limit)
			}
		})
	}
}

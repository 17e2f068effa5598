package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// codes is a code-checking handler: alice's code is "246810", bob's
// "135791"; anyone else is answered like a wrong code.
type codes struct{ checks atomic.Int64 }

func (c *codes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.checks.Add(1)
	name, ok := middleware.Account(r)
	code, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "code")
	if ok && err == nil && code[0] != "" && map[string]string{"alice": "246810", "bob": "135791"}[name] == code[0] {
		middleware.ReportSuccess(r)
		w.WriteHeader(200)
		return
	}
	middleware.ReportFailure(r)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(401)
	io.WriteString(w, `{"error":"invalid code"}`)
}

var trustLoopback = func() keyfunc.IPOptions {
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	return keyfunc.IPOptions{TrustedProxies: proxies}
}()

func verifyOn(t testing.TB, h *store.Handle, o middleware.SignInOptions) (*middleware.SignInGuard, *codes, http.Handler) {
	t.Helper()
	o.Logger = quiet
	o.IP = trustLoopback
	o.Code = true
	g, err := middleware.SignIn(h, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	c := &codes{}
	return g, c, g.Wrap(c)
}

// tryCode posts user's code from ip.
func tryCode(h http.Handler, ip, user, code string) *httptest.ResponseRecorder {
	form := url.Values{"username": {user}, "code": {code}}.Encode()
	r := httptest.NewRequest("POST", "/verify", strings.NewReader(form))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", ip)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// addr returns the i-th of many client addresses.
func addr(i int) string { return fmt.Sprintf("10.%d.%d.1", i/256, i%256) }

// 200 concurrent wrong codes for one account reach the check exactly the
// budget that binds, on every store: the account's from one address, the
// account's from all, the consecutive cap.
func TestCodeConcurrentWrongCodesExact(t *testing.T) {
	loose := limiter.Budget{Limit: 1000, Window: time.Hour}
	cases := []struct {
		name   string
		o      middleware.SignInOptions
		spread bool
		want   int64
	}{
		{"one address", middleware.SignInOptions{}, false, 5},
		{"200 addresses", middleware.SignInOptions{}, true, 10},
		{"200 addresses, consecutive cap", middleware.SignInOptions{AccountIPFailures: loose, AccountFailures: loose, IPAttempts: loose, ConsecutiveFailures: 37}, true, 37},
	}
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					_, c, h := verifyOn(t, handle(t, open(t), fresh("verify")), tc.o)
					var wg sync.WaitGroup
					var refused atomic.Int64
					for i := range 200 {
						ip := addr(0)
						if tc.spread {
							ip = addr(i)
						}
						wg.Go(func() {
							if tryCode(h, ip, "alice", "000000").Code == 429 {
								refused.Add(1)
							}
						})
					}
					wg.Wait()
					if n := c.checks.Load(); n != tc.want || refused.Load() != 200-tc.want {
						t.Fatalf("%d of 200 concurrent wrong codes reached the check and %d were refused, want %d and %d",
							n, refused.Load(), tc.want, 200-tc.want)
					}
				})
			}
		})
	}
}

// Code failures never spend the password's budgets, nor password failures
// the code's: each guard counts in its own handle, as NIST counts per
// authenticator.
func TestCodeApartFromSignIn(t *testing.T) {
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := context.Background()
			in, err := middleware.SignIn(handle(t, s, fresh("signin")), middleware.SignInOptions{Logger: quiet, IP: trustLoopback, Device: middleware.DeviceOptions{Off: true, Secret: deviceSecret}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close() })
			p := &passwords{}
			loginH := in.Wrap(p)
			code, _, codeH := verifyOn(t, handle(t, s, fresh("verify")), middleware.SignInOptions{})
			x := netip.MustParseAddr("192.0.2.1")
			unused := func(name string, st middleware.Standing) {
				t.Helper()
				for _, b := range st.Budgets {
					if b.Used != 0 || b.Refused {
						t.Errorf("%s: %s used %d of %d, refused %v; want untouched", name, b.Budget, b.Used, b.Limit, b.Refused)
					}
				}
			}

			// Codes: alice's budget from x, and then the account's, spent.
			for i := range 11 {
				ip := x.String()
				if i >= 5 {
					ip = addr(i)
				}
				want := 401
				if i == 10 {
					want = 429
				}
				if c := tryCode(codeH, ip, "alice", "000000").Code; c != want {
					t.Fatalf("wrong code %d: %d, want %d", i+1, c, want)
				}
			}
			st, err := in.Show(ctx, "alice", x)
			if err != nil {
				t.Fatal(err)
			}
			unused("sign-in after code failures", st)
			if c := login(loginH, x.String(), "alice", "right").Code; c != 200 {
				t.Fatalf("right password after spent code budgets: %d, want 200", c)
			}

			// Passwords: bob's budget from y, of a network of its own, spent.
			y := netip.MustParseAddr("203.0.113.2")
			for i := range 6 {
				want := 401
				if i == 5 {
					want = 429
				}
				if c := login(loginH, y.String(), "bob", "wrong").Code; c != want {
					t.Fatalf("wrong password %d: %d, want %d", i+1, c, want)
				}
			}
			if st, err = code.Show(ctx, "bob", y); err != nil {
				t.Fatal(err)
			}
			unused("code after password failures", st)
			if c := tryCode(codeH, y.String(), "bob", "135791").Code; c != 200 {
				t.Fatalf("right code after spent password budgets: %d, want 200", c)
			}
		})
	}
}

func TestCodeConsecutiveFailuresOption(t *testing.T) {
	for _, tc := range []struct {
		n    int
		ok   bool
		want int
	}{
		{0, true, 100},
		{1, true, 1},
		{100, true, 100},
		{101, false, 0},
		{1000, false, 0},
		{-1, false, 0},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			g, err := middleware.SignIn(handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{Code: true, ConsecutiveFailures: tc.n, Logger: quiet})
			if !tc.ok {
				if !errors.Is(err, limiter.ErrInvalidBudget) || !strings.Contains(err.Error(), "NIST") {
					t.Fatalf("SignIn(Code, ConsecutiveFailures: %d): %v, want an error matching limiter.ErrInvalidBudget naming NIST's limit", tc.n, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			st, err := g.Show(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Budgets) != 2 || st.Budgets[1].Budget != "verify-consecutive" || st.Budgets[1].Limit != tc.want {
				t.Fatalf("Show: %+v, want verify-consecutive of %d second", st.Budgets, tc.want)
			}
		})
	}
}

// The consecutive cap counts failures from every address whatever the
// windows; a success from any client clears it, and so does Unlock.
func TestCodeConsecutiveCap(t *testing.T) {
	loose := limiter.Budget{Limit: 1000, Window: time.Hour}
	g, c, h := verifyOn(t, handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{
		AccountIPFailures: loose, AccountFailures: loose, ConsecutiveFailures: 3,
	})
	steps := []struct {
		ip, code string
		want     int
	}{
		{addr(1), "000000", 401},
		{addr(2), "000000", 401},
		{addr(3), "246810", 200}, // the third attempt: a success clears the count
		{addr(4), "000000", 401},
		{addr(5), "000000", 401},
		{addr(6), "000000", 401},
		{addr(7), "000000", 429}, // three in a row: capped
		{addr(8), "246810", 429}, // the right code too, from a fresh address
	}
	for i, s := range steps {
		w := tryCode(h, s.ip, "alice", s.code)
		if w.Code != s.want {
			t.Fatalf("step %d (%s from %s): %d, want %d", i+1, s.code, s.ip, w.Code, s.want)
		}
		if s.want == 429 && !strings.Contains(w.Header().Get("RateLimit"), `"verify-consecutive"`) {
			t.Errorf("step %d: RateLimit %q, want the consecutive budget named", i+1, w.Header().Get("RateLimit"))
		}
	}
	if n := c.checks.Load(); n != 6 {
		t.Fatalf("%d attempts reached the check, want 6", n)
	}
	st, err := g.Show(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Refused || st.Budgets[1].Used != 3 {
		t.Fatalf("Show: %+v, want refused with 3 consecutive failures", st)
	}
	if err := g.Unlock(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if code := tryCode(h, addr(9), "alice", "246810").Code; code != 200 {
		t.Fatalf("right code after Unlock: %d, want 200", code)
	}
}

// A right code clears the account's failures from all clients, not only
// its own attempt's: SignIn refunds one, a code guard clears them.
func TestCodeSuccessClearsAccount(t *testing.T) {
	_, c, h := verifyOn(t, handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{})
	for i := range 9 {
		if code := tryCode(h, addr(i), "alice", "000000").Code; code != 401 {
			t.Fatalf("wrong code %d: %d, want 401", i+1, code)
		}
	}
	if code := tryCode(h, addr(100), "alice", "246810").Code; code != 200 {
		t.Fatalf("right code: %d, want 200", code)
	}
	for i := range 11 {
		want := 401
		if i == 10 {
			want = 429
		}
		if code := tryCode(h, addr(200+i), "alice", "000000").Code; code != want {
			t.Fatalf("wrong code %d after the success: %d, want %d", i+1, code, want)
		}
	}
	if n := c.checks.Load(); n != 20 {
		t.Fatalf("%d attempts reached the check, want 20", n)
	}
}

// A known and an unknown account get byte-identical answers at every step,
// the refusals of every budget included.
func TestCodeKnownUnknownSame(t *testing.T) {
	clk := clock.NewFake(t0)
	_, _, h := verifyOn(t, handle(t, memStore(t, clk), "verify:"), middleware.SignInOptions{
		AccountIPFailures:   limiter.Budget{Limit: 3, Window: 15 * time.Minute},
		AccountFailures:     limiter.Budget{Limit: 20, Window: time.Hour},
		ConsecutiveFailures: 8,
		Remaining:           middleware.RemainingShown,
	})
	codes := map[int]int{}
	for i := range 14 {
		// Four attempts from each address: the fourth refused by the
		// address's budget of the account, and from the ninth failure on,
		// every attempt by the consecutive cap.
		known, unknown := tryCode(h, addr(i/4), "alice", "000000"), tryCode(h, addr(100+i/4), "mallory", "000000")
		if !bytes.Equal(dump(known), dump(unknown)) {
			t.Fatalf("attempt %d differs:\nknown:   %s\nunknown: %s", i+1, dump(known), dump(unknown))
		}
		codes[known.Code]++
		clk.Advance(time.Second)
	}
	if codes[401] != 8 || codes[429] != 6 {
		t.Fatalf("answers %v, want 8 × 401 and 6 × 429", codes)
	}
}

// Account reads the account from the request's session rather than the
// body; a request without one is answered by Failed and never checked.
func TestCodeAccountFunc(t *testing.T) {
	session := func(r *http.Request) (string, error) {
		if v := r.Header.Get("X-Session-User"); v != "" {
			return v, nil
		}
		return "", keyfunc.ErrNoKey
	}
	_, c, h := verifyOn(t, handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{Account: session})
	post := func(user, code string) int {
		r := httptest.NewRequest("POST", "/verify", strings.NewReader(url.Values{"username": {"bob"}, "code": {code}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", "192.0.2.1")
		if user != "" {
			r.Header.Set("X-Session-User", user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := post("Alice", "246810"); code != 200 {
		t.Fatalf("alice's session, her code: %d, want 200", code)
	}
	if code := post("", "135791"); code != 401 || c.checks.Load() != 1 {
		t.Fatalf("no session: %d after %d checks, want 401 without a check", code, c.checks.Load())
	}
}

// A code guard emits the sign-in guard's events for codes: the account's budget
// spent once per window, the cap once, an unlock; never a delay.
func TestCodeEvents(t *testing.T) {
	var ev events
	g, _, h := verifyOn(t, handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{
		AccountIPFailures: limiter.Budget{Limit: 1000, Window: time.Hour},
		AccountFailures:   limiter.Budget{Limit: 4, Window: time.Hour},
		OnEvent:           ev.on,
	})
	for i := range 50 {
		tryCode(h, addr(i), "alice", "000000")
	}
	if got := ev.of(middleware.EventBudgetSpent); len(got) != 1 || got[0].Guard != "verify" || got[0].Account != "alice" ||
		got[0].Budget != "verify-account" || got[0].Limit != 4 || got[0].Addr != netip.MustParseAddr(addr(3)) {
		t.Fatalf("budget-spent events %+v, want one for alice's verify-account from the address that spent it", got)
	}
	if err := g.Unlock(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if got := ev.of(middleware.EventUnlocked); len(got) != 1 || got[0].Guard != "verify" || got[0].Account != "alice" {
		t.Fatalf("unlock events %+v, want one for alice", got)
	}

	ev = events{}
	_, _, h = verifyOn(t, handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{
		AccountIPFailures:   limiter.Budget{Limit: 1000, Window: time.Hour},
		AccountFailures:     limiter.Budget{Limit: 1000, Window: time.Hour},
		ConsecutiveFailures: 30,
		OnEvent:             ev.on,
	})
	for i := range 60 {
		tryCode(h, addr(i), "alice", "000000")
	}
	if got := ev.of(middleware.EventCapReached); len(got) != 1 || got[0].Budget != "verify-consecutive" || got[0].Failures != 30 {
		t.Fatalf("cap events %+v, want one at verify-consecutive's 30", got)
	}
	if got := ev.of(middleware.EventDelayed); len(got) != 0 {
		t.Fatalf("delay events %+v, want none: a code guard has no delay ladder", got)
	}
}

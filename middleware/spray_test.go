package middleware_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
)

// checker is a sign-in handler that counts the checks of each password:
// the accounts of known have their passwords there; every other account
// and wrong password gets the same 401.
type checker struct {
	mu     sync.Mutex
	known  map[string]string
	checks map[string]int
}

func newChecker(known map[string]string) *checker {
	return &checker{known: known, checks: map[string]int{}}
}

func (c *checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, _ := middleware.Account(r)
	vs, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{MaxValueBytes: 1 << 10}, "password")
	if err != nil {
		http.Error(w, "unreadable", 400)
		return
	}
	c.mu.Lock()
	c.checks[vs[0]]++
	c.mu.Unlock()
	if want, ok := c.known[name]; ok && want == vs[0] {
		w.WriteHeader(200)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(401)
	w.Write([]byte(`{"error":"invalid username or password"}` + "\n"))
}

func (c *checker) count(password string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checks[password]
}

// sprayEvents collects the events of a guard.
type sprayEvents struct {
	mu sync.Mutex
	es []middleware.Event
}

func (e *sprayEvents) on(ev middleware.Event) { e.mu.Lock(); e.es = append(e.es, ev); e.mu.Unlock() }

func (e *sprayEvents) of(kind middleware.EventKind) []middleware.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []middleware.Event
	for _, ev := range e.es {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// sprayGuard returns a sign-in guard on a fresh handle of s, around c.
func sprayGuard(t *testing.T, s *store.Store, o middleware.SignInOptions, c *checker) http.Handler {
	t.Helper()
	o.Logger = quiet
	o.Device.Secret = deviceSecret
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	o.IP.TrustedProxies = proxies
	g, err := middleware.SignIn(handle(t, s, fresh("spray")), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.Wrap(c)
}

// untimed is dump of w with the seconds left of Retry-After and RateLimit
// left out: on a store's real clock they may tick between two attempts.
func untimed(w *httptest.ResponseRecorder) []byte {
	return regexp.MustCompile(`(Retry-After: |t=)[0-9]+`).ReplaceAll(dump(w), []byte("${1}N"))
}

// sprayAddr returns the i-th of many client addresses, each its own /32.
func sprayAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff) }

// One wrong password against 1,000 accounts from 1,000 addresses reaches
// the password check the spray budget's times and no more, on every
// store; every further attempt is refused 429 with the body of every
// refusal, known and unknown accounts alike, and one event tells of it.
// Another password is unaffected.
func TestSprayedPasswordRefused(t *testing.T) {
	const sprayed, other = "Summer2026!", "Winter2026?"
	if middleware.SprayBucket(deviceSecret, sprayed) == middleware.SprayBucket(deviceSecret, other) {
		t.Fatal("the test's two passwords share a bucket")
	}
	b := signInDefaults.Spray.Budget.Limit
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			known := map[string]string{}
			for i := 0; i < 1000; i += 2 { // every other account exists
				known[fmt.Sprintf("user%d", i)] = "their own"
			}
			c, ev := newChecker(known), &sprayEvents{}
			h := sprayGuard(t, open(t), middleware.SignInOptions{OnEvent: ev.on}, c)
			var refusal []byte
			for i := 0; i < 1000; i += 2 {
				// A known account and an unknown one, at the same count:
				// the same answer, byte for byte.
				known, unknown := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), sprayed), login(h, sprayAddr(i+1), fmt.Sprintf("user%d", i+1), sprayed)
				if !bytes.Equal(untimed(known), untimed(unknown)) {
					t.Fatalf("attempts %d and %d: a known and an unknown account answered apart:\n%s\n%s", i, i+1, dump(known), dump(unknown))
				}
				want := 401
				if i >= b {
					want = 429
				}
				if known.Code != want {
					t.Fatalf("attempt %d: %d, want %d", i, known.Code, want)
				}
				if want == 429 {
					refusal = known.Body.Bytes()
				}
			}
			if n := c.count(sprayed); n != b {
				t.Fatalf("the sprayed password reached the check %d times, want the budget, %d", n, b)
			}
			// The body of every other refusal: an address's budget spent.
			for i := range signInDefaults.IPAttempts.Limit {
				login(h, "192.0.2.99", "someone", fmt.Sprintf("p%d", i))
			}
			if w := login(h, "192.0.2.99", "someone", "else"); w.Code != 429 || !bytes.Equal(w.Body.Bytes(), refusal) {
				t.Fatalf("an address's refusal: %d %q; a sprayed password's %q", w.Code, w.Body, refusal)
			}
			sprays := ev.of(middleware.EventPasswordSprayed)
			if len(sprays) != 1 || sprays[0].Budget != "login-spray" || sprays[0].Account != "" || sprays[0].Limit != b || sprays[0].Until.IsZero() {
				t.Fatalf("events of a sprayed password: %+v, want one, of login-spray, without an account", sprays)
			}
			for i := range b {
				if w := login(h, sprayAddr(2000+i), fmt.Sprintf("other%d", i), other); w.Code != 401 {
					t.Fatalf("another password, attempt %d: %d", i, w.Code)
				}
			}
			if n := c.count(other); n != b {
				t.Fatalf("another password reached the check %d times, want %d", n, b)
			}
		})
	}
}

// An owner typing her own wrong password 10 times counts once against the
// password; a right password counts never.
func TestSprayOwnerRetypingCountsOnce(t *testing.T) {
	const old = "my-old-password"
	b := signInDefaults.Spray.Budget.Limit
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			c := newChecker(map[string]string{"alice": "right"})
			h := sprayGuard(t, open(t), middleware.SignInOptions{AccountIPFailures: limiter.Budget{Limit: 50, Window: 15 * time.Minute}}, c)
			for i := range 10 {
				if w := login(h, "192.0.2.7", "alice", old); w.Code != 401 {
					t.Fatalf("alice's try %d: %d", i+1, w.Code)
				}
			}
			// Her right password, as often as the budget and more, from
			// as many addresses: never counted.
			for i := range b + 5 {
				if w := login(h, sprayAddr(500+i), "alice", "right"); w.Code != 200 {
					t.Fatalf("alice's right password, sign-in %d: %d", i+1, w.Code)
				}
			}
			reached := 0
			for i := range 100 {
				if login(h, sprayAddr(i), fmt.Sprintf("user%d", i), old).Code == 401 {
					reached++
				}
			}
			if reached != b-1 {
				t.Fatalf("after alice's 10 tries, the password reached %d other accounts, want %d: her tries count once", reached, b-1)
			}
		})
	}
}

// A sprayed bucket refuses a right password too, but never from a known
// device: the owner with her cookie signs in.
func TestSprayKnownDeviceSignsIn(t *testing.T) {
	c := newChecker(map[string]string{"alice": "right"})
	h := sprayGuard(t, memStore(t, nil), middleware.SignInOptions{Device: middleware.DeviceOptions{Insecure: true}}, c)
	w := login(h, "192.0.2.1", "alice", "right")
	if w.Code != 200 {
		t.Fatalf("alice: %d", w.Code)
	}
	cookie := w.Result().Cookies()[0]
	for i := range 30 {
		login(h, sprayAddr(i), fmt.Sprintf("user%d", i), "right")
	}
	if w := login(h, "192.0.2.2", "alice", "right"); w.Code != 429 {
		t.Fatalf("alice's right password, sprayed, without her device: %d, want 429", w.Code)
	}
	r := httptest.NewRequest("POST", "/login", strings.NewReader("username=alice&password=right"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", "192.0.2.3")
	r.AddCookie(cookie)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("alice from her known device: %d, want 200", w.Code)
	}
}

// A request without a password is not counted per password, Off and
// a code guard count none, Field and Budget apply, and bad options are refused.
func TestSprayOptions(t *testing.T) {
	c := newChecker(nil)
	h := sprayGuard(t, memStore(t, nil), middleware.SignInOptions{}, c)
	for i := range 50 {
		if w := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), ""); w.Code != 401 {
			t.Fatalf("attempt %d without a password: %d", i, w.Code)
		}
	}
	h = sprayGuard(t, memStore(t, nil), middleware.SignInOptions{Spray: middleware.SprayOptions{Off: true}}, c)
	for i := range 50 {
		if w := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), "same"); w.Code != 401 {
			t.Fatalf("attempt %d, counting off: %d", i, w.Code)
		}
	}
	h = sprayGuard(t, memStore(t, nil), middleware.SignInOptions{Spray: middleware.SprayOptions{Field: "pw", Budget: limiter.Budget{Limit: 3, Window: time.Hour}}}, c)
	for i := range 5 {
		want := 401
		if i >= 3 {
			want = 429
		}
		if w := post(h, sprayAddr(i), "application/x-www-form-urlencoded", fmt.Sprintf("username=user%d&pw=same", i)); w.Code != want {
			t.Fatalf("field pw, attempt %d: %d, want %d", i, w.Code, want)
		}
	}
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	v, err := middleware.SignIn(handle(t, memStore(t, nil), "verify:"), middleware.SignInOptions{Code: true, Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	h = v.Wrap(c)
	for i := range 30 {
		if w := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), "same"); w.Code != 401 {
			t.Fatalf("code guard, attempt %d with one password field: %d; it counts codes, not passwords", i, w.Code)
		}
	}
	s := memStore(t, nil)
	for _, tc := range []struct {
		name string
		o    middleware.SignInOptions
		want error
	}{
		{"field is the account's", middleware.SignInOptions{Spray: middleware.SprayOptions{Field: "Username"}}, nil},
		{"bad budget", middleware.SignInOptions{Spray: middleware.SprayOptions{Budget: limiter.Budget{Limit: 5}}}, limiter.ErrInvalidBudget},
		{"short secret, devices off", middleware.SignInOptions{Device: middleware.DeviceOptions{Off: true, Secret: []byte("short")}}, nil},
	} {
		if _, err := middleware.SignIn(handle(t, s, fresh("bad")), tc.o); err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want an error matching %v", tc.name, err, tc.want)
		}
	}
}

// Two instances on one shared store, under one secret, spend one budget
// per password: of 200 concurrent attempts of one password on
// 200 accounts from 200 addresses, alternating between them, exactly the
// budget reach the check.
func TestSprayFleetExact(t *testing.T) {
	for _, tc := range []struct {
		name   string
		url    func(testing.TB) string
		secret []byte
	}{
		{"redis, a secret", servicetest.RedisURL, deviceSecret},
		{"postgres, a secret", migratedPostgres, deviceSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.url(t)
			storeSecret := make([]byte, 32)
			rand.Read(storeSecret)
			prefix := fresh("fleet")
			c := newChecker(nil)
			var hs [2]http.Handler
			for i := range hs {
				s := openShared(t, u, storeSecret)
				proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
				g, err := middleware.SignIn(handle(t, s, prefix), middleware.SignInOptions{Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}, Device: middleware.DeviceOptions{Secret: tc.secret}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { g.Close() })
				hs[i] = g.Wrap(c)
			}
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Go(func() { login(hs[i%2], sprayAddr(i), fmt.Sprintf("user%d", i), "Summer2026!") })
			}
			wg.Wait()
			if n, want := c.count("Summer2026!"), signInDefaults.Spray.Budget.Limit; n != want {
				t.Fatalf("%d of 200 concurrent attempts on two instances reached the check, want exactly %d", n, want)
			}
		})
	}
}

// An app that normalises passwords, as NIST recommends, takes a password
// in fullwidth letters for the same one in ASCII. The count does too by
// default (NFKC), so that the variants spend one budget; Normalize may
// count passwords as sent instead.
func TestSprayNormalizedVariants(t *testing.T) {
	const ascii, fullwidth = "Summer2026!", "Ｓｕｍｍｅｒ２０２６！"
	b := signInDefaults.Spray.Budget.Limit
	for _, tc := range []struct {
		name      string
		normalize func(string) string
		refused   bool
	}{
		{"NFKC by default", nil, true},
		{"as sent", func(s string) string { return s }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(nil)
			h := sprayGuard(t, memStore(t, nil), middleware.SignInOptions{Spray: middleware.SprayOptions{Normalize: tc.normalize}}, c)
			for i := range b {
				pw := ascii
				if i%2 == 1 {
					pw = fullwidth
				}
				if w := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), pw); w.Code != 401 {
					t.Fatalf("attempt %d: %d, want 401", i+1, w.Code)
				}
			}
			for _, pw := range []string{ascii, fullwidth} {
				w := login(h, sprayAddr(b), "someone", pw)
				if got := refusedBy(w, "login-spray"); got != tc.refused {
					t.Fatalf("%q after %d failures of it and its variant: %d %q, want refused by login-spray %v", pw, b, w.Code, w.Header().Get("RateLimit"), tc.refused)
				}
			}
		})
	}
}

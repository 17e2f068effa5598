package middleware_test

import (
	"bytes"
	"cmp"
	"context"
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
	"github.com/gatecount/gatecount/store/memory"
)

// passwords is a sign-in handler: alice's password is "right", bob's
// "battery"; anyone else is answered like a wrong password.
type passwords struct{ checks atomic.Int64 }

func (p *passwords) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.checks.Add(1)
	name, ok := middleware.Account(r)
	pw, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "password")
	if ok && err == nil && map[string]string{"alice": "right", "bob": "battery"}[name] == pw[0] && pw[0] != "" {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s"})
		w.WriteHeader(200)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(401)
	io.WriteString(w, `{"error":"invalid username or password"}`)
}

func signIn(t testing.TB, clk *clock.Fake, o middleware.SignInOptions) (*middleware.SignInGuard, *passwords, http.Handler) {
	t.Helper()
	s := memStore(t, clk)
	o.Logger = quiet
	if o.IP.TrustedProxies == nil {
		proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
		o.IP.TrustedProxies = proxies
	}
	g, err := middleware.SignIn(handle(t, s, "signin:"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	p := &passwords{}
	return g, p, g.Wrap(p)
}

func login(h http.Handler, ip, user, password string) *httptest.ResponseRecorder {
	form := url.Values{"username": {user}, "password": {password}}.Encode()
	r := httptest.NewRequest("POST", "/login", strings.NewReader(form))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", ip)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSignInConcurrentGuesses(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{})
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() { defer wg.Done(); login(h, "192.0.2.1", "alice", "wrong") }()
	}
	wg.Wait()
	if n := p.checks.Load(); n != 5 {
		t.Fatalf("%d of 200 concurrent guesses reached the password check, want 5", n)
	}
}

func TestSignInSuccessClearsFailures(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{})
	for range 4 {
		if c := login(h, "192.0.2.1", "alice", "wrong").Code; c != 401 {
			t.Fatal(c)
		}
	}
	w := login(h, "192.0.2.1", "Alice ", "right")
	if w.Code != 200 || w.Header().Get("Set-Cookie") == "" {
		t.Fatalf("right password after 4 failures: %d", w.Code)
	}
	for i := range 5 { // the slate is clean: five more failures are allowed
		if c := login(h, "192.0.2.1", "alice", "wrong").Code; c != 401 {
			t.Fatalf("failure %d after a success: %d", i+1, c)
		}
	}
	w = login(h, "192.0.2.1", "alice", "right")
	if w.Code != 429 || w.Header().Get("Set-Cookie") != "" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("blocked, right password: %d %v", w.Code, w.Header())
	}
	if p.checks.Load() != 10 {
		t.Fatalf("password checks %d, want 10", p.checks.Load())
	}
}

func TestSignInOnlyFailuresCount(t *testing.T) {
	_, _, h := signIn(t, nil, middleware.SignInOptions{})
	for i := range 50 {
		if c := login(h, "192.0.2.1", "alice", "right").Code; c != 200 {
			t.Fatalf("success %d: %d", i+1, c)
		}
	}
}

func TestSignInStuffingAndDistributedGuessing(t *testing.T) {
	_, _, h := signIn(t, nil, middleware.SignInOptions{})
	// One IP, 1,000 accounts, one leaked password each: the per-IP budget
	// stops it.
	passed := 0
	for i := range 1000 {
		if login(h, "198.51.100.1", fmt.Sprintf("user%d", i), fmt.Sprintf("leaked%d", i)).Code == 401 {
			passed++
		}
	}
	if passed != 100 {
		t.Fatalf("credential stuffing: %d tries reached the check, want 100", passed)
	}
	// 100 IPs, one account: the per-account budget stops it, while the
	// owner gets in from elsewhere while it has room.
	passed = 0
	for i := range 100 {
		if i == 10 {
			if c := login(h, "203.0.113.250", "alice", "right").Code; c != 200 {
				t.Fatalf("owner during the attack: %d", c)
			}
		}
		if login(h, fmt.Sprintf("203.0.113.%d", i), "alice", "guess").Code == 401 {
			passed++
		}
	}
	if passed != 20 {
		t.Fatalf("distributed guessing: %d guesses reached the check, want 20", passed)
	}
}

// The guard's answers for a known and an unknown account are the same, byte
// for byte, at every attempt count.
func TestSignInEnumerationSafe(t *testing.T) {
	clk := clock.NewFake(t0)
	_, _, h := signIn(t, clk, middleware.SignInOptions{})
	for i := range 8 {
		known := login(h, "192.0.2.1", "alice", "wrong")
		unknown := login(h, "192.0.2.2", "mallory", "wrong")
		if !bytes.Equal(dump(known), dump(unknown)) {
			t.Fatalf("attempt %d differs:\nknown:   %s\nunknown: %s", i+1, dump(known), dump(unknown))
		}
		if i >= 5 && known.Code != 429 {
			t.Fatalf("attempt %d: %d", i+1, known.Code)
		}
		clk.Advance(time.Second)
	}
}

func dump(w *httptest.ResponseRecorder) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n", w.Code)
	w.Header().Write(&b)
	b.Write(w.Body.Bytes())
	return b.Bytes()
}

func TestSignInHidesRemaining(t *testing.T) {
	_, _, h := signIn(t, nil, middleware.SignInOptions{})
	w := login(h, "192.0.2.1", "alice", "wrong")
	if rl := w.Header().Get("RateLimit"); strings.Contains(rl, "r=") || !strings.Contains(rl, "t=") {
		t.Errorf("RateLimit %q", rl)
	}
	if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `"login-account-ip";q=5;w=900`) {
		t.Errorf("RateLimit-Policy %q", p)
	}
}

// A name Normalize rejects is answered like a wrong password without the
// handler, and counted against the address budget only.
func TestSignInRejectedNameLikeWrongPassword(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{IPAttempts: limiter.Budget{Limit: 8, Window: time.Hour}})
	for i := range 6 {
		w := login(h, "192.0.2.1", "bad\x00name", "x")
		if w.Code != 401 || w.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(w.Header().Get("RateLimit"), `"login-ip"`) {
			t.Fatalf("attempt %d: %d %q", i+1, w.Code, w.Header())
		}
	}
	if p.checks.Load() != 0 {
		t.Fatalf("%d rejected names reached the handler", p.checks.Load())
	}
	// Never counted under an account: alice's budget from the address is
	// whole, while the address budget paid for the six.
	for i := range 2 {
		if w := login(h, "192.0.2.1", "alice", "wrong"); w.Code != 401 {
			t.Fatalf("alice's failure %d after rejected names: %d", i+1, w.Code)
		}
	}
	if w := login(h, "192.0.2.1", "alice", "right"); w.Code != 429 {
		t.Fatalf("address budget of 8 after 8 attempts: %d", w.Code)
	}
}

func TestSignInBackoff(t *testing.T) {
	clk := clock.NewFake(t0)
	_, _, h := signIn(t, clk, middleware.SignInOptions{
		AccountIPFailures: limiter.Budget{Limit: 2, Window: time.Minute},
		Backoff:           middleware.Backoff{Max: 10 * time.Minute},
	})
	wait := func() time.Duration {
		w := login(h, "192.0.2.1", "alice", "wrong")
		if w.Code != 429 {
			t.Fatalf("not locked out: %d", w.Code)
		}
		var s int
		fmt.Sscan(w.Header().Get("Retry-After"), &s)
		return time.Duration(s) * time.Second
	}
	// Lock-out k lasts min(1m × 2^(k-1), 10m).
	for k, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		login(h, "192.0.2.1", "alice", "wrong")
		login(h, "192.0.2.1", "alice", "wrong")
		if got := wait(); got != want {
			t.Fatalf("lock-out %d: wait %v, want %v", k+1, got, want)
		}
		clk.Advance(want)
	}
	// A success forgets the history.
	if c := login(h, "192.0.2.1", "alice", "right").Code; c != 200 {
		t.Fatal(c)
	}
	login(h, "192.0.2.1", "alice", "wrong")
	login(h, "192.0.2.1", "alice", "wrong")
	if got := wait(); got != time.Minute {
		t.Fatalf("after a success: wait %v", got)
	}
	if _, err := middleware.SignIn(handle(t, memStore(t, nil), "x:"), middleware.SignInOptions{Backoff: middleware.Backoff{Max: time.Second}}); err == nil {
		t.Error("Backoff.Max shorter than the window accepted")
	}
}

// countingReader counts the bytes read from a large body.
type countingReader struct {
	n, size int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.size {
		return 0, io.EOF
	}
	k := min(int64(len(p)), c.size-c.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	c.n += k
	return int(k), nil
}

func TestSignInHugeBodyReadOnlyToBound(t *testing.T) {
	g, _, _ := signIn(t, nil, middleware.SignInOptions{})
	body := &countingReader{size: 100 << 20}
	reached := false
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true; w.WriteHeader(401) }))
	r := httptest.NewRequest("POST", "/login", io.NopCloser(body))
	r.ContentLength = body.size
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if body.n > keyfunc.DefaultMaxBodyBytes+4096 {
		t.Fatalf("read %d bytes of a 100 MB body", body.n)
	}
	if reached || w.Code != 401 {
		t.Fatalf("too large a body: handler reached %v, status %d; want the Failed answer", reached, w.Code)
	}
}

// A guess whose client hung up before its check is never checked, and
// spends nothing; one whose client hangs up during the check is counted.
// Of 5 abandoned guesses none reaches the password check, then 5 guesses
// whose client hangs up as the check runs all do, and the next guess is
// refused: the budget of 5 is spent by the checked ones alone.
func TestSignInClientGoneNeverChecked(t *testing.T) {
	g, _, _ := signIn(t, nil, middleware.SignInOptions{})
	p := &passwords{}
	var hangUp context.CancelFunc // the client of the request being checked
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hangUp() // gone as the check runs: it goes on, and counts
		p.ServeHTTP(w, r)
	}))
	guess := func(password string) *httptest.ResponseRecorder {
		form := url.Values{"username": {"alice"}, "password": {password}}.Encode()
		ctx, cancel := context.WithCancel(context.Background())
		hangUp = cancel
		r := httptest.NewRequestWithContext(ctx, "POST", "/login", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.9:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range 5 {
		form := url.Values{"username": {"alice"}, "password": {"wrong"}}.Encode()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client hung up right after sending
		r := httptest.NewRequestWithContext(ctx, "POST", "/login", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "192.0.2.9:1"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if n := p.checks.Load(); n != 0 {
		t.Fatalf("%d of 5 guesses whose client was gone reached the password check, want 0", n)
	}
	for i := range 5 {
		if w := guess("wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d whose client hangs up during the check: %d, want 401 (checked)", i+1, w.Code)
		}
	}
	if w := guess("right"); w.Code != http.StatusTooManyRequests || p.checks.Load() != 5 {
		t.Fatalf("after 5 checked guesses: %d, %d checks; want 429 and 5", w.Code, p.checks.Load())
	}
}

// held is a shared store whose updates under the prefix "hold:" wait until
// open is closed, holding their slot of the store; entered hears of each.
type held struct {
	store.Backend
	entered chan struct{}
	open    chan struct{}
}

func (b *held) Shared() bool { return true }

func (b *held) Update(ctx context.Context, p string, k []string, a store.ApplyFunc) error {
	if p == "hold:" {
		b.entered <- struct{}{}
		<-b.open
	}
	return b.Backend.Update(ctx, p, k, a)
}

// heldStore returns a shared store of one slot, whose updates under the
// prefix "hold:" wait until release. take starts one such update and
// returns once it holds the slot. Every update is released and has
// returned by the end of the test.
func heldStore(t *testing.T) (s *store.Store, take, release func()) {
	t.Helper()
	o := store.Options{Logger: quiet, MaxInFlight: 1, Deadline: time.Hour}.WithDefaults()
	b := &held{Backend: memory.NewBackend(memory.Options{Store: o}), entered: make(chan struct{}, 1), open: make(chan struct{})}
	s = store.New(b, o)
	t.Cleanup(func() { s.Close() })
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var opened sync.Once
	release = func() { opened.Do(func() { close(b.open) }) }
	t.Cleanup(release) // registered after wg.Wait: runs before it
	hold := handle(t, s, "hold:")
	take = func() {
		wg.Go(func() {
			hold.Update(context.Background(), []string{"k"}, func(time.Time, []store.Entry) error { return nil })
		})
		<-b.entered
	}
	return s, take, release
}

// A successful sign-in's credit never holds its answer (nor so a server's
// shutdown, which waits for answers) behind a busy store: with the store's
// one slot taken by a call that does not return, bob's right password is
// answered 200 at once, and the credit waits in the limiter's outbox.
func TestSignInCreditNeverHoldsTheAnswer(t *testing.T) {
	s, take, release := heldStore(t)
	proxies, _ := keyfunc.ParseNetworks("127.0.0.1/32")
	g, err := middleware.SignIn(handle(t, s, "signin:"), middleware.SignInOptions{Logger: quiet, IP: keyfunc.IPOptions{TrustedProxies: proxies}, Device: middleware.DeviceOptions{Secret: deviceSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// bob's right password; meanwhile a call takes the store's slot
		take()
		middleware.ReportSuccess(r)
		w.WriteHeader(http.StatusOK)
	}))
	answered := make(chan int, 1)
	go func() { answered <- login(h, "192.0.2.1", "bob", "battery").Code }()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Errorf("bob's right password: %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		release()
		<-answered
		t.Fatal("bob's answer waited for his sign-in's credit while the store was busy")
	}
}

// A password in the query string is refused 400, before anything is
// counted or the handler runs, the count per password on or off: a
// password in a URL leaks into logs, proxies and histories, and a handler
// reading it there (FormValue) would check it uncounted.
func TestSignInPasswordInQuery(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spray middleware.SprayOptions
		query string
		want  int
	}{
		{"password", middleware.SprayOptions{}, "password=guess", 400},
		{"password, body without one", middleware.SprayOptions{}, "password=guess&username=alice", 400},
		{"letter case", middleware.SprayOptions{}, "PassWord=guess", 400},
		{"percent-encoded name", middleware.SprayOptions{}, "pass%77ord=guess", 400},
		{"empty value", middleware.SprayOptions{}, "password=", 400},
		{"count off", middleware.SprayOptions{Off: true}, "password=guess", 400},
		{"field of its own", middleware.SprayOptions{Field: "pw"}, "pw=guess", 400},
		{"another field than the password", middleware.SprayOptions{Field: "pw"}, "password=guess", 401},
		{"no password", middleware.SprayOptions{}, "next=%2Fhome", 401},
		{"no query", middleware.SprayOptions{}, "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, p, h := signIn(t, nil, middleware.SignInOptions{Spray: tc.spray, Device: middleware.DeviceOptions{Off: true}})
			body := "username=alice&" + cmp.Or(tc.spray.Field, "password") + "=wrong"
			if strings.Contains(tc.name, "body without one") {
				body = "username=alice"
			}
			r := httptest.NewRequest("POST", "/login?"+tc.query, strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.RemoteAddr = "127.0.0.1:4000"
			r.Header.Set("X-Forwarded-For", "192.0.2.7")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checks, want := p.checks.Load(), int64(0)
			if tc.want != 400 {
				want = 1
			}
			if w.Code != tc.want || checks != want {
				t.Fatalf("POST /login?%s: %d and %d checks, want %d and %d", tc.query, w.Code, checks, tc.want, want)
			}
			s, err := g.Show(t.Context(), "alice", netip.MustParseAddr("192.0.2.7"))
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range s.Budgets {
				if b.Budget == "login-ip" && b.Used != int(want) {
					t.Fatalf("the address's attempts: %d, want %d", b.Used, want)
				}
			}
		})
	}
}

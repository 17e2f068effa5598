package middleware_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

var deviceSecret = []byte("a device secret of at least 32 bytes")

// post sends body with Content-Type ct from the client at ip, through the
// trusted loopback proxy, with cookies.
func post(h http.Handler, ip, ct, body string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
	if ct != "" {
		r.Header.Set("Content-Type", ct)
	}
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", ip)
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func form(user, password string) string {
	return url.Values{"username": {user}, "password": {password}}.Encode()
}

// multipartForm is what a browser's FormData sends: the fields, and a file.
func multipartForm(fields ...string) (ct, body string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	fw, _ := mw.CreateFormFile("avatar", "me.png")
	fw.Write(bytes.Repeat([]byte{0x89}, 512))
	mw.Close()
	return mw.FormDataContentType(), b.String()
}

func deviceCookie(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == middleware.DefaultDeviceCookie {
			return c
		}
	}
	t.Fatalf("no device cookie in %q", w.Header()["Set-Cookie"])
	return nil
}

func retryAfter(t *testing.T, w *httptest.ResponseRecorder) int {
	t.Helper()
	n, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	return n
}

// Strangers who spend alice's per-account budget lock out every unknown
// client, but not alice's own device, even from a new address; a forged
// token is no token.
func TestSignInDeviceSurvivesStrangers(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}})
	w := login(h, "192.0.2.1", "alice", "right")
	if w.Code != 200 {
		t.Fatal(w.Code)
	}
	cookie := deviceCookie(t, w)
	for i := range 25 {
		w := login(h, fmt.Sprintf("198.51.100.%d", i), "alice", "guess")
		if want := map[bool]int{true: 401, false: 429}[i < 20]; w.Code != want {
			t.Fatalf("stranger %d: %d, want %d", i+1, w.Code, want)
		}
	}
	checks := p.checks.Load()
	if w := login(h, "203.0.113.7", "alice", "right"); w.Code != 429 {
		t.Fatalf("alice without her cookie during the attack: %d, want 429", w.Code)
	}
	if w := post(h, "203.0.113.7", ctForm, form("alice", "right"), cookie); w.Code != 200 {
		t.Fatalf("alice with her device cookie from a new address: %d", w.Code)
	}
	forged := *cookie
	i := len(forged.Value) / 2
	forged.Value = forged.Value[:i] + map[bool]string{true: "A", false: "B"}[forged.Value[i] != 'A'] + forged.Value[i+1:]
	if w := post(h, "203.0.113.8", ctForm, form("alice", "right"), &forged); w.Code == 200 {
		t.Fatalf("a cookie with one character changed: %d", w.Code)
	}
	// alice's token names alice only: with it, bob's attempts keep bob's
	// budgets, and a stranger's guess on alice's locked account is refused.
	if w := post(h, "203.0.113.9", ctForm, form("carol", "x"), cookie); w.Code != 401 || w.Header().Get("Set-Cookie") != "" {
		t.Fatalf("alice's cookie on another account: %d %q", w.Code, w.Header()["Set-Cookie"])
	}
	if n := p.checks.Load() - checks; n != 2 {
		t.Fatalf("%d attempts reached the handler after the attack, want 2 (alice's device, carol)", n)
	}
}

// A known device has a failures budget of its own, which its successes
// clear; it never spends the account's or the address's budgets.
func TestSignInDeviceBudget(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{
		Device:     middleware.DeviceOptions{Secret: deviceSecret, Failures: limiter.Budget{Limit: 3, Window: time.Hour}},
		IPAttempts: limiter.Budget{Limit: 5, Window: time.Hour},
	})
	cookie := deviceCookie(t, login(h, "192.0.2.1", "alice", "right"))
	device := func(password string, want int) {
		t.Helper()
		w := post(h, "192.0.2.1", ctForm, form("alice", password), cookie)
		if w.Code != want || !strings.Contains(w.Header().Get("RateLimit"), `"login-device"`) {
			t.Fatalf("device attempt with %q: %d %q, want %d", password, w.Code, w.Header().Get("RateLimit"), want)
		}
		if want == 200 {
			cookie = deviceCookie(t, w) // each success issues a fresh token
		}
	}
	device("typo", 401)
	device("typo", 401)
	device("right", 200) // clears the device's failures
	device("typo", 401)
	device("typo", 401)
	device("typo", 401)
	w := post(h, "192.0.2.1", ctForm, form("alice", "right"), cookie)
	if w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"login-device"`) || retryAfter(t, w) != 3600 {
		t.Fatalf("device over its budget: %d %q", w.Code, w.Header())
	}
	// The device's 7 attempts spent nothing of the address budget of 5 or
	// alice's account-and-address budget of 5: an unknown client from the
	// same address has them whole, but for the first sign-in.
	for i := range 4 {
		if w := login(h, "192.0.2.1", "alice", "wrong"); w.Code != 401 {
			t.Fatalf("unknown client's failure %d: %d", i+1, w.Code)
		}
	}
	if w := login(h, "192.0.2.1", "bob", "wrong"); w.Code != 429 {
		t.Fatalf("address budget of 5 after 5 unknown-client attempts: %d", w.Code)
	}
	if n := p.checks.Load(); n != 1+6+4 {
		t.Fatalf("%d handler runs", n)
	}
}

// The cookie is issued on a success only, with its attributes; never on a
// failure, a refusal, or when device cookies are off.
func TestSignInDeviceCookieIssued(t *testing.T) {
	_, _, h := signIn(t, nil, middleware.SignInOptions{Device: middleware.DeviceOptions{Cookie: "dev", Lifetime: 24 * time.Hour, Insecure: true}})
	if w := login(h, "192.0.2.1", "alice", "wrong"); w.Header().Get("Set-Cookie") != "" {
		t.Fatalf("cookie on a failure: %q", w.Header()["Set-Cookie"])
	}
	w := login(h, "192.0.2.1", "alice", "right")
	var dev *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == "dev" {
			dev = c
		}
	}
	if dev == nil || !dev.HttpOnly || dev.Secure || dev.SameSite != http.SameSiteLaxMode || dev.MaxAge != 86400 || strings.Contains(dev.Value, "alice") {
		t.Fatalf("device cookie %q", w.Header()["Set-Cookie"])
	}
	if len(w.Result().Cookies()) != 2 {
		t.Fatalf("the handler's own cookie lost: %q", w.Header()["Set-Cookie"])
	}
	_, _, off := signIn(t, nil, middleware.SignInOptions{Device: middleware.DeviceOptions{Off: true}})
	w = login(off, "192.0.2.1", "alice", "right")
	if w.Code != 200 || len(w.Result().Cookies()) != 1 || strings.Contains(w.Header().Get("RateLimit-Policy"), "device") {
		t.Fatalf("devices off: %d %q %q", w.Code, w.Header()["Set-Cookie"], w.Header().Get("RateLimit-Policy"))
	}
	if _, err := middleware.SignIn(handle(t, memStore(t, nil), "x:"), middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: []byte("short")}}); err == nil {
		t.Error("a short device secret accepted")
	}
}

// The handler reads the account the guard counted.
func TestSignInAccountForHandler(t *testing.T) {
	var got []string
	g, _, _ := signIn(t, nil, middleware.SignInOptions{})
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := middleware.Account(r)
		got = append(got, fmt.Sprintf("%s %v", a, ok))
		w.WriteHeader(401)
	}))
	ct, mp := multipartForm("username", "ＡＬＩＣＥ", "password", "x")
	post(h, "192.0.2.1", ctForm, form("  Alice", "x"))
	post(h, "192.0.2.1", ctJSON, `{"UserName":"alice","password":"x"}`)
	post(h, "192.0.2.1", ct, mp)
	if strings.Join(got, ",") != "alice true,alice true,alice true" {
		t.Fatalf("Account in the handler: %q", got)
	}
	if a, ok := middleware.Account(httptest.NewRequest("POST", "/", nil)); ok || a != "" {
		t.Errorf("Account outside a guard = %q, %v", a, ok)
	}
}

const (
	ctForm = "application/x-www-form-urlencoded"
	ctJSON = "application/json"
)

// After alice is refused from an address, no body the guard cannot read
// gets past it there, nor reaches the handler: each is counted against the
// address and answered like a wrong password.
func TestSignInUnreadableNeverReachesHandler(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{IPAttempts: limiter.Budget{Limit: 13, Window: time.Hour}})
	for range 5 {
		login(h, "192.0.2.1", "alice", "wrong")
	}
	if w := login(h, "192.0.2.1", "alice", "right"); w.Code != 429 {
		t.Fatalf("alice not refused: %d", w.Code)
	}
	checks := p.checks.Load()
	bodies := []struct{ ct, body string }{
		{ctForm, "username=alice&password=right&username=zzz"},
		{ctForm, "username=alice" + strings.Repeat("%20", 300) + "&password=right"},
		{ctForm, "username=alice&password=right&USERNAME=zzz"},
		{ctJSON, `{"username":"alice","password":"right","USERNAME":"x"}`},
		{"application/json; charset", `{"username":"alice","password":"right"}`},
		{"text/plain", "username=alice&password=right"},
		{"", "username=alice&password=right"},
		{ctJSON, `{"username":"alice","password":"right"`},
	}
	for i, b := range bodies {
		w := post(h, "192.0.2.1", b.ct, b.body)
		if w.Code != 401 || !strings.Contains(w.Header().Get("RateLimit"), `"login-ip"`) {
			t.Errorf("body %d %q: %d %q", i+1, b.body, w.Code, w.Header().Get("RateLimit"))
		}
	}
	if n := p.checks.Load() - checks; n != 0 {
		t.Fatalf("%d unreadable bodies reached the handler", n)
	}
	// 5 failures and 8 unreadable bodies spent the address budget of 13
	// (the refused attempt counted nothing).
	if w := post(h, "192.0.2.1", ctForm, "username=x&username=y"); w.Code != 429 {
		t.Fatalf("unreadable body past the address budget: %d", w.Code)
	}
}

// Multipart bodies (a browser's FormData) count under their account.
func TestSignInMultipart(t *testing.T) {
	_, _, h := signIn(t, nil, middleware.SignInOptions{})
	for i := range 5 {
		ct, body := multipartForm("username", "alice", "password", "wrong")
		if w := post(h, "192.0.2.1", ct, body); w.Code != 401 {
			t.Fatalf("multipart failure %d: %d", i+1, w.Code)
		}
	}
	ct, body := multipartForm("username", "alice", "password", "right")
	if w := post(h, "192.0.2.1", ct, body); w.Code != 429 {
		t.Fatalf("alice's right password, multipart, after 5 failures: %d", w.Code)
	}
	ct, body = multipartForm("username", "bob", "password", "battery")
	if w := post(h, "192.0.2.2", ct, body); w.Code != 200 {
		t.Fatalf("bob's right password, multipart: %d", w.Code)
	}
}

// A refusal's Retry-After is the latest reset among the refusing budgets:
// 5 wrong passwords for alice, then 95 other names, from one address.
func TestSignInRetryAfterLatestReset(t *testing.T) {
	clk := clock.NewFake(t0)
	_, _, h := signIn(t, clk, middleware.SignInOptions{})
	for range 5 {
		login(h, "192.0.2.1", "alice", "wrong")
	}
	clk.Advance(10 * time.Minute)
	for i := range 95 {
		login(h, "192.0.2.1", fmt.Sprintf("user%d", i), fmt.Sprintf("x%d", i))
	}
	// The account-and-address budget resets in 5 minutes, the address
	// budget in 50.
	w := login(h, "192.0.2.1", "alice", "right")
	if w.Code != 429 || retryAfter(t, w) != 3000 || !strings.HasPrefix(w.Header().Get("RateLimit"), `"login-ip";t=3000`) {
		t.Fatalf("alice: %d, Retry-After %q, RateLimit %q; want 429 after 3000 s, naming the address", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	clk.Advance(5 * time.Minute)
	if w := login(h, "192.0.2.1", "alice", "right"); w.Code != 429 || retryAfter(t, w) != 2700 {
		t.Fatalf("after the account-and-address window: %d %q", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Advance(45 * time.Minute)
	if w := login(h, "192.0.2.1", "alice", "right"); w.Code != 200 {
		t.Fatalf("after waiting Retry-After: %d", w.Code)
	}
}

// The fields of a sign-in that is not refused describe only the client's
// own budgets, never how others have used the account.
func TestSignInFieldsNoActivityLeak(t *testing.T) {
	clk := clock.NewFake(t0)
	_, _, h := signIn(t, clk, middleware.SignInOptions{Remaining: middleware.RemainingShown})
	for i := range 16 {
		login(h, fmt.Sprintf("198.51.100.%d", i), "bob", "guess")
	}
	clk.Advance(time.Minute)
	fresh := login(h, "203.0.113.1", "bob", "guess")
	other := login(h, "203.0.113.2", "nobody", "guess")
	if fresh.Code != 401 || fresh.Header().Get("RateLimit") != `"login-account-ip";r=4;t=900` {
		t.Fatalf("fresh address on bob: %d %q", fresh.Code, fresh.Header().Get("RateLimit"))
	}
	if !bytes.Equal(dump(fresh), dump(other)) {
		t.Fatalf("an attacked account's answer differs from another's:\n%s\n%s", dump(fresh), dump(other))
	}
	// The address's own budget is named once it has the least room.
	_, _, h2 := signIn(t, clk, middleware.SignInOptions{Remaining: middleware.RemainingShown, IPAttempts: limiter.Budget{Limit: 3, Window: time.Hour}})
	login(h2, "192.0.2.5", "x", "y")
	if w := login(h2, "192.0.2.5", "z", "y"); w.Header().Get("RateLimit") != `"login-ip";r=1;t=3600` {
		t.Fatalf("address budget: %q", w.Header().Get("RateLimit"))
	}
}

// A throttled send logs one line: its kind, the limiter and the budget,
// never the client or the destination.
func TestSendThrottledLogged(t *testing.T) {
	var logs bytes.Buffer
	s := memStore(t, nil)
	g, err := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := &mailer{}
	h := g.Wrap(m)
	for range 3 {
		reset(h, "192.0.2.44", "alice@example.com")
	}
	if logs.Len() != 0 {
		t.Fatalf("logs before throttling: %s", logs.String())
	}
	reset(h, "192.0.2.44", "alice@example.com")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "kind="+middleware.KindLimited) || !strings.Contains(lines[0], "limiter=send") ||
		!strings.Contains(lines[0], "budget=send-destination") || strings.Contains(lines[0], "192.0.2.44") || strings.Contains(lines[0], "alice") {
		t.Fatalf("throttled log: %q", lines)
	}
	if m.sent.Load() != 3 {
		t.Fatalf("sent %d", m.sent.Load())
	}
}

// Multipart requests reach the send handler with their destination.
func TestSendMultipart(t *testing.T) {
	s := memStore(t, nil)
	g, err := middleware.Send(handle(t, s, "reset:"), middleware.SendOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m := &mailer{}
	h := g.Wrap(m)
	for i := range 4 {
		ct, body := multipartForm("email", "Alice@Example.com")
		r := httptest.NewRequest("POST", "/password-reset", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		r.RemoteAddr = "192.0.2.45:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 202 {
			t.Fatalf("multipart reset %d: %d", i+1, w.Code)
		}
	}
	if m.sent.Load() != 3 {
		t.Fatalf("%d multipart resets sent, want the budget of 3", m.sent.Load())
	}
}

// 200 concurrent guesses with a stolen device cookie: exactly the device's
// budget reaches the password check. 200 concurrent unreadable bodies:
// none does, and exactly the address budget is spent on them.
func TestSignInDeviceConcurrentGuesses(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{IPAttempts: limiter.Budget{Limit: 50, Window: time.Hour}})
	cookie := deviceCookie(t, login(h, "192.0.2.1", "alice", "right"))
	before := p.checks.Load()
	var wg sync.WaitGroup
	var unreadable atomic.Int64
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				post(h, fmt.Sprintf("198.51.100.%d", i%250), ctForm, form("alice", "guess"), cookie)
				return
			}
			if w := post(h, "203.0.113.1", ctForm, "username=alice&username=bob"); w.Code == 401 {
				unreadable.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := p.checks.Load() - before; n != 5 {
		t.Fatalf("%d of 200 concurrent guesses with one device cookie reached the check, want 5", n)
	}
	if n := unreadable.Load(); n != 50 {
		t.Fatalf("%d of 200 concurrent unreadable bodies answered 401, want the address budget of 50", n)
	}
}

// The cookie is issued even when the handler reports success and writes
// nothing, or writes its body without a status.
func TestSignInDeviceCookieImplicitStatus(t *testing.T) {
	for _, write := range []bool{false, true} {
		g, _, _ := signIn(t, nil, middleware.SignInOptions{})
		h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			middleware.ReportSuccess(r)
			if write {
				fmt.Fprint(w, "ok")
			}
		}))
		w := login(h, "192.0.2.1", "alice", "x")
		if w.Code != 200 {
			t.Fatal(w.Code)
		}
		deviceCookie(t, w)
	}
}

package demotest

import (
	"bytes"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demo"
	"github.com/gatecount/gatecount/middleware"
)

// AttackEnv is the environment of the attack checks: the memory store, and
// clients told apart by X-Forwarded-For from the loopback proxy.
var AttackEnv = map[string]string{
	"TRUSTED_PROXIES": "127.0.0.1/32",
	"DEMO_USERS":      "alice:correct-horse,bob:battery-staple",
}

// deviceCookie is the sign-in guard's default device cookie name.
const deviceCookie = middleware.DefaultDeviceCookie

// PostBody sends body with Content-Type ct from the client at ip, with
// cookies.
func PostBody(t testing.TB, url, ip, ct, body string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("X-Forwarded-For", ip)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	return send(t, req)
}

// Multipart encodes fields as a browser's FormData does, with a file part
// for good measure, and returns its Content-Type and body.
func Multipart(fields ...string) (ct, body string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	fw, _ := mw.CreateFormFile("avatar", "me.png")
	fw.Write(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 64))
	mw.Close()
	return mw.FormDataContentType(), b.String()
}

const formType = "application/x-www-form-urlencoded"

func credentials(user, password string) string {
	return url.Values{"username": {user}, "password": {password}}.Encode()
}

// CheckDeviceCookies checks, against a server started with AttackEnv, that
// strangers who spend alice's per-account budget cannot lock out her own
// device. Alice signs in from one address and keeps her cookies, of which
// the device cookie is a __Host- one. 25 strangers' addresses spend her
// account's budget. Alice, from a new address with her cookies and her
// password, is signed in. So she is among 10 and up to MaxDeviceCookies
// planted __Host- device cookies, and among MaxDeviceCookies tossed
// gatecount-device ones, which are never read. With one more __Host- one
// planted, her token under the plain name, or one character of her token
// changed, she is not.
func CheckDeviceCookies(t *testing.T, s *Server) {
	res, body := PostBody(t, s.URL+"/login", "192.0.2.101", formType, credentials("alice", "correct-horse"))
	if res.StatusCode != 200 {
		t.Fatalf("alice's first sign-in: %d %s", res.StatusCode, body)
	}
	cookies := res.Cookies()
	var device *http.Cookie
	for _, c := range cookies {
		if c.Name == deviceCookie {
			device = c
		}
	}
	if device == nil || !device.HttpOnly || !device.Secure || device.SameSite != http.SameSiteLaxMode || strings.Contains(device.Value, "alice") {
		t.Fatalf("device cookie: %q", res.Header["Set-Cookie"])
	}
	for i := range 25 {
		res, _ := PostBody(t, s.URL+"/login", fmt.Sprintf("198.51.100.%d", i+1), formType, credentials("alice", "guess"))
		if want := map[bool]int{true: 401, false: 429}[i < 20]; res.StatusCode != want {
			t.Fatalf("stranger %d: %d, want %d", i+1, res.StatusCode, want)
		}
	}
	if res, _ := PostBody(t, s.URL+"/login", "203.0.113.50", formType, credentials("alice", "correct-horse")); res.StatusCode != 429 {
		t.Fatalf("alice without her cookies, after the attack: %d, want 429", res.StatusCode)
	}
	if res, body := PostBody(t, s.URL+"/login", "203.0.113.50", formType, credentials("alice", "correct-horse"), cookies...); res.StatusCode != 200 {
		t.Fatalf("alice with her cookies from a new address: %d %s", res.StatusCode, body)
	}
	plainName := &http.Cookie{Name: middleware.PlainDeviceCookie, Value: device.Value}
	if res, body := PostBody(t, s.URL+"/login", "203.0.113.52", formType, credentials("alice", "correct-horse"), plainName); res.StatusCode != 429 {
		t.Fatalf("alice with her token under the plain name %s, never read: %d %s, want 429", middleware.PlainDeviceCookie, res.StatusCode, body)
	}
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{
		{deviceCookie, 10, 200},
		{deviceCookie, middleware.MaxDeviceCookies - 1, 200},
		{deviceCookie, middleware.MaxDeviceCookies, 429},
		{middleware.PlainDeviceCookie, middleware.MaxDeviceCookies, 200},
	} {
		planted := []*http.Cookie{device}
		for i := range tc.n {
			planted = append(planted, &http.Cookie{Name: tc.name, Value: fmt.Sprintf("planted-%d", i)})
		}
		planted[0], planted[tc.n/2] = planted[tc.n/2], planted[0]
		if res, body := PostBody(t, s.URL+"/login", "203.0.113.53", formType, credentials("alice", "correct-horse"), planted...); res.StatusCode != tc.want {
			t.Fatalf("alice's device cookie among %d planted %s: %d %s, want %d", tc.n, tc.name, res.StatusCode, body, tc.want)
		}
	}
	for _, i := range []int{0, len(device.Value) / 2, len(device.Value) - 1} {
		changed := make([]*http.Cookie, 0, len(cookies))
		for _, c := range cookies {
			if c.Name == deviceCookie {
				cc := *c
				b := []byte(cc.Value)
				b[i] = map[bool]byte{true: 'B', false: 'A'}[b[i] == 'A']
				cc.Value = string(b)
				c = &cc
			}
			changed = append(changed, c)
		}
		if res, _ := PostBody(t, s.URL+"/login", "203.0.113.51", formType, credentials("alice", "correct-horse"), changed...); res.StatusCode == 200 {
			t.Fatalf("cookies with character %d of the device token changed: 200", i)
		}
	}
	if n := s.App.SignIns("alice"); n != 5 {
		t.Fatalf("alice signed in %d times, want 5", n)
	}
}

// CheckMultipart checks multipart/form-data sign-ins and resets against a
// server started with AttackEnv. 5 wrong multipart passwords for alice,
// then her right one, from one address, are refused. Bob's right password
// from another address signs him in. A multipart reset sends its code.
func CheckMultipart(t *testing.T, s *Server) {
	for i := range 5 {
		ct, body := Multipart("username", "alice", "password", "wrong")
		if res, _ := PostBody(t, s.URL+"/login", "192.0.2.111", ct, body); res.StatusCode != 401 {
			t.Fatalf("multipart failure %d: %d", i+1, res.StatusCode)
		}
	}
	ct, body := Multipart("username", "alice", "password", "correct-horse")
	if res, _ := PostBody(t, s.URL+"/login", "192.0.2.111", ct, body); res.StatusCode != 429 {
		t.Fatalf("alice's right password, multipart, after 5 failures: %d, want 429", res.StatusCode)
	}
	ct, body = Multipart("username", "bob", "password", "battery-staple")
	if res, b := PostBody(t, s.URL+"/login", "192.0.2.112", ct, body); res.StatusCode != 200 {
		t.Fatalf("bob's right password, multipart: %d %s", res.StatusCode, b)
	}
	ct, body = Multipart("email", "bob@example.com")
	if res, _ := PostBody(t, s.URL+"/password-reset", "192.0.2.113", ct, body); res.StatusCode != 202 || s.App.CodesSent("bob@example.com") != 1 {
		t.Fatalf("multipart reset: %d, %d codes sent", res.StatusCode, s.App.CodesSent("bob@example.com"))
	}
}

// UnreadableBodies are sign-in bodies the guard cannot read an account
// from, each naming alice and her right password to a lax reader.
var UnreadableBodies = []struct{ ContentType, Body string }{
	{formType, "username=alice&password=correct-horse&username=zzz"},
	{formType, "username=alice" + strings.Repeat("%20", 300) + "&password=correct-horse"},
	{"application/json", `{"username":"alice","password":"correct-horse","USERNAME":"x"}`},
	{"application/json; charset", `{"username":"alice","password":"correct-horse"}`},
}

// CheckUnreadable checks, against a server started with AttackEnv, that
// after alice is refused from an address, no body the guard cannot read
// gets a 200 from that address or reaches the password check.
func CheckUnreadable(t *testing.T, s *Server) {
	for range 5 {
		PostBody(t, s.URL+"/login", "192.0.2.121", formType, credentials("alice", "wrong"))
	}
	if res, _ := PostBody(t, s.URL+"/login", "192.0.2.121", formType, credentials("alice", "correct-horse")); res.StatusCode != 429 {
		t.Fatalf("alice not refused: %d", res.StatusCode)
	}
	_, wrong := PostBody(t, s.URL+"/login", "192.0.2.122", formType, credentials("alice", "wrong"))
	checks := s.App.PasswordChecks()
	for round := range 5 { // a wrong guess between them never helps either
		for i, b := range UnreadableBodies {
			res, body := PostBody(t, s.URL+"/login", "192.0.2.121", b.ContentType, b.Body)
			if res.StatusCode != 401 || body != wrong {
				t.Fatalf("round %d, body %d: %d %s; want the wrong-password answer %s", round+1, i+1, res.StatusCode, body, wrong)
			}
		}
		if res, _ := PostBody(t, s.URL+"/login", "192.0.2.121", formType, credentials("alice", "guess")); res.StatusCode != 429 {
			t.Fatalf("round %d: guess between unreadable bodies: %d", round+1, res.StatusCode)
		}
	}
	if n := s.App.PasswordChecks() - checks; n != 0 {
		t.Fatalf("%d unreadable bodies reached the password check", n)
	}
	if n := s.App.SignIns("alice"); n != 0 {
		t.Fatalf("alice signed in %d times", n)
	}
}

// CheckRetryAfter checks, against a server started with AttackEnv, that a
// refusal's Retry-After is the latest among the budgets that refuse. One
// address sends 5 wrong passwords for alice, and one for each of 95 other
// names, each with a password of its own. Then alice waits at least as long
// as the address budget refuses.
func CheckRetryAfter(t *testing.T, s *Server) {
	const ip = "192.0.2.131"
	for range 5 {
		PostBody(t, s.URL+"/login", ip, formType, credentials("alice", "wrong"))
	}
	for i := range 95 {
		PostBody(t, s.URL+"/login", ip, formType, credentials(fmt.Sprintf("user%d", i), fmt.Sprintf("x%d", i)))
	}
	res, _ := PostBody(t, s.URL+"/login", ip, formType, credentials("alice", "correct-horse"))
	aliceWait, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != 429 || err != nil || !strings.HasPrefix(res.Header.Get("RateLimit"), `"login-ip";`) {
		t.Fatalf("alice: %d, Retry-After %q, RateLimit %q", res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("RateLimit"))
	}
	// A name new to the address is refused by the address budget alone,
	// and asked later: its wait is the address budget's remaining time.
	res, _ = PostBody(t, s.URL+"/login", ip, formType, credentials("newcomer", "x"))
	ipWait, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != 429 || err != nil {
		t.Fatalf("address budget: %d %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if aliceWait < ipWait || aliceWait <= 900 {
		t.Fatalf("alice told to retry after %d s, while the address budget refuses for %d s", aliceWait, ipWait)
	}
}

// CheckForwarding checks the forwarding headers end to end: a malformed or
// oversized one from the trusted proxy is refused 400, never counted as the
// proxy's own address; only the configured header is read.
func CheckForwarding(t *testing.T, routes Routes) {
	get := func(url string, headers ...string) int {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		res, _ := send(t, req)
		return res.StatusCode
	}
	s := Start(t, routes, map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32", "RATE_LIMIT_HEALTH_PER_MINUTE": "3"})
	big := strings.Repeat("203.0.113.1, ", 700) + "198.51.100.1"
	for i, h := range [][]string{
		{"X-Forwarded-For", big},
		{"X-Forwarded-For", "198.51.100.1, unknown"},
		{"X-Forwarded-For", "198.051.100.1"},
	} {
		for range 5 {
			if c := get(s.URL+"/health", h...); c != 400 {
				t.Fatalf("bad header %d: %d, want 400", i+1, c)
			}
		}
	}
	if c := get(s.URL + "/health"); c != 200 {
		t.Fatalf("the proxy's own health check after bad headers: %d", c)
	}
	if res, _ := PostBody(t, s.URL+"/login", big, formType, credentials("alice", "correct-horse")); res.StatusCode != 400 {
		t.Fatalf("sign-in with an oversized X-Forwarded-For: %d", res.StatusCode)
	}
	// X-Forwarded-For by default: a Forwarded header is ignored, whatever
	// it says.
	for i := range 4 {
		c := get(s.URL+"/health", "X-Forwarded-For", "198.51.100.2", "Forwarded", fmt.Sprintf("for=192.0.2.%d", i))
		if want := map[bool]int{true: 200, false: 429}[i < 3]; c != want {
			t.Fatalf("default header, request %d: %d, want %d", i+1, c, want)
		}
	}
	// TRUSTED_PROXY_HEADER=Forwarded: a client's X-Forwarded-For is ignored.
	f := Start(t, routes, map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32", "TRUSTED_PROXY_HEADER": "Forwarded", "RATE_LIMIT_HEALTH_PER_MINUTE": "3"})
	for i := range 4 {
		c := get(f.URL+"/health", "Forwarded", "for=198.51.100.3", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i))
		if want := map[bool]int{true: 200, false: 429}[i < 3]; c != want {
			t.Fatalf("Forwarded header, request %d: %d, want %d", i+1, c, want)
		}
	}
	if c := get(f.URL+"/health", "Forwarded", "for=198.51.100.4;for=1.2.3.4"); c != 400 {
		t.Fatalf("malformed Forwarded: %d, want 400", c)
	}
}

// Logs collects a server's logs, as a slog handler's writer; safe for
// concurrent use.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the logs.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns every line logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines logged so far whose kind is kind.
func (l *Logs) Lines(kind string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "kind="+kind+" ") || strings.HasSuffix(line, "kind="+kind) {
			out = append(out, line)
		}
	}
	return out
}

// CheckResetLogs checks that an operator can tell password resets apart
// in the logs: a sent code names its account, a throttled request logs one
// line naming the limiter but neither address nor client, and an unknown
// address logs nothing.
func CheckResetLogs(t *testing.T, routes Routes) {
	logs := &Logs{}
	env := map[string]string{"TRUSTED_PROXIES": "127.0.0.1/32", "DEMO_USERS": AttackEnv["DEMO_USERS"]}
	s := StartLogged(t, routes, env, slog.New(slog.NewTextHandler(logs, nil)))
	for range 4 {
		Post(t, s.URL+"/password-reset", "192.0.2.141", url.Values{"email": {"alice@example.com"}})
	}
	Post(t, s.URL+"/password-reset", "192.0.2.142", url.Values{"email": {"ghost@example.com"}})
	sent := logs.Lines(demo.KindResetSent)
	if len(sent) != 3 {
		t.Fatalf("%d codes logged, want 3: %q", len(sent), sent)
	}
	for _, l := range sent {
		if !strings.Contains(l, "account=alice") {
			t.Fatalf("code sent without its account: %q", l)
		}
	}
	throttled := logs.Lines(middleware.KindLimited)
	if len(throttled) != 1 || !strings.Contains(throttled[0], "limiter=reset") || !strings.Contains(throttled[0], "budget=reset-destination") ||
		strings.Contains(throttled[0], "192.0.2") || strings.Contains(throttled[0], "alice") {
		t.Fatalf("throttled resets logged as %q", throttled)
	}
}

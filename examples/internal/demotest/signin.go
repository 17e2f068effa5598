package demotest

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// SignInEnv is the environment CheckSignIn wants: clients are told apart by
// X-Forwarded-For from the loopback proxy.
var SignInEnv = map[string]string{
	"TRUSTED_PROXIES": "127.0.0.1/32,::1/128",
	"DEMO_USERS":      "alice:correct-horse,bob:battery-staple,carol:hunter22",
}

// Post sends a form from the client at ip.
func Post(t testing.TB, url, ip string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", ip)
	return send(t, req)
}

func login(t testing.TB, s *Server, ip, user, password string) (*http.Response, string) {
	return Post(t, s.URL+"/login", ip, url.Values{"username": {user}, "password": {password}})
}

// CheckSignIn checks the sign-in and password-reset routes of a server
// started with SignInEnv and the default budgets (5 failures per account
// and IP, 20 per account, 100 attempts per IP), one subtest per attack.
func CheckSignIn(t *testing.T, s *Server) {
	for _, c := range []struct {
		name  string
		check func(*testing.T, *Server)
	}{
		{"concurrent guesses", checkConcurrentGuesses},
		{"success clears failures", checkSuccessClearsFailures},
		{"only failures count", checkOnlyFailuresCount},
		{"credential stuffing", checkCredentialStuffing},
		{"distributed guessing", checkDistributedGuessing},
		{"password spraying", checkPasswordSpray},
		{"enumeration", checkEnumeration},
		{"client gone", checkClientGone},
		{"password reset", checkPasswordReset},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, s) })
	}
}

// checkConcurrentGuesses: of 200 concurrent wrong passwords from one
// address, 5 reach the check, and then even the right one is refused.
func checkConcurrentGuesses(t *testing.T, s *Server) {
	before := s.App.PasswordChecks()
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() { defer wg.Done(); login(t, s, "192.0.2.1", "alice", "wrong") }()
	}
	wg.Wait()
	if n := s.App.PasswordChecks() - before; n != 5 {
		t.Fatalf("%d of 200 concurrent wrong passwords reached the check, want 5", n)
	}
	res, _ := login(t, s, "192.0.2.1", "alice", "correct-horse")
	if res.StatusCode != 429 || len(res.Cookies()) != 0 {
		t.Fatalf("blocked, right password: %d, cookies %v", res.StatusCode, res.Cookies())
	}
}

// checkSuccessClearsFailures: a sign-in clears the failures counted
// before it.
func checkSuccessClearsFailures(t *testing.T, s *Server) {
	for range 4 {
		if res, _ := login(t, s, "192.0.2.2", "bob", "wrong"); res.StatusCode != 401 {
			t.Fatal(res.StatusCode)
		}
	}
	res, _ := login(t, s, "192.0.2.2", "Bob", "battery-staple")
	if res.StatusCode != 200 || len(res.Cookies()) == 0 {
		t.Fatalf("right password: %d", res.StatusCode)
	}
	for i := range 5 {
		if res, _ := login(t, s, "192.0.2.2", "bob", "wrong"); res.StatusCode != 401 {
			t.Fatalf("failure %d after success: %d", i+1, res.StatusCode)
		}
	}
}

// checkOnlyFailuresCount: successful sign-ins are not throttled.
func checkOnlyFailuresCount(t *testing.T, s *Server) {
	for i := range 50 {
		if res, body := login(t, s, "192.0.2.3", "bob", "battery-staple"); res.StatusCode != 200 {
			t.Fatalf("success %d: %d %s", i+1, res.StatusCode, body)
		}
	}
}

// checkCredentialStuffing: one address trying 1,000 accounts, each with a
// leaked password of its own, reaches the check 100 times.
func checkCredentialStuffing(t *testing.T, s *Server) {
	passed := 0
	for i := range 1000 {
		if res, _ := login(t, s, "198.51.100.1", fmt.Sprintf("user%d", i), fmt.Sprintf("leaked%d", i)); res.StatusCode == 401 {
			passed++
		}
	}
	if passed != 100 {
		t.Fatalf("%d of 1,000 tries reached the check, want 100", passed)
	}
}

// checkDistributedGuessing: 100 addresses guessing one account reach the
// check 20 times, while its owner and other accounts still sign in.
func checkDistributedGuessing(t *testing.T, s *Server) {
	passed := 0
	for i := range 100 {
		if i == 10 {
			if res, _ := login(t, s, "203.0.113.250", "carol-owner", "x"); res.StatusCode != 401 {
				t.Fatalf("unrelated account: %d", res.StatusCode)
			}
			if res, _ := login(t, s, "2001:db8::1", "carol", "hunter22"); res.StatusCode != 200 {
				t.Fatalf("owner from elsewhere during the attack: %d", res.StatusCode)
			}
		}
		if res, _ := login(t, s, fmt.Sprintf("203.0.113.%d", i), "carol", "guess"); res.StatusCode == 401 {
			passed++
		}
	}
	if passed != 20 {
		t.Fatalf("%d of 100 guesses reached the check, want 20", passed)
	}
}

// checkPasswordSpray: one wrong password against 1,000 accounts from
// 1,000 addresses reaches the check 20 times (RATE_LIMIT_LOGIN_SPRAY's
// default), known and unknown accounts answered alike; another password
// is unaffected; an owner retyping her old password 10 times counts once.
func checkPasswordSpray(t *testing.T, s *Server) {
	const budget = 20
	before := s.App.PasswordChecks()
	users := []string{"alice", "bob"}
	answers := map[int]string{}
	login429 := func(t *testing.T, s *Server, user string) string {
		res, body := login(t, s, "10.99.0.1", user, "Spring2026!")
		res.Header.Del("Retry-After")
		return body + "\n" + shape(res.Header)
	}
	for i := range 1000 {
		user := fmt.Sprintf("spray%d", i)
		if i < len(users) {
			user = users[i] // known accounts among the first, with the unknown
		}
		res, body := login(t, s, fmt.Sprintf("10.%d.%d.1", i/256, i%256), user, "Spring2026!")
		want := 401
		if i >= budget {
			want = 429
		}
		if res.StatusCode != want {
			t.Fatalf("spray attempt %d (%s): %d %s, want %d", i+1, user, res.StatusCode, body, want)
		}
		res.Header.Del("Retry-After") // the seconds left may tick between attempts
		answer := body + "\n" + shape(res.Header)
		if first, ok := answers[want]; !ok {
			answers[want] = answer
		} else if answer != first {
			t.Fatalf("spray attempt %d (%s) answered apart from the first %d:\n%s\n%s", i+1, user, want, answer, first)
		}
	}
	if user := users[0]; login429(t, s, user) != answers[429] || login429(t, s, "nobody-sprayed") != answers[429] {
		t.Fatalf("a known or an unknown account answered the sprayed password apart")
	}
	if n := s.App.PasswordChecks() - before; n != budget {
		t.Fatalf("the sprayed password reached the check %d times, want %d", n, budget)
	}
	// The server has no secret, so buckets are fixed: Winter2026? shares
	// none with the other checks' passwords (Autumn2026? shares leaked56's,
	// and would be refused at its 20th account: the cost docs/signin.md tells).
	before = s.App.PasswordChecks()
	for i := range budget {
		if res, _ := login(t, s, fmt.Sprintf("10.9.%d.1", i), fmt.Sprintf("other%d", i), "Winter2026?"); res.StatusCode != 401 {
			t.Fatalf("another password, attempt %d: %d", i+1, res.StatusCode)
		}
	}
	if n := s.App.PasswordChecks() - before; n != budget {
		t.Fatalf("another password reached the check %d times, want %d", n, budget)
	}
	// Bob retypes an old password 10 times, from two addresses (5 each:
	// his per-address budget); it then reaches 19 other accounts.
	for i := range 10 {
		if res, _ := login(t, s, fmt.Sprintf("192.0.2.%d", 40+i/5), "bob", "old-battery"); res.StatusCode != 401 {
			t.Fatalf("bob's try %d: %d", i+1, res.StatusCode)
		}
	}
	reached := 0
	for i := range 50 {
		if res, _ := login(t, s, fmt.Sprintf("10.10.%d.1", i), fmt.Sprintf("spray%d", i), "old-battery"); res.StatusCode == 401 {
			reached++
		}
	}
	if reached != budget-1 {
		t.Fatalf("after bob's 10 tries, his old password reached %d other accounts, want %d: his tries count once", reached, budget-1)
	}
}

// checkEnumeration: a known and an unknown account are answered alike.
func checkEnumeration(t *testing.T, s *Server) {
	for i := range 7 {
		kres, kbody := login(t, s, "192.0.2.10", "alice", "wrong")
		ures, ubody := login(t, s, "192.0.2.11", "nobody-here", "wrong")
		if kres.StatusCode != ures.StatusCode || kbody != ubody || shape(kres.Header) != shape(ures.Header) {
			t.Fatalf("attempt %d: known %d %q %s; unknown %d %q %s", i+1, kres.StatusCode, kbody, shape(kres.Header), ures.StatusCode, ubody, shape(ures.Header))
		}
	}
}

// checkClientGone: a guess whose client hangs up reaches the password
// check only if counted. After 5 abandoned guesses, guesses that wait for
// their answer reach the check until 5 have in all, and the next is
// refused: the budget of 5 is spent by checked guesses alone.
func checkClientGone(t *testing.T, s *Server) {
	before := s.App.PasswordChecks()
	host := strings.TrimPrefix(s.URL, "http://")
	body := url.Values{"username": {"dave"}, "password": {"wrong"}}.Encode()
	for range 5 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 192.0.2.20\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.Close() // hang up without reading the answer
	}
	// An abandoned guess counted and not yet given back may refuse a
	// guess meanwhile: its server goroutine may not have run yet. The loop
	// goes on, a refusal costing nothing, until 5 were checked.
	for i := 0; s.App.PasswordChecks()-before < 5; i++ {
		if i == 500 {
			t.Fatalf("%d guesses reached the check after 500 more over 10 s, want 5", s.App.PasswordChecks()-before)
		}
		if res, _ := login(t, s, "192.0.2.20", "dave", "wrong"); res.StatusCode == http.StatusTooManyRequests {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n := s.App.PasswordChecks() - before; n != 5 {
		t.Fatalf("%d guesses reached the check, want the budget of 5", n)
	}
	if res, _ := login(t, s, "192.0.2.20", "dave", "wrong"); res.StatusCode != 429 {
		t.Fatalf("after 5 checked guesses: %d, want 429", res.StatusCode)
	}
}

// checkPasswordReset: reset answers do not tell accounts apart, and one
// destination gets at most its budget of codes.
func checkPasswordReset(t *testing.T, s *Server) {
	reset := func(ip, email string) (int, string) {
		res, body := Post(t, s.URL+"/password-reset", ip, url.Values{"email": {email}})
		return res.StatusCode, body
	}
	var answers []string
	for range 5 {
		for _, email := range []string{"alice@example.com", "ghost@example.com"} {
			c, b := reset("192.0.2.30", email)
			answers = append(answers, fmt.Sprint(c, b))
		}
	}
	for _, a := range answers {
		if a != answers[0] || !strings.HasPrefix(a, "202") {
			t.Fatalf("answers differ: %q", answers)
		}
	}
	if n := s.App.CodesSent("alice@example.com"); n != 3 {
		t.Fatalf("%d codes sent, want the budget of 3", n)
	}
	if c, _ := reset("192.0.2.31", "bob@example.com"); c != 202 || s.App.CodesSent("bob@example.com") != 1 {
		t.Fatalf("other destination: %d, sent %d", c, s.App.CodesSent("bob@example.com"))
	}
}

// shape is a response's header names and values, but for Date and the
// seconds left in RateLimit, which depend on when it was sent.
func shape(h http.Header) string {
	var lines []string
	for k, vs := range h {
		if k == "Date" {
			continue
		}
		for _, v := range vs {
			if k == "Ratelimit" {
				v, _, _ = strings.Cut(v, "t=")
			}
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

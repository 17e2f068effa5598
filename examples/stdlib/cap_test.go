package main

import (
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
)

// lastCode returns the last reset code logs hold for alice.
func lastCode(t *testing.T, logs *demotest.Logs) string {
	t.Helper()
	m := regexp.MustCompile(`kind=password-reset-sent account=alice code=([0-9a-f]+)`).FindAllStringSubmatch(logs.String(), -1)
	if len(m) == 0 {
		t.Fatal("no reset code logged for alice")
	}
	return m[len(m)-1][1]
}

// The acceptance of issue 28 for the cap on consecutive failures, on two
// servers over PostgreSQL, with the windowed budgets and the delays out of
// the way through the environment (as the README says): a guesser spread
// over 500 addresses reaches alice's password check exactly 100 times in a
// row, across both servers, and no more; a success in between restarts the
// count; alice's device still signs in at the cap, and without it she is
// refused until the reset flow (POST /password-reset, then
// /password-reset/complete with the code logged) calls Recovered.
func TestConsecutiveCapFleet(t *testing.T) {
	env := storeEnv(t, "postgres", "TRUSTED_PROXIES=127.0.0.1/32",
		"RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES=1000000",
		"RATE_LIMIT_LOGIN_ACCOUNT_FAILURES=1000000",
		"RATE_LIMIT_LOGIN_IP_ATTEMPTS=1000000",
		"RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS=1000000",
		"RATE_LIMIT_LOGIN_DELAY_AFTER=100")
	logs := &demotest.Logs{}
	servers, _ := startFleetLogged(t, 2, env, slog.New(slog.NewTextHandler(logs, nil)))
	checks := func() int {
		return servers[0].App.PasswordChecksFor("alice") + servers[1].App.PasswordChecksFor("alice")
	}
	login := func(s *demotest.Server, ip, password string, cookies ...*http.Cookie) *http.Response {
		body := url.Values{"username": {"alice"}, "password": {password}}.Encode()
		res, _ := demotest.PostBody(t, s.URL+"/login", ip, "application/x-www-form-urlencoded", body, cookies...)
		return res
	}
	guesser := func(i int) string { return freshV4("198.18.%d.%d")(i) }

	res := login(servers[0], "192.0.2.1", "correct-horse")
	var device *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == middleware.DefaultDeviceCookie {
			device = c
		}
	}
	if res.StatusCode != http.StatusOK || device == nil {
		t.Fatalf("alice's first sign-in: %d, device cookie %v", res.StatusCode, device)
	}

	// 60 failures, then a success: the count starts again.
	for i := range 60 {
		if c := login(servers[i%2], guesser(10_000+i), "wrong").StatusCode; c != http.StatusUnauthorized {
			t.Fatalf("guess %d before the success: %d, want 401", i+1, c)
		}
	}
	if c := login(servers[1], "192.0.2.2", "correct-horse").StatusCode; c != http.StatusOK {
		t.Fatalf("alice after 60 failures: %d, want 200", c)
	}

	// 500 guesses at once over 500 addresses and both servers.
	before := checks()
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[int]int{}
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := login(servers[i%2], guesser(i), "wrong").StatusCode
				mu.Lock()
				answers[c]++
				mu.Unlock()
			}
		}()
	}
	for i := range 500 {
		work <- i
	}
	close(work)
	wg.Wait()
	if n := checks() - before; n != middleware.MaxConsecutiveFailures || answers[http.StatusUnauthorized] != 100 || answers[http.StatusTooManyRequests] != 400 {
		t.Fatalf("500 guesses over 500 addresses: %d reached the check, answers %v; want 100 checked (401), 400 refused (429)", n, answers)
	}

	for i, s := range servers {
		if c := login(s, "192.0.2.3", "correct-horse").StatusCode; c != http.StatusTooManyRequests {
			t.Fatalf("alice without her device on server %d at the cap: %d, want 429", i+1, c)
		}
		if c := login(s, "203.0.113.9", "correct-horse", device).StatusCode; c != http.StatusOK {
			t.Fatalf("alice with her device on server %d at the cap: %d, want 200", i+1, c)
		}
	}
	if c := login(servers[0], "192.0.2.4", "correct-horse").StatusCode; c != http.StatusTooManyRequests {
		t.Fatalf("alice without her device after her device signed in: %d, want 429 until a recovery", c)
	}

	// The reset flow, on the server that sends the code.
	if res, body := demotest.Post(t, servers[0].URL+"/password-reset", "192.0.2.5", url.Values{"email": {"alice@example.com"}}); res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /password-reset: %d %s", res.StatusCode, body)
	}
	code := lastCode(t, logs)
	complete := func(code string) int {
		res, _ := demotest.Post(t, servers[0].URL+"/password-reset/complete", "192.0.2.5",
			url.Values{"email": {"alice@example.com"}, "code": {code}, "password": {"new-horse"}})
		return res.StatusCode
	}
	if c := complete("00000000"); c != http.StatusBadRequest {
		t.Fatalf("a wrong code: %d, want 400", c)
	}
	if c := login(servers[0], "192.0.2.6", "correct-horse").StatusCode; c != http.StatusTooManyRequests {
		t.Fatalf("alice without her device after a wrong code: %d, want 429", c)
	}
	if c := complete(code); c != http.StatusOK {
		t.Fatalf("the code logged: %d, want 200", c)
	}
	if c := complete(code); c != http.StatusBadRequest {
		t.Fatalf("the code a second time: %d, want 400", c)
	}
	if c := login(servers[0], "192.0.2.7", "new-horse").StatusCode; c != http.StatusOK {
		t.Fatalf("alice with her new password after the reset: %d, want 200", c)
	}
	// The other server learns of the recovery within limiter.AskAgain: a
	// failure there reaches the check again.
	c := login(servers[1], "192.0.2.8", "wrong").StatusCode
	for end := time.Now().Add(3 * limiter.AskAgain); c == http.StatusTooManyRequests && time.Now().Before(end); c = login(servers[1], "192.0.2.8", "wrong").StatusCode {
		time.Sleep(100 * time.Millisecond)
	}
	if c != http.StatusUnauthorized {
		t.Fatalf("a failure on server 2 after the recovery: %d, want 401 within %v", c, 3*limiter.AskAgain)
	}
}

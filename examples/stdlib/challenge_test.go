package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/middleware/challenge"
)

// challengeBits is the base difficulty of the fleet's puzzles, low so
// that the test solves a hundred of them in moments.
const challengeBits = 8

// challengeOf returns the puzzle of a challenged refusal.
func challengeOf(res *http.Response, body string) (token string, bits int, ok bool) {
	var p struct {
		Challenge *struct {
			Scheme, Token string
			Bits          int
		}
	}
	if res.StatusCode != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &p) != nil || p.Challenge == nil ||
		p.Challenge.Scheme != challenge.ProofOfWorkScheme || res.Header.Get(challenge.Header) == "" {
		return "", 0, false
	}
	return p.Challenge.Token, p.Challenge.Bits, true
}

// varying matches what two answers may differ in and still be alike: a
// puzzle's random token, and the seconds left of a window.
var varying = regexp.MustCompile(`[A-Za-z0-9_-]{60,}|\b[0-9]+\b`)

// transcript keeps the answers of a run, status, headers and body, with
// what varies between runs masked.
type transcript []string

func (tr *transcript) add(res *http.Response, body string) {
	var keys []string
	for k := range res.Header {
		if k != "Date" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d", res.StatusCode)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n%s: %s", k, strings.Join(res.Header[k], ", "))
	}
	b.WriteString("\n\n" + body)
	*tr = append(*tr, varying.ReplaceAllString(b.String(), "N"))
}

// The acceptance of the challenge, on two servers over PostgreSQL with
// RATE_LIMIT_LOGIN_CHALLENGE=pow: strangers spend alice's budget; alice,
// from a fresh address without a device cookie, is challenged, solves the
// puzzle as the served script does, and signs in; her solution replayed
// on the other server is refused; a guesser who solves every puzzle sees
// the difficulty double with each guess, in hashes per guess, and reaches
// the password check only as often as the challenge budget allows. An
// unknown account gets the same answers throughout. Delays are off: a
// challenged attempt waits out the delay ladder as any attempt does
// (middleware's TestSignInChallengeCapNoSooner), and this test runs in
// real time.
func TestChallengeFleet(t *testing.T) {
	env := storeEnv(t, "postgres", "TRUSTED_PROXIES=127.0.0.1/32", "RATE_LIMIT_LOGIN_DELAY_AFTER=100",
		"RATE_LIMIT_LOGIN_CHALLENGE=pow", fmt.Sprintf("RATE_LIMIT_LOGIN_CHALLENGE_BITS=%d", challengeBits))
	servers, _ := startFleet(t, 2, env)
	const budget = 10 // RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS, by default
	checks := func(user string) int {
		return servers[0].App.PasswordChecksFor(user) + servers[1].App.PasswordChecksFor(user)
	}
	login := func(s *demotest.Server, ip, user, password, answer string) (*http.Response, string) {
		v := url.Values{"username": {user}, "password": {password}}
		if answer != "" {
			v.Set(challenge.AnswerField, answer)
		}
		return demotest.PostBody(t, s.URL+"/login", ip, "application/x-www-form-urlencoded", v.Encode())
	}
	solve := func(token string, bits int) (string, int) {
		a, n, err := challenge.Solve(context.Background(), token, bits)
		if err != nil {
			t.Fatal(err)
		}
		return a, n
	}
	known, unknown := &transcript{}, &transcript{}
	runs := []struct {
		user string
		tr   *transcript
	}{{"alice", known}, {"nobody", unknown}}

	// Strangers spend each account's budget (20 an hour), on both servers.
	for _, run := range runs {
		for i := range 20 {
			res, body := login(servers[i%2], freshV4("198.18.%d.%d")(i), run.user, "wrong", "")
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("stranger %d on %s: %d", i, run.user, res.StatusCode)
			}
			run.tr.add(res, body)
		}
		res, body := login(servers[1], "192.0.2.50", run.user, "wrong", "")
		run.tr.add(res, body)
		if _, _, ok := challengeOf(res, body); !ok {
			t.Fatalf("%s after 20 strangers: %d %s, want a challenge", run.user, res.StatusCode, body)
		}
	}

	// Alice, fresh address, no cookie: challenged, solves it, signs in.
	res, body := login(servers[0], "192.0.2.7", "alice", "correct-horse", "")
	token, bits, ok := challengeOf(res, body)
	if !ok || bits != challengeBits {
		t.Fatalf("alice from a fresh address: %d %s, want a challenge of %d bits", res.StatusCode, body, challengeBits)
	}
	answer, _ := solve(token, bits)
	if res, body := login(servers[0], "192.0.2.7", "alice", "correct-horse", answer); res.StatusCode != http.StatusOK {
		t.Fatalf("alice with her answer: %d %s, want 200", res.StatusCode, body)
	}
	if n := servers[0].App.SignIns("alice"); n != 1 {
		t.Fatalf("alice signed in %d times, want 1", n)
	}
	// The same answer on the other server: refused, and no check.
	before := checks("alice")
	res, body = login(servers[1], "192.0.2.7", "alice", "correct-horse", answer)
	if _, _, ok := challengeOf(res, body); !ok || checks("alice") != before {
		t.Fatalf("alice's answer replayed on the other server: %d %s, want a new challenge and no check", res.StatusCode, body)
	}

	// A guesser who solves every puzzle, from a fresh address each guess:
	// each failure adds a bit. At each difficulty the test solves several
	// puzzles, to measure the hashes a guess costs.
	const samples = 8
	for _, run := range runs {
		before := checks(run.user)
		var perGuess []float64
		for g := 0; ; g++ {
			ip := freshV4("198.19.%d.%d")(g)
			res, body := login(servers[g%2], ip, run.user, "wrong", "")
			run.tr.add(res, body)
			_, bits, ok := challengeOf(res, body)
			if !ok {
				if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(res.Header.Get("RateLimit"), `"login-account"`) {
					t.Fatalf("%s, guess %d: %d %q, want a challenge, or the refusal of login-account once the challenges are spent", run.user, g, res.StatusCode, res.Header)
				}
				break
			}
			if bits != challengeBits+g {
				t.Fatalf("%s, guess %d: a puzzle of %d bits, want %d", run.user, g, bits, challengeBits+g)
			}
			hashes := 0
			var answer string
			for range samples {
				res, body := login(servers[g%2], ip, run.user, "wrong", "")
				token, bits, _ := challengeOf(res, body)
				a, n := solve(token, bits)
				hashes += n
				answer = a
			}
			perGuess = append(perGuess, float64(hashes)/samples)
			res, body = login(servers[(g+1)%2], ip, run.user, "wrong", answer)
			run.tr.add(res, body)
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s, guess %d with its answer: %d %s, want 401 from the check", run.user, g, res.StatusCode, body)
			}
		}
		if n := checks(run.user) - before; n != budget || len(perGuess) != budget {
			t.Fatalf("%s: %d guesses reached the check, %d puzzles solved; want %d of each", run.user, n, len(perGuess), budget)
		}
		// Expected hashes double with each bit: 2^8 for the first, 2^17 for
		// the tenth; the mean of 8 samples is well within a factor of 4.
		first, last := perGuess[0], perGuess[budget-1]
		if last/first < float64(uint(1)<<(budget-1))/8 {
			t.Fatalf("%s: hashes per guess %v, want the last about 2^%d times the first", run.user, perGuess, budget-1)
		}
		t.Logf("%s: mean hashes per guess, one bit more each: %.0f", run.user, perGuess)
	}

	// Known and unknown accounts: the same answers throughout.
	if len(*known) != len(*unknown) {
		t.Fatalf("%d answers for alice, %d for an unknown account", len(*known), len(*unknown))
	}
	for i := range *known {
		if (*known)[i] != (*unknown)[i] {
			t.Fatalf("answer %d: alice\n%s\nunknown\n%s", i, (*known)[i], (*unknown)[i])
		}
	}
}

// The sign-in page loads the solver, which is the script the guard's
// proof of work serves.
func TestChallengeSignInPage(t *testing.T) {
	s := demotest.Start(t, routes, storeEnv(t, "memory", "RATE_LIMIT_LOGIN_CHALLENGE=pow"))
	get := func(path string) (*http.Response, string) {
		res, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, page := get("/login")
	if res.StatusCode != 200 || !strings.Contains(page, `src="/login/pow.js"`) || !strings.Contains(page, challenge.AnswerField) {
		t.Fatalf("GET /login: %d %s", res.StatusCode, page)
	}
	res, script := get("/login/pow.js")
	if res.StatusCode != 200 || !strings.Contains(script, "function gatecountSolve(token, bits)") {
		t.Fatalf("GET /login/pow.js: %d %q", res.StatusCode, script)
	}
}

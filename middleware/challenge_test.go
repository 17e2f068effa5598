package middleware_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store"
)

var powSecret = []byte("a proof-of-work secret of 32 bytes or more")

// challengeOptions are a guard's with a fast proof of work: alice's
// account budget is 3 an hour, her challenged attempts 4.
func challengeOptions(t testing.TB, ev *events) middleware.SignInOptions {
	t.Helper()
	pow, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: powSecret, Bits: 4, MaxBits: 12})
	if err != nil {
		t.Fatal(err)
	}
	return middleware.SignInOptions{
		AccountIPFailures: limiter.Budget{Limit: 3, Window: 15 * time.Minute},
		AccountFailures:   limiter.Budget{Limit: 3, Window: time.Hour},
		IPAttempts:        limiter.Budget{Limit: 50, Window: time.Hour},
		Device:            middleware.DeviceOptions{Secret: deviceSecret},
		Challenge:         pow,
		ChallengeBudget:   limiter.Budget{Limit: 4, Window: time.Hour},
		OnEvent:           ev.on,
	}
}

// puzzle is a challenge as a client reads it from a 429.
type puzzle struct {
	Scheme string `json:"scheme"`
	Token  string `json:"token"`
	Bits   int    `json:"bits"`
}

// challengeOf returns the challenge of w, and whether it has one, after
// checking the header and the body say the same.
func challengeOf(t *testing.T, w *httptest.ResponseRecorder) (puzzle, bool) {
	t.Helper()
	var body struct {
		Status    int     `json:"status"`
		Challenge *puzzle `json:"challenge"`
	}
	h := w.Header().Get(challenge.Header)
	if w.Code != 429 || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Challenge == nil {
		if h != "" {
			t.Fatalf("%d with %s %q but no challenge in its body %q", w.Code, challenge.Header, h, w.Body)
		}
		return puzzle{}, false
	}
	want := `scheme="` + body.Challenge.Scheme + `", token="` + body.Challenge.Token + `", bits=` + itoa(body.Challenge.Bits)
	if h != want || w.Header().Get("Content-Type") != "application/problem+json" || body.Status != 429 {
		t.Fatalf("challenge header %q, body %s; want the header %q of the body's challenge", h, w.Body, want)
	}
	return *body.Challenge, true
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// solve answers p with the Go solver, and returns the answer and the
// hashes it took.
func solve(t *testing.T, p puzzle) (string, int) {
	t.Helper()
	a, n, err := challenge.Solve(context.Background(), p.Token, p.Bits)
	if err != nil {
		t.Fatal(err)
	}
	return a, n
}

// answer posts alice's attempt with an answer in the header.
func answer(h http.Handler, ip, user, password, a string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/login", strings.NewReader(form(user, password)))
	r.Header.Set("Content-Type", formCT)
	r.Header.Set(challenge.AnswerHeader, a)
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", ip)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSignInChallenge(t *testing.T) {
	var ev events
	g, p, h := signIn(t, nil, challengeOptions(t, &ev))
	alice := func(ip, pw string) *httptest.ResponseRecorder { return post(h, ip, formCT, form("alice", pw)) }

	// Strangers spend alice's budget; then each is challenged.
	for i := range 3 {
		if w := alice(guessAddr(i), "wrong"); w.Code != 401 {
			t.Fatalf("stranger %d: %d", i, w.Code)
		}
	}
	if got := ev.of(middleware.EventChallengeIssued); len(got) != 1 || got[0].Account != "alice" || got[0].Budget != "login-challenge" || got[0].Until.IsZero() {
		t.Fatalf("issued events %+v, want one for alice until her budget's reset", got)
	}
	w := alice("203.0.113.7", "right")
	c, ok := challengeOf(t, w)
	if !ok || c.Scheme != "pow" || c.Bits != 4 || retryAfter(t, w) < 3000 || !strings.Contains(w.Header().Get("RateLimit"), `"login-account"`) {
		t.Fatalf("alice from a fresh address: %d %q %s, want a 4-bit challenge with login-account's Retry-After", w.Code, w.Header(), w.Body)
	}

	// Her answer gets her in, with a device cookie, once.
	a, _ := solve(t, c)
	checks := p.checks.Load()
	w = answer(h, "203.0.113.7", "alice", "right", a)
	if w.Code != 200 || p.checks.Load() != checks+1 {
		t.Fatalf("alice with her answer: %d, want 200 from the handler", w.Code)
	}
	deviceCookie(t, w)
	if got := ev.of(middleware.EventChallengePassed); len(got) != 1 || got[0].Account != "alice" || got[0].Failures != 0 {
		t.Fatalf("passed events %+v, want one for alice", got)
	}
	s, _ := g.Show(context.Background(), "alice", netip.MustParseAddr("203.0.113.7"))
	ipUsed := s.Budgets[3].Used
	w = answer(h, "203.0.113.7", "alice", "right", a)
	if _, ok := challengeOf(t, w); !ok || p.checks.Load() != checks+1 {
		t.Fatalf("the same answer again: %d %s, want a new challenge and no check", w.Code, w.Body)
	}
	if s, _ := g.Show(context.Background(), "alice", netip.MustParseAddr("203.0.113.7")); s.Budgets[3].Used != ipUsed+1 {
		t.Fatalf("a replayed answer used %d of the address budget, want 1, as a wrong password", s.Budgets[3].Used-ipUsed)
	}
	// An answer for her is no answer for bob, nor from another address.
	c, _ = challengeOf(t, alice("203.0.113.8", "right"))
	a, _ = solve(t, c)
	if w := answer(h, "203.0.113.9", "alice", "right", a); w.Code != 429 {
		t.Fatalf("alice's answer from another address: %d, want 429", w.Code)
	}
	// Bob's budget is not spent: his attempt is counted as one without an
	// answer, after the refused answer cost his address an attempt.
	if w := answer(h, "203.0.113.8", "bob", "wrong", a); w.Code != 401 {
		t.Fatalf("alice's answer for bob: %d, want bob's attempt checked", w.Code)
	}
	if s, _ := g.Show(context.Background(), "bob", netip.MustParseAddr("203.0.113.8")); s.Budgets[3].Used != 2 {
		t.Fatalf("alice's answer for bob used %d of his address budget, want 2", s.Budgets[3].Used)
	}

	// A guesser who solves each puzzle: each failure adds a bit, and no
	// more than the challenge budget (4, one spent on nothing above)
	// reaches the check.
	checks = p.checks.Load()
	var bits []int
	for i := range 10 {
		ip := guessAddr(100 + i)
		c, ok := challengeOf(t, alice(ip, "guess"))
		if !ok {
			if w := alice(ip, "guess"); w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"login-account"`) {
				t.Fatalf("guess %d without a challenge: %d %q, want the refusal of login-account", i, w.Code, w.Header())
			}
			break
		}
		bits = append(bits, c.Bits)
		a, _ := solve(t, c)
		if w := answer(h, ip, "alice", "guess", a); w.Code != 401 {
			t.Fatalf("guess %d with its answer: %d, want 401", i, w.Code)
		}
	}
	if n := p.checks.Load() - checks; n != 4 || len(bits) != 4 || bits[0] != 4 || bits[3] != 7 {
		t.Fatalf("%d guesses reached the check with puzzles of %v bits, want 4 of 4 to 7 bits", n, bits)
	}
	if got := ev.of(middleware.EventChallengeFailed); len(got) != 4 || got[3].Failures != 4 || got[3].Limit != 4 {
		t.Fatalf("failed events %+v, want 4, the last at 4 of 4", got)
	}
	// Unlock lifts the account's budgets and its challenges.
	if err := g.Unlock(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if w := alice("203.0.113.10", "right"); w.Code != 200 {
		t.Fatalf("alice after Unlock: %d", w.Code)
	}
}

// The client's own budgets, the delay and the cap refuse without a
// challenge: only the account's windowed budget is challenged.
func TestSignInChallengeOnlyForTheAccount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(o *middleware.SignInOptions)
		spend func(h http.Handler)
		field string
		want  bool
	}{
		{"account budget", nil, func(h http.Handler) {
			for i := range 3 {
				post(h, guessAddr(i), formCT, form("alice", "wrong"))
			}
		}, "login-account", true},
		{"delay", func(o *middleware.SignInOptions) {
			o.AccountFailures = limiter.Budget{Limit: 1000, Window: time.Hour}
			o.Delay.After = 2
		}, func(h http.Handler) {
			for i := range 3 {
				post(h, guessAddr(i), formCT, form("alice", "wrong"))
			}
		}, "login-delay", false},
		{"account from this address", func(o *middleware.SignInOptions) {
			o.AccountFailures = limiter.Budget{Limit: 1000, Window: time.Hour}
		}, func(h http.Handler) {
			for range 3 {
				post(h, "203.0.113.7", formCT, form("alice", "wrong"))
			}
		}, "login-account-ip", false},
		{"address", func(o *middleware.SignInOptions) { o.IPAttempts = limiter.Budget{Limit: 3, Window: time.Hour} }, func(h http.Handler) {
			for _, u := range []string{"bob", "carol", "dave"} {
				post(h, "203.0.113.7", formCT, form(u, "wrong"))
			}
		}, "login-ip", false},
		{"cap", func(o *middleware.SignInOptions) {
			o.AccountFailures = limiter.Budget{Limit: 1000, Window: time.Hour}
			o.ConsecutiveFailures, o.Delay.After = 3, 3
		}, func(h http.Handler) {
			for i := range 3 {
				post(h, guessAddr(i), formCT, form("alice", "wrong"))
			}
		}, "login-consecutive", false},
		{"address, and the account's budget", func(o *middleware.SignInOptions) {
			o.IPAttempts = limiter.Budget{Limit: 4, Window: 2 * time.Hour}
		}, func(h http.Handler) {
			for i := range 3 {
				post(h, guessAddr(i), formCT, form("alice", "wrong"))
			}
			for _, u := range []string{"bob", "carol", "dave", "erin"} {
				post(h, "203.0.113.7", formCT, form(u, "wrong-"+u))
			}
		}, "login-ip", false},
		{"password", func(o *middleware.SignInOptions) {
			o.Spray.Budget = limiter.Budget{Limit: 3, Window: 2 * time.Hour}
		}, func(h http.Handler) {
			for i, u := range []string{"alice", "alice", "alice", "bob", "carol"} {
				post(h, guessAddr(i), formCT, form(u, "sprayed"))
			}
		}, "login-spray", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events
			o := challengeOptions(t, &ev)
			if tc.set != nil {
				tc.set(&o)
			}
			_, _, h := signIn(t, nil, o)
			tc.spend(h)
			pw := "right"
			if tc.field == "login-spray" { // alice's budget and the password's are both spent
				pw = "sprayed"
			}
			w := post(h, "203.0.113.7", formCT, form("alice", pw))
			if _, ok := challengeOf(t, w); ok != tc.want || w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"`+tc.field+`"`) {
				t.Fatalf("%d %q %s: want 429 of %s, challenged %v", w.Code, w.Header(), w.Body, tc.field, tc.want)
			}
		})
	}
}

// The answer may come in the body, as a form's hidden input does; a
// forged one costs the address an attempt and gets a new challenge.
func TestSignInChallengeAnswerInForm(t *testing.T) {
	var ev events
	g, _, h := signIn(t, nil, challengeOptions(t, &ev))
	for i := range 3 {
		post(h, guessAddr(i), formCT, form("alice", "wrong"))
	}
	c, ok := challengeOf(t, post(h, "203.0.113.7", formCT, form("alice", "right")))
	if !ok {
		t.Fatal("no challenge")
	}
	a, _ := solve(t, c)
	body := func(answer string) string {
		return url.Values{"username": {"alice"}, "password": {"right"}, challenge.AnswerField: {answer}}.Encode()
	}
	for i, forged := range []string{"nonsense", a[:len(a)-1] + "x", unsolved(c)} {
		if _, ok := challengeOf(t, post(h, "203.0.113.7", formCT, body(forged))); !ok {
			t.Fatalf("forged answer %d: want a challenge", i)
		}
	}
	if s, _ := g.Show(context.Background(), "alice", netip.MustParseAddr("203.0.113.7")); s.Budgets[3].Used != 3 {
		t.Fatalf("address budget used %d, want 3: one for each forgery (a refused attempt costs nothing)", s.Budgets[3].Used)
	}
	if w := post(h, "203.0.113.7", formCT, body(a)); w.Code != 200 {
		t.Fatalf("alice with her answer %q in the form: %d %s %+v", a, w.Code, w.Body, ev.list)
	}
	// In a JSON body, from another address.
	c, ok = challengeOf(t, post(h, "203.0.113.8", formCT, form("alice", "right")))
	if !ok {
		t.Fatal("no challenge from another address")
	}
	a, _ = solve(t, c)
	js, _ := json.Marshal(map[string]string{"username": "alice", "password": "right", challenge.AnswerField: a})
	if w := post(h, "203.0.113.8", "application/json", string(js)); w.Code != 200 {
		t.Fatalf("alice with her answer in JSON: %d %s", w.Code, w.Body)
	}
}

// tokenRE matches what differs between two challenges: the token.
var tokenRE = regexp.MustCompile(`[A-Za-z0-9_-]{40,}`)

// A known and an unknown account get the same answers at every step:
// status, header fields and body, the puzzle's random token aside.
func TestSignInChallengeKnownUnknownAlike(t *testing.T) {
	type step struct {
		status int
		header http.Header
		body   string
	}
	run := func(user string) []step {
		var ev events
		_, _, h := signIn(t, nil, challengeOptions(t, &ev))
		var out []step
		keep := func(w *httptest.ResponseRecorder) *httptest.ResponseRecorder {
			hd := w.Header().Clone()
			hd.Del("Date")
			if v := hd.Get(challenge.Header); v != "" {
				hd.Set(challenge.Header, tokenRE.ReplaceAllString(v, "T"))
			}
			out = append(out, step{w.Code, hd, tokenRE.ReplaceAllString(w.Body.String(), "T")})
			return w
		}
		for i := range 3 {
			keep(post(h, guessAddr(i), formCT, form(user, "wrong")))
		}
		for i := range 6 {
			ip := guessAddr(50 + i)
			w := keep(post(h, ip, formCT, form(user, "wrong")))
			if c, ok := challengeOf(t, w); ok {
				a, _ := solve(t, c)
				keep(answer(h, ip, user, "wrong", a))
				keep(answer(h, guessAddr(60+i), user, "wrong", a)) // another address
			}
		}
		return out
	}
	known, unknown := run("alice"), run("nobody")
	if len(known) != len(unknown) {
		t.Fatalf("%d steps for alice, %d for an unknown account", len(known), len(unknown))
	}
	for i := range known {
		k, u := known[i], unknown[i]
		if k.status != u.status || k.body != u.body || !equalHeaders(k.header, u.header) {
			t.Fatalf("step %d: alice %d %q %s; unknown %d %q %s", i, k.status, k.header, k.body, u.status, u.header, u.body)
		}
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\n") != strings.Join(b[k], "\n") {
			return false
		}
	}
	return true
}

// captcha is an app's own provider: its answer is "ok:" and an ID.
type captcha struct {
	issued challenge.Issued
	err    error
}

func (c captcha) Issue(context.Context, challenge.For) (challenge.Issued, error) {
	return c.issued, c.err
}

func (c captcha) Verify(_ context.Context, answer string, _ challenge.For) (challenge.Solved, error) {
	id, ok := strings.CutPrefix(answer, "ok:")
	if !ok {
		return challenge.Solved{}, errors.New("wrong answer")
	}
	return challenge.Solved{ID: id, Expires: time.Now().Add(time.Minute)}, nil
}

// An app's own provider: what it issues is sent as it is, unless the
// wire cannot carry it; its IDs are taken once and must be short.
func TestSignInChallengeProvider(t *testing.T) {
	widget := challenge.Issued{Scheme: "captcha", Token: "site-key-123"}
	for _, tc := range []struct {
		name      string
		c         captcha
		answer    string
		challenge bool // the refusal carries a challenge
		status    int  // of the attempt with the answer
	}{
		{"issued and answered", captcha{issued: widget}, "ok:abc", true, 200},
		{"answered twice", captcha{issued: widget}, "ok:abc", true, 429},
		{"wrong answer", captcha{issued: widget}, "no", true, 429},
		{"ID too long", captcha{issued: widget}, "ok:" + strings.Repeat("x", challenge.MaxID+1), true, 429},
		{"empty ID", captcha{issued: widget}, "ok:", true, 429},
		{"issue failed", captcha{err: errors.New("provider down")}, "ok:def", false, 200},
		{"token with a quote", captcha{issued: challenge.Issued{Scheme: "captcha", Token: `a"b`}}, "ok:ghi", false, 200},
		{"scheme not a token", captcha{issued: challenge.Issued{Scheme: "a b", Token: "t"}}, "ok:jkl", false, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events
			o := challengeOptions(t, &ev)
			o.Challenge = tc.c
			_, _, h := signIn(t, nil, o)
			for i := range 3 {
				post(h, guessAddr(i), formCT, form("alice", "wrong"))
			}
			w := post(h, "203.0.113.7", formCT, form("alice", "right"))
			if w.Code != 429 || (w.Header().Get(challenge.Header) != "") != tc.challenge {
				t.Fatalf("refusal: %d %q, want 429 with a challenge: %v", w.Code, w.Header(), tc.challenge)
			}
			if tc.challenge && w.Header().Get(challenge.Header) != `scheme="captcha", token="site-key-123", bits=0` {
				t.Fatalf("challenge %q", w.Header().Get(challenge.Header))
			}
			if tc.name == "answered twice" {
				answer(h, "203.0.113.7", "alice", "right", tc.answer)
			}
			if w := answer(h, "203.0.113.7", "alice", "right", tc.answer); w.Code != tc.status {
				t.Fatalf("with the answer %.20q: %d, want %d", tc.answer, w.Code, tc.status)
			}
		})
	}
}

// An answered challenge is charged the password's keys, as any attempt,
// on every store: a challenged failure counts toward the password's budget,
// and a password refused everywhere is refused behind an answer too.
func TestSignInChallengeCountsPassword(t *testing.T) {
	const sprayed = "Summer2026!"
	pow, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: powSecret, Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	b := signInDefaults.Spray.Budget.Limit
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			c := newChecker(map[string]string{"alice": sprayed, "carol": "carols-own"})
			h := sprayGuard(t, open(t), middleware.SignInOptions{AccountFailures: limiter.Budget{Limit: 3, Window: time.Hour}, Challenge: pow}, c)
			// answerFor spends the account's budget with junk from
			// strangers, and returns an answer to the challenge from ip.
			answerFor := func(account, ip string) string {
				t.Helper()
				for i := range 3 {
					login(h, sprayAddr(5000+i), account, fmt.Sprintf("junk-%s-%d", account, i))
				}
				p, ok := challengeOf(t, login(h, ip, account, "junk-"+account))
				if !ok {
					t.Fatalf("%s from %s: no challenge once her budget is spent", account, ip)
				}
				a, _ := solve(t, p)
				return a
			}
			for i := range b - 1 {
				if w := login(h, sprayAddr(i), fmt.Sprintf("user%d", i), sprayed); w.Code != 401 {
					t.Fatalf("spray %d: %d", i, w.Code)
				}
			}
			// The budget's last failure, behind an answer.
			if w := answer(h, "192.0.2.10", "bob", sprayed, answerFor("bob", "192.0.2.10")); w.Code != 401 {
				t.Fatalf("bob with an answer: %d, want 401", w.Code)
			}
			if w := login(h, sprayAddr(b), "someone", sprayed); w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"login-spray"`) {
				t.Fatalf("the password after %d failures, one challenged: %d %q, want 429 of login-spray", b, w.Code, w.Header().Get("RateLimit"))
			}
			// Alice's budget spent with junk, an answer does not take the
			// sprayed password to her check.
			if w := answer(h, "192.0.2.11", "alice", sprayed, answerFor("alice", "192.0.2.11")); w.Code != 429 || !strings.Contains(w.Header().Get("RateLimit"), `"login-spray"`) {
				t.Fatalf("alice with an answer and the sprayed password: %d %q %s, want 429 of login-spray", w.Code, w.Header().Get("RateLimit"), w.Body)
			}
			if n := c.count(sprayed); n != b {
				t.Fatalf("the sprayed password reached the check %d times, want its budget, %d", n, b)
			}
			// An owner's right password behind an answer is given back, as
			// on every path: more sign-ins than the budget leave it unspent.
			for i := range b + 1 {
				ip := sprayAddr(6000 + i)
				if w := answer(h, ip, "carol", "carols-own", answerFor("carol", ip)); w.Code != 200 {
					t.Fatalf("carol's sign-in %d with an answer: %d", i, w.Code)
				}
			}
			if w := login(h, sprayAddr(7000), "someone", "carols-own"); w.Code != 401 {
				t.Fatalf("carol's password after %d challenged sign-ins: %d, want 401", b+1, w.Code)
			}
		})
	}
}

// An attacker who attacks alice as fast as the guard allows, answering
// every challenge, reaches the cap no sooner with Challenge on than off,
// with the default budgets and delays.
func TestSignInChallengeCapNoSooner(t *testing.T) {
	pow, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: powSecret, Bits: 4})
	if err != nil {
		t.Fatal(err)
	}
	toCap := func(c challenge.Provider) (time.Duration, int) {
		clk := clock.NewFake(t0)
		_, p, h := signIn(t, clk, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}, Challenge: c})
		if w := post(h, "203.0.113.1", formCT, form("alice", "right")); w.Code != 200 { // an account that signs in keeps its count
			t.Fatalf("alice signs in: %d", w.Code)
		}
		p.checks.Store(0)
		answered := 0
		for i := 0; p.checks.Load() < middleware.MaxConsecutiveFailures; i++ {
			if i > 2000 {
				t.Fatalf("%d failures after %d attempts", p.checks.Load(), i)
			}
			ip := guessAddr(i) // an address for each attempt: only the account's budgets apply
			w := post(h, ip, formCT, form("alice", "wrong"))
			if w.Code == 401 {
				continue
			}
			wait := retryAfter(t, w)
			if pz, ok := challengeOf(t, w); ok {
				a, _ := solve(t, pz)
				w = answer(h, ip, "alice", "wrong", a)
				if w.Code == 401 {
					answered++
					continue
				}
				wait = min(wait, retryAfter(t, w))
			}
			if w.Code != 429 || strings.Contains(w.Header().Get("RateLimit"), "login-consecutive") {
				t.Fatalf("attempt %d, %d failures: %d %q", i, p.checks.Load(), w.Code, w.Header().Get("RateLimit"))
			}
			clk.Advance(time.Duration(max(wait, 1)) * time.Second)
		}
		return clk.Now().Sub(t0), answered
	}
	off, _ := toCap(nil)
	on, answered := toCap(pow)
	t.Logf("the cap after %v without a challenge, %v with (%d answered)", off, on, answered)
	if off < 70*time.Hour || answered == 0 || on < off {
		t.Fatalf("the cap after %v with Challenge (%d answered), %v without: want no sooner, and about 74h without", on, answered, off)
	}
}

// unsolved is a well-formed answer to p that does not solve it: one nonce
// in 2^bits would.
func unsolved(p puzzle) string {
	for c := 0; ; c++ {
		a := p.Token + "." + strconv.Itoa(c)
		h := sha256.Sum256([]byte(a))
		if bits.LeadingZeros64(binary.BigEndian.Uint64(h[:8])) < p.Bits {
			return a
		}
	}
}

// solveExactly answers p with exactly its bits of leading zeros, no more.
func solveExactly(p puzzle) string {
	for c := 0; ; c++ {
		a := p.Token + "." + strconv.Itoa(c)
		h := sha256.Sum256([]byte(a))
		if bits.LeadingZeros64(binary.BigEndian.Uint64(h[:8])) == p.Bits {
			return a
		}
	}
}

// A puzzle is answered at the difficulty in force when its answer comes:
// puzzles fetched before a challenged failure are refused after it, and the
// attempt gets a new challenge, a bit harder. On the shared stores the
// failure is counted by another instance, which the one answering learns
// only from the store.
func TestSignInChallengeDifficultyAtAnswer(t *testing.T) {
	secret := make([]byte, 32)
	rand.Read(secret)
	for _, tc := range []struct {
		name string
		open func(t *testing.T) []*store.Store // the store of each instance
	}{
		{"memory", func(t *testing.T) []*store.Store { return []*store.Store{memStore(t, nil)} }},
		{"postgres", func(t *testing.T) []*store.Store {
			u := migratedPostgres(t)
			return []*store.Store{openShared(t, u, secret), openShared(t, u, secret)}
		}},
		{"redis", func(t *testing.T) []*store.Store {
			u := servicetest.RedisURL(t)
			return []*store.Store{openShared(t, u, secret), openShared(t, u, secret)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &passwords{}
			prefix := fresh("difficulty")
			var hs [2]http.Handler
			for i, s := range tc.open(t) {
				o := challengeOptions(t, &events{})
				o.Logger = quiet
				o.IP.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
				g, err := middleware.SignIn(handle(t, s, prefix), o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { g.Close() })
				hs[i] = g.Wrap(p)
			}
			if hs[1] == nil {
				hs[1] = hs[0]
			}
			for i := range 3 {
				post(hs[0], guessAddr(i), formCT, form("alice", "wrong"))
			}
			var puzzles []puzzle
			for i := range 2 {
				pz, ok := challengeOf(t, post(hs[0], guessAddr(10+i), formCT, form("alice", "wrong")))
				if !ok || pz.Bits != 4 {
					t.Fatalf("puzzle %d: %+v, want one of 4 bits", i, pz)
				}
				puzzles = append(puzzles, pz)
			}
			checks := p.checks.Load()
			if w := answer(hs[0], guessAddr(10), "alice", "wrong", solveExactly(puzzles[0])); w.Code != 401 {
				t.Fatalf("the first answer: %d, want 401", w.Code)
			}
			w := answer(hs[1], guessAddr(11), "alice", "wrong", solveExactly(puzzles[1]))
			pz, ok := challengeOf(t, w)
			if !ok || pz.Bits != 5 || p.checks.Load() != checks+1 {
				t.Fatalf("a 4-bit answer after a challenged failure: %d %s, want a new challenge of 5 bits and no check", w.Code, w.Body)
			}
			if w := answer(hs[1], guessAddr(11), "alice", "wrong", solveExactly(pz)); w.Code != 401 || p.checks.Load() != checks+2 {
				t.Fatalf("the new puzzle's answer: %d, want 401", w.Code)
			}
		})
	}
}

package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware/challenge"
)

// defaultChallengeBudget bounds the challenged attempts of one account:
// those let past its windowed budget by an answered challenge.
var defaultChallengeBudget = limiter.Budget{Limit: 10, Window: time.Hour}

// challenger is a guard's challenge and what answering with it takes.
type challenger struct {
	c      challenge.Provider
	budget limiter.Budget
	answer keyfunc.Func // reads challenge.AnswerField from the body
	// fields name the budgets of a challenged attempt: NAME-account-ip,
	// NAME-challenge, NAME-consecutive, NAME-spray (with Spray on), NAME-ip
	// and the networks'. entries maps its keys to them, and sprayEntries
	// those of one with a password.
	fields       *fields
	entries      [chalIP + addrKeys]int
	sprayEntries [chalSprayIP + addrKeys]int
	// failures remembers, for limiter.AskAgain, each account's challenged
	// failures as the store last told them. A flood of challenged refusals
	// then asks the store once a second per account, as a flood of refusals
	// does.
	mu       sync.Mutex
	failures map[string]recalled
}

// recalled is an account's challenged failures, read at a time.
type recalled struct {
	failures int
	at       time.Time
}

// maxRecalled bounds the accounts whose challenged failures a guard
// remembers; past it, it forgets them all.
const maxRecalled = 10_000

// The indexes of the keys of a challenged attempt. The consecutive count is
// where an attempt's is (keyConsecutive), for the delay ladder. The
// address's keys come last, left out for an exempt address.
const (
	chalAccountIP = iota
	chalChallenge
	chalConsecutive
	chalPuzzle
	chalIP
)

// The indexes of the keys of a password, in a challenged attempt with one:
// the address's keys move after them.
const (
	chalSpray = chalIP + iota
	chalMarker
	chalSprayIP
)

// chalOwn are the keys of a challenged attempt that describe the client's
// own use; chalSprayOwn those of one with a password.
var (
	chalOwn      = []int{chalAccountIP, chalIP}
	chalSprayOwn = []int{chalAccountIP, chalSprayIP}
)

// newChallenger returns the challenger of o's guard, or nil when
// o.Challenge is nil; spray says whether the guard counts passwords.
func newChallenger(o *SignInOptions, consecutive limiter.Budget, spray bool) (*challenger, error) {
	if o.Challenge == nil {
		return nil, nil
	}
	if err := o.ChallengeBudget.Validate(); err != nil {
		return nil, fmt.Errorf("middleware %q: %s-challenge: %w", o.Name, o.Name, err)
	}
	names := []string{o.Name + "-account-ip", o.Name + "-challenge", o.Name + "-consecutive"}
	budgets := []limiter.Budget{o.AccountIPFailures, o.ChallengeBudget, consecutive}
	if spray {
		names, budgets = append(names, o.Name+"-spray"), append(budgets, o.Spray.Budget)
	}
	names = append(names, o.Name+"-ip", o.Name+"-network", o.Name+"-network-wide")
	budgets = append(budgets, o.IPAttempts, o.NetworkAttempts, wideNetwork(o.NetworkAttempts))
	fIP := len(names) - 3
	return &challenger{
		c: o.Challenge, budget: o.ChallengeBudget,
		answer:  bodyField(challenge.AnswerField, o.Body),
		fields:  newFields(names, budgets, o.Remaining.hidden(true), o.LegacyHeaders),
		entries: [chalIP + addrKeys]int{chalAccountIP: 0, chalChallenge: 1, chalConsecutive: 2, chalPuzzle: 1, chalIP: fIP, chalIP + 1: fIP + 1, chalIP + 2: fIP + 2},
		sprayEntries: [chalSprayIP + addrKeys]int{chalAccountIP: 0, chalChallenge: 1, chalConsecutive: 2, chalPuzzle: 1, chalSpray: 3, chalMarker: 3,
			chalSprayIP: fIP, chalSprayIP + 1: fIP + 1, chalSprayIP + 2: fIP + 2},
		failures: map[string]recalled{},
	}, nil
}

// readAnswer returns r's answer to a challenge: challenge.AnswerHeader,
// else challenge.AnswerField of the body; "" when there is none, or it cannot be read.
func (c *challenger) readAnswer(r *http.Request) string {
	if v := r.Header.Values(challenge.AnswerHeader); len(v) > 0 {
		if len(v) > 1 || len(v[0]) > challenge.MaxAnswerBytes {
			return "\x00" // refused as malformed: never taken for no answer
		}
		return v[0]
	}
	a, err := c.answer(r)
	if err != nil {
		return ""
	}
	return a
}

// answered counts an attempt that carries an answer to a challenge, and
// reports whether it answered the request. A valid answer is charged in one
// store update, instead of the account's windowed budget. It is charged to
// the client's own budgets, the cap, the account's challenge budget, the
// answer's ID (once), and the password's keys as any attempt. The answer
// to a proof of work must meet the difficulty in force when it comes: that
// of the account's challenged failures this update counted. Past the
// delay's threshold, the attempt then takes the ladder's step as any
// attempt, lengthened by the account budget's window. It is the attempt
// that budget would allow at its reset, taken early, so that answering
// never brings the cap sooner. A refused or replayed answer costs the
// client's address an attempt, and the attempt goes on as one without an
// answer.
func (g *SignInGuard) answered(w http.ResponseWriter, r *http.Request, p *pass, a *signInAttempt, exempt bool) bool {
	c := g.challenge
	answer := c.readAnswer(p.r) // the handler's request, whose body it restores
	if answer == "" {
		return false
	}
	account := a.out.account
	who := challenge.For{Account: account, Addr: a.ip}
	who.Failures, _ = c.recall(account)
	s, err := c.c.Verify(r.Context(), answer, who)
	if err == nil && (s.ID == "" || len(s.ID) > challenge.MaxID) {
		err = fmt.Errorf("middleware: challenge answer with an ID of %d bytes, want 1 to %d", len(s.ID), challenge.MaxID)
	}
	if err != nil {
		return g.answerRefused(w, r, a.ip, exempt, err)
	}
	window := time.Until(s.Expires).Truncate(time.Second) + time.Minute // the clocks of instances differ
	window = min(max(window, limiter.MinWindow), limiter.MaxWindow)
	charges := [chalSprayIP + addrKeys]limiter.Charge{
		chalAccountIP:   {Key: a.accountIP, Budget: g.o.AccountIPFailures},
		chalChallenge:   {Key: keyfunc.JoinKeys("challenge", account), Budget: c.budget},
		chalConsecutive: {Key: keyfunc.JoinKeys("consecutive", account), Budget: g.rules.consecutive},
		chalPuzzle:      {Key: keyfunc.JoinKeys("puzzle", s.ID), Budget: limiter.Budget{Limit: 1, Window: window}},
	}
	n, entries, own := chalIP, c.entries[:], chalOwn
	if a.sprayed {
		charges[chalSpray] = limiter.Charge{Key: a.spray, Budget: g.o.Spray.Budget}
		charges[chalMarker] = limiter.Charge{Key: a.marker, Budget: sprayMarker(g.o.Spray.Budget)}
		n, entries, own = chalSprayIP, c.sprayEntries[:], chalSprayOwn
	}
	addr := n // the address's keys come last
	if exempt {
		own = own[:1]
	} else {
		n = len(g.address(charges[:n], a.ip))
	}
	entries = entries[:n]
	d, ok := g.attempt(w, r, charges[:n]...)
	if !ok {
		return true
	}
	if !d.Allowed && !d.Shadow && (!d.Unavailable || d.Local) && d.RemainingOf(chalPuzzle) == 0 &&
		d.RemainingOf(chalAccountIP) > 0 && roomFrom(&d, addr) {
		return g.answerRefused(w, r, a.ip, exempt, fmt.Errorf("%w: answered before", challenge.ErrAnswer))
	}
	if counted(&d) {
		pow, ok := c.c.(*challenge.ProofOfWork) // a provider's answer may be verified once only
		if f := c.budget.Limit - d.RemainingOf(chalChallenge) - 1; ok && f > who.Failures {
			// Challenged attempts counted since this instance last
			// asked: the answer must meet their difficulty too.
			who.Failures = f
			if _, err := pow.Verify(r.Context(), answer, who); err != nil {
				ctx, cancel := settling(r)
				defer cancel()
				if err := g.l.Refund(ctx, d); err != nil {
					g.log.Warn("attempt with a stale answer not refunded", "kind", KindRefundFailed, "err", err)
				}
				return g.answerRefused(w, r, a.ip, exempt, err)
			}
		}
		if g.rules.delay && !g.delay(w, r, &d, a, g.o.AccountFailures.Window) {
			return true
		}
	}
	a.challenged = true
	p.entries, p.own, p.fields = entries, own, c.fields
	g.serve(w, &d, p)
	return true
}

// answerRefused charges the client's address for a refused answer, as for
// a wrong password, and reports whether it answered the request: only
// when the address budget is spent.
func (g *SignInGuard) answerRefused(w http.ResponseWriter, r *http.Request, ip string, exempt bool, err error) bool {
	g.warn.Do(func() { g.log.Info("challenge answer refused", "kind", KindChallengeRefused, "err", err) })
	if exempt {
		return false
	}
	var cs [addrKeys]limiter.Charge
	n := len(g.address(cs[:0], ip))
	d, ok := g.attempt(w, r, cs[:n]...)
	if !ok {
		return true
	}
	if d.Allowed || d.Shadow || (d.Unavailable && !d.Local) {
		return false
	}
	g.serve(w, &d, &pass{r: r, entries: g.addrEntries[:n]})
	return true
}

// challengeable reports whether d, a counted refusal of an unknown
// client's attempt a, comes from the account's windowed budget alone: not
// the client's own budgets, the password's, or the cap. The delay ladder
// is never challenged: it refuses before d is counted (see delay).
func challengeable(d *limiter.Decision, a *signInAttempt) bool {
	ip := keyIP
	if a.sprayed {
		ip = keySprayIP
	}
	return !d.Allowed && !d.Shadow && (!d.Unavailable || d.Local) && d.RemainingOf(keyAccount) == 0 &&
		d.RemainingOf(keyAccountIP) > 0 && roomFrom(d, ip) && d.RemainingOf(keyConsecutive) > 0 &&
		(!a.sprayed || d.RemainingOf(keySpray) > 0)
}

// issue answers d, a refusal of a's attempt by the account's windowed
// budget, with a challenge, under the fields of p. When the account's
// challenge budget is spent, or no challenge can be issued, the refusal
// stands.
func (g *SignInGuard) issue(w http.ResponseWriter, r *http.Request, d *limiter.Decision, p *pass, a *signInAttempt) {
	c := g.challenge
	ctx, cancel := settling(r)
	defer cancel()
	failures, ok := c.recall(a.out.account)
	if !ok {
		// Unless the store tells, the base difficulty: the challenge
		// budget, counted with the attempt, still bounds the guesses.
		failures = 0
		pd, err := g.l.PeekEach(ctx, limiter.Charge{Key: keyfunc.JoinKeys("challenge", a.out.account), Budget: c.budget})
		if err == nil && !pd.Unavailable {
			failures = c.budget.Limit - pd.RemainingOf(0)
			c.remember(a.out.account, failures)
		}
	}
	if failures >= c.budget.Limit { // no challenged attempt left: the refusal stands
		g.serve(w, d, p)
		return
	}
	is, err := c.c.Issue(ctx, challenge.For{Account: a.out.account, Addr: a.ip, Failures: failures})
	if err == nil {
		err = checkIssued(is)
	}
	if err != nil {
		g.log.Error("challenge not issued", "kind", KindChallengeNotIssued, "err", err)
		g.serve(w, d, p)
		return
	}
	p.refuse = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeChallenge(w, is) })
	g.serve(w, d, p)
}

// recall returns account's challenged failures as the store told them
// within limiter.AskAgain, and whether it knows them.
func (c *challenger) recall(account string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.failures[account]
	if !ok || time.Since(r.at) >= limiter.AskAgain {
		return 0, false
	}
	return r.failures, true
}

// remember records account's challenged failures as the store told them.
func (c *challenger) remember(account string, failures int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) >= maxRecalled {
		clear(c.failures)
	}
	c.failures[account] = recalled{failures, time.Now()}
}

// checkIssued refuses a challenge the wire format cannot carry.
func checkIssued(is challenge.Issued) error {
	ok := isToken(is.Scheme) && len(is.Token) > 0 && len(is.Token) <= 1024 && is.Bits >= 0 && is.Bits <= challenge.MaxBits
	for i := 0; ok && i < len(is.Token); i++ {
		ok = is.Token[i] >= ' ' && is.Token[i] < 0x7f && is.Token[i] != '"' && is.Token[i] != '\\'
	}
	if !ok {
		return errors.New("middleware: challenge of scheme " + strconv.Quote(is.Scheme) + ": want a token scheme and 1 to 1024 bytes of printable ASCII but '\"' and '\\'")
	}
	return nil
}

// writeChallenge answers 429 with challenge is: in challenge.Header, and in
// an RFC 9457 problem document's "challenge" member. Its fields are
// printable ASCII without quotes or backslashes (checkIssued), so they are
// written as they are.
func writeChallenge(w http.ResponseWriter, is challenge.Issued) {
	var b strings.Builder
	b.WriteString(`scheme="`)
	b.WriteString(is.Scheme)
	b.WriteString(`", token="`)
	b.WriteString(is.Token)
	b.WriteString(`", bits=`)
	b.WriteString(strconv.Itoa(is.Bits))
	h := w.Header()
	h.Set(challenge.Header, b.String())
	body := `{"type":"about:blank","title":"Too Many Requests","status":429,` +
		`"detail":"Answer the challenge and try again, or retry after the time in the Retry-After header.",` +
		`"challenge":{"scheme":"` + is.Scheme + `","token":"` + is.Token + `","bits":` + strconv.Itoa(is.Bits) + "}}\n"
	h["Content-Type"] = problemType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Cache-Control"] = noStore
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write([]byte(body))
}

// challengeDone credits or counts a challenged attempt by its outcome. A
// success clears what any success clears and the account's challenged
// failures, and emits EventChallengePassed. A failure stays charged, backs
// off as any failure, and emits EventChallengeFailed.
func (g *SignInGuard) challengeDone(ctx context.Context, r *http.Request, d *limiter.Decision, a *signInAttempt, success bool) {
	account := a.out.account
	if success {
		var refund []int
		cleared := []string{keyfunc.JoinKeys("account-ip", account, a.ip), keyfunc.JoinKeys("lockouts", account, a.ip),
			keyfunc.JoinKeys("consecutive", account), keyfunc.JoinKeys("delay", account), keyfunc.JoinKeys("challenge", account)}
		if a.sprayed {
			if !a.repeat {
				refund = []int{chalSpray}
			}
			cleared = append(cleared, a.marker)
		}
		if err := g.l.Credit(ctx, *d, refund, cleared...); err != nil {
			g.log.Warn("successful sign-in not credited", "kind", KindRefundFailed, "err", err)
		}
		if charged(d) {
			g.keepCap(ctx, account, d.Now, d.ResetOf(chalConsecutive), true)
		}
		if counted(d) {
			g.challenge.remember(account, 0)
			g.event(ctx, r, Event{Kind: EventChallengePassed, Account: account, Budget: g.o.Name + "-challenge",
				Failures: g.challenge.budget.Limit - d.RemainingOf(chalChallenge) - 1, Limit: g.challenge.budget.Limit, Time: d.Now})
		}
		return
	}
	if g.o.Backoff.Max > 0 && d.RemainingOf(chalAccountIP) == 0 {
		g.lockOut(ctx, a.accountIP, account, a.ip)
	}
	if charged(d) {
		g.failedCap(ctx, account, d, chalConsecutive, d.RemainingOf(chalConsecutive) == 0)
	}
	if !counted(d) {
		return
	}
	g.challenge.remember(account, g.challenge.budget.Limit-d.RemainingOf(chalChallenge))
	g.event(ctx, r, Event{Kind: EventChallengeFailed, Account: account, Budget: g.o.Name + "-challenge",
		Failures: g.challenge.budget.Limit - d.RemainingOf(chalChallenge), Limit: g.challenge.budget.Limit, Until: d.ResetOf(chalChallenge), Time: d.Now})
	if d.RemainingOf(chalConsecutive) == 0 {
		g.event(ctx, r, Event{Kind: EventCapReached, Account: account, Budget: g.o.Name + "-consecutive",
			Failures: g.rules.consecutive.Limit, Limit: g.rules.consecutive.Limit, Time: d.Now})
	}
	g.passwordAndDelay(ctx, r, d, a)
}

// challengesBegin emits EventChallengeIssued when a failure of an unknown
// client spent the account's windowed budget, short of the cap: later
// attempts are challenged.
func (g *SignInGuard) challengesBegin(ctx context.Context, r *http.Request, d *limiter.Decision, a *signInAttempt) {
	if g.challenge == nil || d.RemainingOf(keyConsecutive) == 0 || d.RemainingOf(keyAccount) > 0 {
		return
	}
	g.event(ctx, r, Event{Kind: EventChallengeIssued, Account: a.out.account, Budget: g.o.Name + "-challenge",
		Limit: g.challenge.budget.Limit, Until: d.ResetOf(keyAccount), Time: d.Now})
}

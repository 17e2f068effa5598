// Package middleware limits HTTP handlers: func(http.Handler) http.Handler
// wrappers, usable with http.ServeMux, chi and gorilla/mux, that count each
// request and refuse the ones over budget. It is the full form, with every
// option. The module root builds the same limiters in one line each, with
// one outage policy per kind (gatecount.Limits).
//
//   - [New] limits by a key function (Options.Key), or by client address
//     when Key is nil. Default name "limit"; store down: requests are
//     answered 503 ([limiter.Deny]) unless Options.Unavailable says otherwise.
//   - [SignIn] guards a sign-in form: failures per account and address, per
//     account, attempts per address, and known devices. The handler reads
//     the account with Account and tells the outcome with ReportSuccess or
//     ReportFailure. Default name "login". With SignInOptions.Code it
//     guards a handler that checks a one-time code. Default name "verify".
//   - [Send] guards a route that sends mail or codes, per destination and per
//     address; a throttled request gets the same answer as an accepted one
//     unless SendOptions.Reveal. Default name "send".
//
// Each one claims its own store handle: a second one on the same handle is
// refused ([store.ErrStoreReuse]), and so are two of one store with the same
// name ([store.ErrDuplicateName]).
//
//	s := memory.New(memory.Options{})
//	execH, err := s.Handle("execute:")
//	…
//	perCaller, err := middleware.New(execH, limiter.Budget{Limit: 30, Window: time.Minute}, middleware.Options{
//		Name:           "execute",
//		Key:            keyfunc.CallerID,
//		KeyErrorStatus: http.StatusUnauthorized,
//		Unavailable:    limiter.Local,
//	})
//	if err != nil {
//		return err
//	}
//	mux.Handle("POST /execute", auth(perCaller.Wrap(execute)))
//
// # Responses
//
// A request over budget never reaches the handler. It is answered 429 with
// Retry-After (whole seconds until the window ends, at least 1) and an
// application/problem+json body; Options.OnLimit replaces that answer.
// When the store is down and the policy (Options.Unavailable) refuses, the
// answer is 503 with Retry-After, never 429.
//
// Every counted response carries the RateLimit fields of the IETF draft
// (q: budget, w: window, r: requests left, t: seconds to reset):
//
//	RateLimit-Policy: "execute";q=30;w=60
//	RateLimit: "execute";r=12;t=42
//
// Limiters stacked on one route each add their members to both fields.
// Options.LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset;
// Options.Remaining set to [RemainingHidden] leaves out r.
//
// # Budgets and costs per request
//
// Options.BudgetFor chooses each request's budget (a caller's plan), and
// Options.Cost what it counts (10 for a batch of ten). Both are exact as
// the constructor's budget is; the RateLimit fields show the budget that
// applied, in units of cost. A budget or cost out of range, or an error of
// either, answers 500 and logs [KindInvalidCharge]: never a free pass.
//
// # Shadow, Skip and Networks
//
// Every form takes Shadow: it counts as it would, but refuses nothing and
// adds no fields. A would-be refusal reaches the handler, is reported as
// [limiter.ShadowDenied], and is logged once per key per window. Skip lets
// the requests it picks through uncounted. Networks answers blocked client
// networks 403 before anything is counted, and lets exempt ones skip the
// budgets of the client address, never a caller's, an account's or a
// destination's.
//
// # Counting only failures
//
// With Options.CountFailures, an attempt is counted before the handler
// runs, and refunded when it succeeds. Success is judged by its status
// (Options.Success, by default below 400), or as the handler says with
// [ReportSuccess] and [ReportFailure].
package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// DefaultUnavailableRetryAfter is the Retry-After of a 503 answered while the
// store is unavailable.
const DefaultUnavailableRetryAfter = 5 * time.Second

// Options configure a Middleware. The zero value gives the defaults.
type Options struct {
	// Name names the limiter in logs and in the RateLimit fields; the
	// constructor gives a default. It must be a token: letters, digits and
	// "-_.".
	Name string
	// Unavailable is what to answer when the store is unavailable; the zero
	// value, [limiter.Unset], is Deny.
	Unavailable limiter.Policy
	// Key finds each request's key; nil keys it by its client address,
	// found as IP says.
	Key keyfunc.Func
	// IP configures the client address (trusted proxies, IPv6 prefix).
	IP keyfunc.IPOptions
	// OnLimit replaces the 429 answer. The RateLimit fields and Retry-After
	// are already set when it runs.
	OnLimit func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	// OnNoKey answers a request the key function finds no key in; nil
	// answers it with KeyErrorStatus. The request never reaches the
	// handler uncounted.
	OnNoKey func(w http.ResponseWriter, r *http.Request, err error)
	// KeyErrorStatus is the status of the default OnNoKey; 0 means 400.
	// 401 suits a key of the caller ([keyfunc.CallerID]).
	KeyErrorStatus int
	// Skip, when it returns true, lets a request through uncounted: a
	// platform's health checker, say.
	Skip func(r *http.Request) bool
	// BudgetFor, when set, chooses each request's budget in place of the
	// constructor's: by the caller's plan, say. A budget out of range
	// (limiter.Budget.Validate), or an error, answers 500.
	BudgetFor func(r *http.Request) (limiter.Budget, error)
	// Cost, when set, is what each request counts against its budget: 10
	// for a batch of ten; nil counts 1. A cost below 1 or above the
	// budget's limit, or an error, answers 500.
	Cost func(r *http.Request) (int, error)
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until reset).
	LegacyHeaders bool
	// Remaining says whether the fields tell how many requests are left;
	// the zero value shows them.
	Remaining Remaining
	// CountFailures refunds the attempt of every request the handler
	// succeeds with (see the package doc).
	CountFailures bool
	// Success tells a successful response by its status under
	// CountFailures; nil means status < 400.
	Success func(status int) bool
	// UnavailableRetryAfter is the Retry-After of a 503 answered under
	// the Deny policy; 0 means [DefaultUnavailableRetryAfter].
	UnavailableRetryAfter time.Duration
	// Observer, when set, is told of every decision (see [limiter.Observer]).
	Observer limiter.Observer
	// Logger receives the middleware's logs; nil means slog.Default().
	Logger *slog.Logger
	// Shadow counts as the limiter would but refuses nothing and adds no
	// fields: a would-be refusal is reported to the Observer as
	// [limiter.ShadowDenied] and logged once per key per window.
	Shadow bool
	// Networks answers requests from its Block networks 403, counting
	// nothing. Those from Exempt go through uncounted when the key is the
	// client address (Key nil). The client address is found as IP says.
	Networks keyfunc.Networks
}

// Middleware limits the handlers it wraps with one limiter. It is safe for
// concurrent use.
type Middleware struct {
	*guard
	key     keyfunc.Func
	o       Options
	keyless problem // the answer to a request with no key, at KeyErrorStatus
	budget  limiter.Budget
	plans   *budgetFields // of the budgets BudgetFor chose; nil without it
	invalid rate.Sometimes
}

// New returns a Middleware that limits each key o.Key finds to budget, or
// each client address when o.Key is nil (forwarding headers only from
// trusted proxies, o.IP). When the store is unavailable it refuses
// requests unless o.Unavailable says otherwise (Deny): the safe choice when
// nothing is known of the endpoint. Its default name is "limit".
//
// Keyed by client address with no trusted proxies, the first request
// carrying X-Forwarded-For or Forwarded logs a warning of kind
// [KindForwardedUntrusted]. Behind a proxy that nobody told it of, the
// limiter keys every client by the proxy's address.
func New(h *store.Handle, budget limiter.Budget, o Options) (*Middleware, error) {
	o.Name = cmp.Or(o.Name, "limit")
	var ip *keyfunc.IPOptions
	if o.Key == nil {
		ip = &o.IP
	}
	return build(h, budget, o, limiter.Deny, ip)
}

// build builds a Middleware of one budget; with ip, it keys each request by
// its client address.
func build(h *store.Handle, budget limiter.Budget, o Options, policy limiter.Policy, ip *keyfunc.IPOptions) (*Middleware, error) {
	o.KeyErrorStatus = cmp.Or(o.KeyErrorStatus, http.StatusBadRequest)
	if o.KeyErrorStatus < 400 || o.KeyErrorStatus > 599 {
		return nil, fmt.Errorf("middleware %q: KeyErrorStatus %d is not an error status", o.Name, o.KeyErrorStatus)
	}
	if o.Success == nil {
		o.Success = defaultSuccess
	}
	if h != nil {
		h.Spread() // one key per attempt: on a Redis Cluster, over every master
	}
	g, err := newGuard(h, guardOptions{
		name:          o.Name,
		names:         []string{o.Name},
		budgets:       []limiter.Budget{budget},
		unavailable:   o.Unavailable,
		policy:        policy,
		ip:            ip,
		hideRemaining: o.Remaining.hidden(false),
		legacy:        o.LegacyHeaders,
		retryAfter:    o.UnavailableRetryAfter,
		onLimit:       o.OnLimit,
		logger:        o.Logger,
		observer:      o.Observer,
		shadow:        o.Shadow,
		nets:          o.Networks,
		netIP:         o.IP,
	})
	if err != nil {
		return nil, err
	}
	status := o.KeyErrorStatus
	m := &Middleware{guard: g, key: o.Key, o: o, budget: budget,
		keyless: newProblem(fmt.Sprintf(`{"type":"about:blank","title":%q,"status":%d}`+"\n", http.StatusText(status), status)),
		invalid: rate.Sometimes{Interval: time.Second}}
	if o.BudgetFor != nil {
		m.plans = newBudgetFields(o.Name, budget, g.fields, o.Remaining.hidden(false), o.LegacyHeaders)
	}
	if ip != nil {
		m.key = g.ip.Key
	}
	return m, nil
}

// Wrap returns next limited by m.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.count(w, r, next)
	})
}

func (m *Middleware) count(w http.ResponseWriter, r *http.Request, next http.Handler) {
	exempt, ok := m.screen(w, r)
	if !ok {
		return
	}
	if (m.o.Skip != nil && m.o.Skip(r)) || (exempt && m.ip != nil) {
		next.ServeHTTP(w, r)
		return
	}
	if m.fwd != nil {
		m.fwd.check(r)
	}
	key, err := m.key(r)
	if err != nil {
		m.noKey(w, r, err)
		return
	}
	// Counted within the request's context: a client that hangs up, or a
	// deadline that passes, ends a wait for a busy store (see ended).
	ctx := r.Context()
	p := pass{r: r, next: next}
	if m.o.CountFailures {
		p.run = m
	}
	var d limiter.Decision
	if m.o.BudgetFor == nil && m.o.Cost == nil {
		d, err = m.l.Attempt(ctx, key)
	} else {
		d, err = m.attemptCharged(ctx, r, key, &p)
	}
	if err != nil {
		switch {
		case ended(w, r):
		case errors.Is(err, errInvalidCharge):
			m.invalidCharge(w, err)
		default:
			m.noKey(w, r, err)
		}
		return
	}
	m.serve(w, &d, &p)
}

// errInvalidCharge marks a budget or cost a request could not be charged.
var errInvalidCharge = errors.New("middleware: invalid budget or cost")

// attemptCharged counts the request on key with the budget and cost that
// Options.BudgetFor and Options.Cost choose for it, and sets the fields
// of that budget in p. Its error matches errInvalidCharge when either
// failed or chose out of range.
func (m *Middleware) attemptCharged(ctx context.Context, r *http.Request, key string, p *pass) (limiter.Decision, error) {
	b, cost := m.budget, 1
	var err error
	if m.o.BudgetFor != nil {
		if b, err = m.o.BudgetFor(r); err != nil {
			return limiter.Decision{}, fmt.Errorf("%w: BudgetFor: %w", errInvalidCharge, err)
		}
	}
	if m.o.Cost != nil {
		if cost, err = m.o.Cost(r); err != nil {
			return limiter.Decision{}, fmt.Errorf("%w: Cost: %w", errInvalidCharge, err)
		}
	}
	d, err := m.l.AttemptCost(ctx, cost, limiter.Charge{Key: key, Budget: b})
	if errors.Is(err, limiter.ErrInvalidBudget) || errors.Is(err, limiter.ErrInvalidCost) {
		return d, fmt.Errorf("%w: %w", errInvalidCharge, err)
	}
	if m.plans != nil {
		p.fields = m.plans.of(b)
	}
	return d, err
}

// invalidCharge answers 500 to a request that could not be charged.
func (m *Middleware) invalidCharge(w http.ResponseWriter, err error) {
	m.invalid.Do(func() {
		m.log.Error("request refused: no valid budget or cost", "kind", KindInvalidCharge, "err", err)
	})
	writeProblem(w, http.StatusInternalServerError, problem500)
}

// run runs next and refunds the attempt if it succeeded (CountFailures).
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, d limiter.Decision) {
	out := &outcome{}
	rw := &responseWriter{ResponseWriter: w}
	next.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), outcomeKey{}, out)))
	success := out.said == saidSuccess || (out.said == saidNothing && m.o.Success(rw.Status()))
	if !success {
		return
	}
	ctx, cancel := settling(r)
	defer cancel()
	if err := m.l.Refund(ctx, d); err != nil {
		m.log.Warn("refund of a successful request failed", "kind", KindRefundFailed, "err", err)
	}
}

func (m *Middleware) noKey(w http.ResponseWriter, r *http.Request, err error) {
	m.warn.Do(func() {
		m.log.Warn("request refused: no rate-limit key", "kind", KindNoKey, "err", err)
	})
	if m.o.OnNoKey != nil {
		m.o.OnNoKey(w, r, err)
		return
	}
	writeProblem(w, m.o.KeyErrorStatus, m.keyless)
}

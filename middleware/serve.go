package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// guard is what every limiter of this package is built on (Middleware,
// SignInGuard, SendGuard). It holds one limiter counting every budget of a
// request in one store update, and the RateLimit fields naming each budget.
// Its serve is the one path that answers a request by its decision.
type guard struct {
	l        *limiter.Limiter
	ip       *keyfunc.IPKeyer  // nil when the key is not the client address
	fwd      *forwardedWarning // nil with ip
	fields   *fields
	retry503 []string
	onLimit  func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	log      *slog.Logger
	warn     rate.Sometimes
	nets     keyfunc.Networks
	addr     *keyfunc.IPKeyer // finds the client address for nets; nil without nets
}

// guardOptions are the settings a guard is built from.
type guardOptions struct {
	name          string
	names         []string         // of each budget, for the RateLimit fields
	budgets       []limiter.Budget // the last is the limiter's own
	unavailable   limiter.Policy
	policy        limiter.Policy     // what an Unset unavailable means
	ip            *keyfunc.IPOptions // nil: no client address keyer
	hideRemaining bool
	legacy        bool
	retryAfter    time.Duration // of a 503; 0 means DefaultUnavailableRetryAfter
	onLimit       func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	logger        *slog.Logger
	observer      limiter.Observer
	shadow        bool
	nets          keyfunc.Networks
	netIP         keyfunc.IPOptions // the client address for nets, when ip is nil
}

func newGuard(h *store.Handle, o guardOptions) (*guard, error) {
	for i, name := range o.names {
		if !isToken(name) {
			return nil, fmt.Errorf("middleware: name %q must be a token of letters, digits, '-', '_' and '.'", o.name)
		}
		if err := o.budgets[i].Validate(); err != nil {
			return nil, fmt.Errorf("middleware %q: %s: %w", o.name, name, err)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.retryAfter <= 0 {
		o.retryAfter = DefaultUnavailableRetryAfter
	}
	g := &guard{
		fields:   newFields(o.names, o.budgets, o.hideRemaining, o.legacy),
		retry503: []string{strconv.FormatInt(ceilSeconds(o.retryAfter), 10)},
		onLimit:  o.onLimit,
		log:      o.logger.With("limiter", o.name),
		warn:     rate.Sometimes{Interval: time.Second},
	}
	if o.ip != nil {
		ip, err := keyfunc.NewIP(*o.ip)
		if err != nil {
			return nil, fmt.Errorf("middleware %q: %w", o.name, err)
		}
		g.ip, g.fwd = ip, newForwardedWarning(*o.ip, g.log)
	}
	if !o.nets.IsZero() {
		g.nets, g.addr = o.nets, g.ip
		if g.addr == nil {
			ip, err := keyfunc.NewIP(o.netIP)
			if err != nil {
				return nil, fmt.Errorf("middleware %q: %w", o.name, err)
			}
			g.addr = ip
		}
	}
	l, err := limiter.New(h, limiter.Options{
		Name:        o.name,
		Budget:      o.budgets[len(o.budgets)-1],
		Unavailable: o.unavailable.Or(o.policy),
		Logger:      o.logger,
		Observer:    o.observer,
		Shadow:      o.shadow,
	})
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	g.l = l
	return g, nil
}

// Limiter returns the limiter that counts every budget.
func (g *guard) Limiter() *limiter.Limiter { return g.l }

// Close releases what the limiter holds of its own (see
// limiter.Limiter.Close). The store is the caller's to close.
func (g *guard) Close() error { return g.l.Close() }

// clientIP returns the key of r's client address, or answers 400 and
// reports false.
func (g *guard) clientIP(w http.ResponseWriter, r *http.Request) (string, bool) {
	g.fwd.check(r)
	ip, err := g.ip.Key(r)
	if err != nil {
		g.warn.Do(func() { g.log.Warn("request refused: no client address", "kind", KindNoKey, "err", err) })
		writeProblem(w, http.StatusBadRequest, problem400)
		return "", false
	}
	return ip, true
}

// screen answers 403 to a request from a blocked network, and reports
// whether the request goes on and whether its client address is exempt
// (see keyfunc.Networks). A request whose address cannot be found is
// neither: the key function answers it.
func (g *guard) screen(w http.ResponseWriter, r *http.Request) (exempt, ok bool) {
	if g.addr == nil {
		return false, true
	}
	a, err := g.addr.ClientAddr(r)
	if err != nil {
		return false, true
	}
	if g.nets.Blocked(a) {
		writeProblem(w, http.StatusForbidden, problem403)
		return false, false
	}
	return g.nets.Exempted(a), true
}

// attempt counts one attempt against every charge, within r's context: a
// wait for a busy store ends when the client hangs up or the request's
// deadline passes, and the attempt is then not counted (see ended). It
// answers 400 and reports false when the attempt could not be counted for
// another reason.
func (g *guard) attempt(w http.ResponseWriter, r *http.Request, charges ...limiter.Charge) (limiter.Decision, bool) {
	if gone(r) { // nobody to count for: not even a store call
		return limiter.Decision{}, false
	}
	d, err := g.l.AttemptEach(r.Context(), charges...)
	if err != nil {
		if ended(w, r) {
			return d, false
		}
		g.log.Error("attempt not counted", "kind", KindCountFailed, "err", err)
		writeProblem(w, http.StatusBadRequest, problem400)
		return d, false
	}
	return d, true
}

// ended answers a request whose context ended before its attempt was
// counted, and reports whether it had. A client that hung up gets nothing.
// A request whose deadline passed while it waited for a busy store is
// refused as the store's full queue refuses (429, Retry-After 1 s): nothing
// counted it, so nothing admits it.
func ended(w http.ResponseWriter, r *http.Request) bool {
	switch err := r.Context().Err(); {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded):
		w.Header()["Retry-After"] = retryBusy
		writeProblem(w, http.StatusTooManyRequests, problem429Room)
	}
	return true
}

// retryBusy is the Retry-After of a request refused by a busy store.
var retryBusy = []string{"1"}

// gone reports whether r's client hung up: its context was cancelled, not
// ended by its deadline.
func gone(r *http.Request) bool { return errors.Is(r.Context().Err(), context.Canceled) }

// settleWithin bounds what follows a request's check (credits, refunds,
// lock-outs, events): at most this long, whether the client waits or not.
// A credit the store cannot take by then is kept by the limiter, and tried
// again until it lands.
const settleWithin = 5 * time.Second

// settling returns the context of what follows r's check, or of a refund:
// a client that hangs up does not end it, and settleWithin does.
func settling(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), settleWithin)
}

// giveBack refunds what d counted of a request that will not run: its
// client hung up before the check.
func (g *guard) giveBack(r *http.Request, d *limiter.Decision) {
	if !d.Allowed || (d.Unavailable && !d.Local) {
		return // nothing counted
	}
	ctx, cancel := settling(r)
	defer cancel()
	if err := g.l.Refund(ctx, *d); err != nil {
		g.log.Warn("attempt of a client gone before its check not refunded", "kind", KindRefundFailed, "err", err)
	}
}

// A pass is how serve answers one counted request.
type pass struct {
	r    *http.Request // as the handler gets it
	next http.Handler  // the handler
	// run runs next for an allowed request and does what follows; nil
	// runs next alone. When the store failed open, next runs alone.
	run runner
	// refuse answers a refusal, after the fields; nil means the guard's
	// OnLimit, or 429.
	refuse http.Handler
	// fields are those of the budget that applied; nil means the guard's.
	fields *fields
	// entries maps each key of the attempt to its budget among the guard's
	// fields; nil entries name the deciding key. own are the keys an
	// allowed attempt's fields may name (nil: every key).
	entries, own []int
	hide         bool // no RateLimit fields at all
}

// A runner runs the handler of an allowed request, and does what follows
// it: a refund, a device cookie.
type runner interface {
	run(w http.ResponseWriter, r *http.Request, next http.Handler, d limiter.Decision)
}

// serve answers a request by its decision d. It answers 503 when the store
// is unavailable and the policy refuses, and runs the handler uncounted
// when the policy lets it through. Otherwise it writes the RateLimit
// fields, then runs the handler or, over budget, a refusal that never
// reaches it. In shadow it adds no fields and refuses nothing: a would-be
// refusal runs the handler alone, with no refund to follow, since nothing
// was counted. A request whose client hung up before the check runs
// nothing, and what it counted is given back.
func (g *guard) serve(w http.ResponseWriter, d *limiter.Decision, p *pass) {
	if gone(p.r) && (d.Allowed || d.Shadow) {
		// The client hung up before the check: nothing runs for
		// nobody, and what the attempt counted is given back.
		g.giveBack(p.r, d)
		return
	}
	if d.Shadow && !d.Allowed {
		p.next.ServeHTTP(w, p.r) // a would-be refusal, in shadow: as if no limiter were there
		return
	}
	if d.Unavailable && !d.Local {
		if !d.Allowed {
			w.Header()["Retry-After"] = g.retry503
			writeProblem(w, http.StatusServiceUnavailable, problem503)
			return
		}
		p.next.ServeHTTP(w, p.r) // fail open: nothing was counted
		return
	}
	if !p.hide && !d.Shadow {
		g.show(w.Header(), d, p.fields, p.entries, p.own)
	}
	switch {
	case !d.Allowed && p.refuse != nil:
		p.refuse.ServeHTTP(w, p.r)
	case !d.Allowed && g.onLimit != nil:
		g.onLimit(w, p.r, *d)
	case !d.Allowed && unnamed(d):
		writeProblem(w, http.StatusTooManyRequests, problem429Room)
	case !d.Allowed:
		writeProblem(w, http.StatusTooManyRequests, problem429)
	case p.run != nil:
		p.run.run(w, p.r, p.next, *d)
	default:
		p.next.ServeHTTP(w, p.r)
	}
}

// isToken reports whether s is a name the RateLimit fields can carry: 1 to
// 64 letters, digits, '-', '_' and '.'.
func isToken(s string) bool {
	return s != "" && len(s) <= 64 && strings.Trim(s, tokenChars) == ""
}

const tokenChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."

var (
	problem400     = newProblem(`{"type":"about:blank","title":"Bad Request","status":400}` + "\n")
	problem403     = newProblem(`{"type":"about:blank","title":"Forbidden","status":403}` + "\n")
	problem401     = newProblem(`{"type":"about:blank","title":"Unauthorized","status":401}` + "\n")
	problem429     = newProblem(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Too many requests: retry after the time in the Retry-After header."}` + "\n")
	problem429Room = newProblem(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"The rate limit store has no room to count this request: retry after the time in the Retry-After header."}` + "\n")
	problem500     = newProblem(`{"type":"about:blank","title":"Internal Server Error","status":500}` + "\n")
	problem503     = newProblem(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limit store is unavailable: retry after the time in the Retry-After header."}` + "\n")

	// Header values every problem response shares, as every response of a
	// limiter shares its RateLimit-Policy value.
	problemType = []string{"application/problem+json"}
	noStore     = []string{"no-store"}
)

// A problem is an RFC 9457 problem document and its Content-Length value,
// both built once, so that a refusal allocates nothing of its own.
type problem struct {
	body   []byte
	length []string
}

func newProblem(body string) problem {
	return problem{body: []byte(body), length: []string{strconv.Itoa(len(body))}}
}

func writeProblem(w http.ResponseWriter, status int, p problem) {
	h := w.Header()
	h["Content-Type"] = problemType
	h["Content-Length"] = p.length
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	w.Write(p.body)
}

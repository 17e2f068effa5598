package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// guard is what the guards of several budgets (SignIn, Send) share: one
// limiter counting every budget in one store update, the client address,
// and the RateLimit fields naming each budget.
type guard struct {
	l        *limiter.Limiter
	ip       *keyfunc.IPKeyer
	fields   *fields
	retry503 []string
	log      *slog.Logger
	warn     rate.Sometimes
	fwd      *forwardedWarning
}

// guardOptions are the settings a guard is built from.
type guardOptions struct {
	name          string
	names         []string         // of each budget, for the RateLimit fields
	budgets       []limiter.Budget // the last is the limiter's own
	unavailable   limiter.Policy
	ip            keyfunc.IPOptions
	hideRemaining bool
	legacy        bool
	retryAfter    time.Duration // of a 503; 0 means DefaultUnavailableRetryAfter
	logger        *slog.Logger
	observer      limiter.Observer
}

func newGuard(h *store.Handle, o guardOptions) (*guard, error) {
	for i, b := range o.budgets {
		if !isToken(o.names[i]) {
			return nil, fmt.Errorf("middleware: name %q must be a token of letters, digits, '-', '_' and '.'", o.name)
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("middleware %q: %s: %w", o.name, o.names[i], err)
		}
	}
	policy := o.unavailable.Or(limiter.Local)
	ip, err := keyfunc.NewIP(o.ip)
	if err != nil {
		return nil, fmt.Errorf("middleware %q: %w", o.name, err)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.retryAfter <= 0 {
		o.retryAfter = DefaultUnavailableRetryAfter
	}
	l, err := limiter.New(h, limiter.Options{
		Name:        o.name,
		Budget:      o.budgets[len(o.budgets)-1],
		Unavailable: policy,
		Logger:      o.logger,
		Observer:    o.observer,
	})
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	return &guard{
		l:        l,
		ip:       ip,
		fields:   newFields(o.names, o.budgets, o.hideRemaining, o.legacy),
		retry503: []string{strconv.FormatInt(ceilSeconds(o.retryAfter), 10)},
		log:      o.logger.With("limiter", o.name),
		warn:     rate.Sometimes{Interval: time.Second},
		fwd:      newForwardedWarning(o.ip, o.logger.With("limiter", o.name)),
	}, nil
}

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

// attempt counts one attempt against every charge, even if the client hangs
// up right after sending. It answers the request and reports false when it
// could not be counted, or when the store was unavailable and the policy
// refused it (503). When the store was unavailable and the policy let the
// request through uncounted, it reports true with d.Unavailable set.
func (g *guard) attempt(w http.ResponseWriter, r *http.Request, charges ...limiter.Charge) (limiter.Decision, bool) {
	d, err := g.l.AttemptEach(context.WithoutCancel(r.Context()), charges...)
	if err != nil {
		g.log.Error("attempt not counted", "kind", "ratelimit-count-failed", "err", err)
		writeProblem(w, http.StatusBadRequest, problem400)
		return d, false
	}
	if d.Unavailable && !d.Local && !d.Allowed {
		w.Header()["Retry-After"] = g.retry503
		writeProblem(w, http.StatusServiceUnavailable, problem503)
		return d, false
	}
	return d, true
}

// Limiter returns the guard's limiter.
func (g *guard) Limiter() *limiter.Limiter { return g.l }

// Close releases what the guard's limiter holds of its own.
func (g *guard) Close() error { return g.l.Close() }

var problem400 = []byte(`{"type":"about:blank","title":"Bad Request","status":400}` + "\n")

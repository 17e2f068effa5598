package middleware

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Default budgets of [SendGuard] ([SendOptions.WithDefaults] returns them).
var (
	defaultPerDestination = limiter.Budget{Limit: 3, Window: time.Hour}
	defaultSendPerIP      = limiter.Budget{Limit: 20, Window: time.Hour}
)

// DefaultAcceptedBody is the body of the default Accepted answer.
const DefaultAcceptedBody = `{"status":"accepted"}` + "\n"

// SendOptions configure [SendGuard]. The zero value gives the defaults.
type SendOptions struct {
	// Name prefixes the budgets' names: NAME-destination and NAME-ip; ""
	// means "send".
	Name string
	// PerDestination bounds the requests per destination (an address, a
	// phone number); zero means 3 per hour.
	PerDestination limiter.Budget
	// PerIP bounds the requests per client IP; zero means 20 per hour.
	PerIP limiter.Budget
	// Field is the form or JSON body field holding the destination; ""
	// means "email".
	Field string
	// Normalize canonicalises the destination; nil means
	// [keyfunc.NormalizeEmail] ([keyfunc.NormalizePhone] suits phone numbers).
	Normalize func(string) (string, error)
	// Body bounds how much of the body is read to find Field.
	Body keyfunc.BodyOptions
	// IP configures the client address (trusted proxies, IPv6 prefix).
	IP keyfunc.IPOptions
	// Reveal answers a throttled request 429 with Retry-After and the
	// RateLimit fields. Off by default: a throttled request, or one whose
	// destination is malformed, gets Accepted's answer and the handler does
	// not run. Nothing is sent, and a client cannot tell whether it was
	// throttled, nor whether the destination is known.
	Reveal bool
	// Accepted is the answer a throttled request gets when Reveal is off.
	// It must answer exactly as the handler answers a request it accepts;
	// nil means 202 Accepted with [DefaultAcceptedBody] as application/json.
	Accepted http.Handler
	// Unavailable is what to answer when the store is unavailable; the zero
	// value, [limiter.Unset], means Local: sending stays limited per instance.
	Unavailable limiter.Policy
	// Observer, when set, is told of every decision (see [limiter.Observer]).
	Observer limiter.Observer
	// Logger receives the guard's logs; nil means slog.Default().
	Logger *slog.Logger
	// Skip, when it returns true, lets a request through uncounted, with
	// its destination read (an unreadable one is answered as when counted).
	Skip func(r *http.Request) bool
	// Shadow counts as the guard would but refuses nothing and adds no
	// fields (see Options.Shadow).
	Shadow bool
	// Networks answers requests from its Block networks 403, counting
	// nothing; those from Exempt are not charged to the address budget
	// (NAME-ip), and still to the destination's.
	Networks keyfunc.Networks
}

// SendGuard throttles a handler that sends something to a destination the
// client names: password-reset mail, sign-in codes. Build one with Send.
// Its keys are [keyfunc.JoinKeys]("destination", DESTINATION), normalised,
// and keyfunc.JoinKeys("ip", IP) (see [SignInGuard]); Unlock clears them.
type SendGuard struct {
	*guard
	o     SendOptions
	dest  keyfunc.Func
	names []string // of the budgets, for logs
}

// WithDefaults returns o with its name, budgets and field set to their
// defaults when zero. Send starts with it.
func (o SendOptions) WithDefaults() SendOptions {
	o.Name = cmp.Or(o.Name, "send")
	o.PerDestination = cmp.Or(o.PerDestination, defaultPerDestination)
	o.PerIP = cmp.Or(o.PerIP, defaultSendPerIP)
	o.Field = cmp.Or(o.Field, "email")
	return o
}

// Send returns a guard counting in h (which it claims) every request
// against its destination's budget and its client IP's, in one atomic store
// update, before the handler runs. A request over either budget never
// reaches the handler, so nothing is sent for it. It logs one line of kind
// [KindLimited] naming the budget, never the client or the destination. The
// handler reads the destination the guard counted with Account. The body
// may be a form, multipart/form-data or JSON (see [keyfunc.BodyFields]).
func Send(h *store.Handle, o SendOptions) (*SendGuard, error) {
	o = o.WithDefaults()
	if o.Normalize == nil {
		o.Normalize = keyfunc.NormalizeEmail
	}
	if o.Accepted == nil {
		o.Accepted = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(DefaultAcceptedBody))
		})
	}
	names := []string{o.Name + "-destination", o.Name + "-ip"}
	g, err := newGuard(h, guardOptions{
		name:        o.Name,
		names:       names,
		budgets:     []limiter.Budget{o.PerDestination, o.PerIP},
		unavailable: o.Unavailable,
		policy:      limiter.Local,
		ip:          &o.IP,
		logger:      o.Logger,
		observer:    o.Observer,
		shadow:      o.Shadow,
		nets:        o.Networks,
	})
	if err != nil {
		return nil, err
	}
	return &SendGuard{guard: g, o: o, dest: bodyField(o.Field, o.Body), names: names}, nil
}

// Wrap returns next guarded by g.
func (g *SendGuard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.count(w, r, next) })
}

func (g *SendGuard) count(w http.ResponseWriter, r *http.Request, next http.Handler) {
	exempt, ok := g.screen(w, r)
	if !ok {
		return
	}
	skip := g.o.Skip != nil && g.o.Skip(r)
	ip := ""
	if !skip {
		if ip, ok = g.clientIP(w, r); !ok {
			return
		}
	}
	dest := ""
	raw, err := g.dest(r)
	if err == nil {
		dest, err = g.o.Normalize(raw)
	}
	if err == nil && dest == "" {
		err = keyfunc.ErrInvalidAccount
	}
	if err != nil {
		// Malformed or missing: nothing can be sent, and the answer must
		// not tell, so it is Accepted's; the client's address still pays.
		g.warn.Do(func() { g.log.Info("request not sent: no readable destination", "kind", KindNoKey, "err", err) })
		if !g.o.Reveal {
			if !skip && !exempt {
				g.l.Attempt(r.Context(), keyfunc.JoinKeys("ip", ip))
			}
			g.o.Accepted.ServeHTTP(w, r)
			return
		}
		writeProblem(w, http.StatusBadRequest, problem400)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), outcomeKey{}, &outcome{account: dest}))
	if skip {
		next.ServeHTTP(w, r)
		return
	}
	charges := [2]limiter.Charge{
		{Key: keyfunc.JoinKeys("destination", dest), Budget: g.o.PerDestination},
		{Key: keyfunc.JoinKeys("ip", ip), Budget: g.o.PerIP},
	}
	n := len(charges)
	if exempt { // the address budget comes last
		n--
	}
	d, ok := g.attempt(w, r, charges[:n]...)
	if !ok {
		return
	}
	if !d.Allowed && (!d.Unavailable || d.Local) && !d.Shadow {
		g.throttled(&d)
	}
	p := pass{r: r, next: next, entries: sendEntries[:n]}
	if !g.o.Reveal {
		p.hide, p.refuse = true, g.o.Accepted
	}
	g.serve(w, &d, &p)
}

// throttled logs one line of a counted refusal, naming the budget and never
// the client or the destination. An operator can so tell a throttled
// request from one the handler found nothing to send for.
func (g *SendGuard) throttled(d *limiter.Decision) {
	budget := ""
	if k := shownKey(d, nil); k >= 0 && k < len(g.names) {
		budget = g.names[k]
	}
	g.log.Info("request throttled: nothing sent", "kind", KindLimited, "budget", budget)
}

// sendEntries maps the keys of a send attempt to the budgets of its fields.
var sendEntries = []int{0, 1}

package gatecount

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// Options configure a Limits. The zero value trusts no proxy and logs to
// slog.Default().
type Options struct {
	// IP configures the client address of PerIP: the networks of trusted
	// proxies and the header they set.
	IP keyfunc.IPOptions
	// Logger receives the limiters' logs; nil means slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every decision (metrics.Expvar, say).
	Observer limiter.Observer
	// Secret signs the device cookies of SignIn's guards and keys their
	// password count (GATECOUNT_SECRET): at least 32 bytes, the same on
	// every instance. Nil means a key of this process, which a guard on a
	// shared store refuses (see [middleware.ErrNoSecret]).
	Secret []byte
	// SignIn holds the budgets of SignIn's guards where their options
	// leave them zero (RATE_LIMIT_LOGIN_*); zero means middleware's.
	SignIn config.SignInBudgets
	// Send holds the budgets of Send's guards where their options leave
	// them zero (RATE_LIMIT_RESET_*); zero means middleware's.
	Send config.SendBudgets
	// Shadow reports whether the limiter of a name runs in shadow
	// (middleware.Options.Shadow); nil: none does. [FromEnv] sets it from
	// RATE_LIMIT_SHADOW.
	Shadow func(name string) bool
	// Networks answers requests from Block 403 and lets those from Exempt
	// through the per-IP limiters uncounted (middleware.Options.Networks).
	// [FromEnv] reads RATE_LIMIT_BLOCK_NETWORKS and RATE_LIMIT_EXEMPT_NETWORKS.
	Networks keyfunc.Networks
}

// A RouteOption sets one limiter of PerIP, PerCaller, By or [LimitByIP]
// apart. It may change any of the limiter's middleware options, and its
// budget but for the limit and window.
type RouteOption func(*middleware.Options, *limiter.Budget)

// Skip lets the requests skip reports true for through the limiter
// uncounted: a platform's health checker, say (middleware.Options.Skip).
func Skip(skip func(r *http.Request) bool) RouteOption {
	return func(o *middleware.Options, _ *limiter.Budget) { o.Skip = skip }
}

// CountedBy counts the limiter's budget by algorithm a, in place of a
// fixed window. A [limiter.TokenBucket] holds burst (0 means the limit).
// It suits a budget read with config.Vars.Budget:
//
//	b := v.Budget("API_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
//	api := limits.PerCaller("api", b.Limit, b.Window, gatecount.CountedBy(b.Algorithm, b.Burst))
func CountedBy(a limiter.Algorithm, burst int) RouteOption {
	return func(_ *middleware.Options, b *limiter.Budget) { b.Algorithm, b.Burst = a, burst }
}

// Limits makes limiters that count in one store, each on a store handle of
// its own, as one-line middlewares: func(http.Handler) http.Handler. It is
// safe for concurrent use.
//
// A limiter it cannot build (a budget out of range, a name already taken)
// is never a way round the limit. Its middleware answers every request 500
// and runs no handler. The error is logged at once (kind
// [KindInvalidLimit]), and [Limits.Err] returns it, so that a program can
// refuse to start:
//
//	api := limits.PerCaller("api", 30, time.Minute)
//	if err := limits.Err(); err != nil {
//		log.Fatal(err)
//	}
type Limits struct {
	s   *store.Store
	o   Options
	own []func() error // closed by Close, last first

	mu    sync.Mutex
	errs  []error
	names map[string]int // automatic names given, for the next suffix
}

// New returns a Limits counting in s. Closing the Limits closes its
// limiters, not s.
func New(s *store.Store, o Options) *Limits {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Limits{s: s, o: o, names: map[string]int{}}
}

var (
	inMemoryOnce   sync.Once
	inMemoryLimits *Limits
)

// InMemory returns the Limits that [LimitByIP] uses: one store in this
// process's memory, for an app that runs one instance, that lives as long as
// the process. Its Err reports LimitByIP's configuration errors.
func InMemory() *Limits {
	inMemoryOnce.Do(func() {
		inMemoryLimits = New(memory.New(memory.Options{}), Options{})
	})
	return inMemoryLimits
}

// LimitByIP limits each client address to limit requests per window,
// counting in this process's memory: the one-line form for an app that runs
// one instance.
//
//	r.Use(gatecount.LimitByIP(100, time.Minute))
//
// It is InMemory().PerIP("", limit, window): a request over budget is
// answered 429 with Retry-After, and every answer carries the RateLimit
// fields. It trusts no proxy: behind one, build a Limits with
// Options.IP.TrustedProxies (or take one from the environment with
// [FromEnv]). A budget out of range is reported as New describes: every
// request answered 500, the error logged and returned by InMemory().Err().
func LimitByIP(limit int, window time.Duration, opts ...RouteOption) func(http.Handler) http.Handler {
	return InMemory().PerIP("", limit, window, opts...)
}

// PerIP returns a middleware that limits each client address to limit
// requests per window. It is named name in the RateLimit fields, logs and
// metrics, with the handle prefix name + ":". An empty name is made from
// the budget: "ip-100-per-1m". When the store cannot answer, requests go
// through ([limiter.Allow]), counted in memory when the store is busy or
// full: the cheap routes it suits, such as health checks, must keep
// answering.
func (l *Limits) PerIP(name string, limit int, window time.Duration, opts ...RouteOption) func(http.Handler) http.Handler {
	return l.build(kind{name: "ip", policy: limiter.Allow}, name, limit, window, opts)
}

// PerCaller returns a middleware that limits each authenticated caller to
// limit requests per window. It is keyed by the caller ID the app's
// authentication middleware put in the request context with
// [keyfunc.WithCallerID]. A request without one is answered 401. Names
// are as PerIP's, made "caller-30-per-1m" when empty. When the store cannot
// answer it counts in process memory ([limiter.Local]).
func (l *Limits) PerCaller(name string, limit int, window time.Duration, opts ...RouteOption) func(http.Handler) http.Handler {
	return l.build(kind{name: "caller", policy: limiter.Local, key: keyfunc.CallerID, noKey: http.StatusUnauthorized}, name, limit, window, opts)
}

// By returns a middleware that limits each key of key to limit requests
// per window: an API key header, say ([keyfunc.Header]). A request without
// a key is answered 400. Names are as PerIP's, made "key-30-per-1m" when
// empty. When the store cannot answer, requests are answered 503
// ([limiter.Deny]): nothing is known of the route.
func (l *Limits) By(name string, limit int, window time.Duration, key keyfunc.Func, opts ...RouteOption) func(http.Handler) http.Handler {
	if key == nil {
		return l.failed(fmt.Errorf("gatecount: limiter %q: a key function is required", cmp.Or(name, "key")))
	}
	return l.build(kind{name: "key", policy: limiter.Deny, key: key}, name, limit, window, opts)
}

// A kind is what sets PerIP, PerCaller and By apart.
type kind struct {
	name   string         // of the kind, the start of an empty name
	policy limiter.Policy // when the store cannot answer
	key    keyfunc.Func   // nil: the client address
	noKey  int            // the status of a request without a key; 0 means 400
}

func (l *Limits) build(k kind, name string, limit int, window time.Duration, opts []RouteOption) func(http.Handler) http.Handler {
	budget := limiter.Budget{Limit: limit, Window: window}
	m, err := l.limiter(k, name, budget, opts)
	if err != nil {
		return l.failed(err)
	}
	return m.Wrap
}

// failed records err, logs it, and returns the middleware that answers
// every request 500.
func (l *Limits) failed(err error) func(http.Handler) http.Handler {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
	l.o.Logger.Error("rate limiter not built: every request it guards is answered 500", "kind", KindInvalidLimit, "err", err)
	return refuseAll
}

// SignIn returns the middleware of a sign-in guard ([middleware.SignIn]), on
// a handle with prefix o.Name + ":" ("login:" when o.Name is empty, or
// "verify:" for one-time codes, o.Code). Budgets o leaves zero are
// Options.SignIn's, but under o.Code: the cap, the delay threshold, and the
// password count's budget and field too. The password count's Off in either
// turns the count off. A nil device secret is Options.Secret. The client
// address, shadow and networks are as for PerIP, and a nil Logger or
// Observer is l's. A guard it cannot build is reported as New describes.
func (l *Limits) SignIn(o middleware.SignInOptions) func(http.Handler) http.Handler {
	if o.Code {
		o.Name = cmp.Or(o.Name, "verify")
		l.shared(o.Name, &o.IP, &o.Logger, &o.Observer, &o.Shadow, &o.Networks)
		return l.addGuard(o.Name, func(h *store.Handle) (guard, error) { return middleware.SignIn(h, o) })
	}
	o.Name = cmp.Or(o.Name, "login")
	o.AccountIPFailures = cmp.Or(o.AccountIPFailures, l.o.SignIn.AccountIPFailures)
	o.AccountFailures = cmp.Or(o.AccountFailures, l.o.SignIn.AccountFailures)
	o.IPAttempts = cmp.Or(o.IPAttempts, l.o.SignIn.IPAttempts)
	o.NetworkAttempts = cmp.Or(o.NetworkAttempts, l.o.SignIn.NetworkAttempts)
	o.ConsecutiveFailures = cmp.Or(o.ConsecutiveFailures, l.o.SignIn.ConsecutiveFailures)
	o.Delay.After = cmp.Or(o.Delay.After, l.o.SignIn.DelayAfter)
	o.Spray.Off = o.Spray.Off || l.o.SignIn.Spray.Off
	o.Spray.Field = cmp.Or(o.Spray.Field, l.o.SignIn.Spray.Field)
	o.Spray.Budget = cmp.Or(o.Spray.Budget, l.o.SignIn.Spray.Budget)
	if o.Device.Secret == nil {
		o.Device.Secret = l.o.Secret
	}
	l.shared(o.Name, &o.IP, &o.Logger, &o.Observer, &o.Shadow, &o.Networks)
	return l.addGuard(o.Name, func(h *store.Handle) (guard, error) { return middleware.SignIn(h, o) })
}

// Send returns the middleware of a send guard ([middleware.Send]), such as
// password resets, on a handle with prefix o.Name + ":" ("send:" when
// o.Name is empty). Budgets o leaves zero are Options.Send's, and the
// client address is PerIP's; a nil Logger or Observer is l's. A guard it
// cannot build is reported as New describes.
func (l *Limits) Send(o middleware.SendOptions) func(http.Handler) http.Handler {
	o.Name = cmp.Or(o.Name, "send")
	o.PerDestination = cmp.Or(o.PerDestination, l.o.Send.PerDestination)
	o.PerIP = cmp.Or(o.PerIP, l.o.Send.PerIP)
	l.shared(o.Name, &o.IP, &o.Logger, &o.Observer, &o.Shadow, &o.Networks)
	return l.addGuard(o.Name, func(h *store.Handle) (guard, error) { return middleware.Send(h, o) })
}

// shared sets a guard's client address to PerIP's, a nil logger or
// observer to l's, shadow when Options.Shadow names it, and zero networks
// to Options.Networks.
func (l *Limits) shared(name string, ip *keyfunc.IPOptions, log **slog.Logger, obs *limiter.Observer, shadow *bool, nets *keyfunc.Networks) {
	*ip = l.o.IP
	*log = cmp.Or(*log, l.o.Logger)
	if *obs == nil {
		*obs = l.o.Observer
	}
	if l.ShadowOn(name) {
		*shadow = true
	}
	if nets.IsZero() {
		*nets = l.o.Networks
	}
}

// guard is what SignIn and Send build.
type guard interface {
	Wrap(http.Handler) http.Handler
	Close() error
}

// addGuard builds a guard on a handle of its own, prefix name + ":".
func (l *Limits) addGuard(name string, make func(*store.Handle) (guard, error)) func(http.Handler) http.Handler {
	h, err := l.s.Handle(name + ":")
	if err != nil {
		return l.failed(fmt.Errorf("gatecount: guard %q: %w", name, err))
	}
	g, err := make(h)
	if err != nil {
		return l.failed(fmt.Errorf("gatecount: %w", err))
	}
	l.mu.Lock()
	l.own = append(l.own, g.Close)
	l.mu.Unlock()
	return g.Wrap
}

func (l *Limits) limiter(k kind, name string, budget limiter.Budget, opts []RouteOption) (*middleware.Middleware, error) {
	if err := budget.Validate(); err != nil {
		return nil, fmt.Errorf("gatecount: limiter %q: %w", cmp.Or(name, k.name), err)
	}
	if name == "" {
		name = l.autoName(k.name + "-" + strconv.Itoa(budget.Limit) + "-per-" + shortDuration(budget.Window))
	}
	h, err := l.s.Handle(name + ":")
	if err != nil {
		return nil, fmt.Errorf("gatecount: limiter %q: %w", name, err)
	}
	o := middleware.Options{Name: name, Logger: l.o.Logger, Observer: l.o.Observer, IP: l.o.IP,
		Shadow: l.ShadowOn(name), Networks: l.o.Networks, Key: k.key, KeyErrorStatus: k.noKey}
	for _, opt := range opts {
		opt(&o, &budget)
	}
	o.Unavailable = o.Unavailable.Or(k.policy)
	m, err := middleware.New(h, budget, o)
	if err != nil {
		return nil, fmt.Errorf("gatecount: %w", err)
	}
	l.mu.Lock()
	l.own = append(l.own, m.Close)
	l.mu.Unlock()
	return m, nil
}

// autoName returns base, or base-2, base-3… when base was given before.
func (l *Limits) autoName(base string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names[base]++
	if n := l.names[base]; n > 1 {
		return base + "-" + strconv.Itoa(n)
	}
	return base
}

// shortDuration formats d in its largest whole unit: 1m, 15m, 1h, 1d, 90s.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

var problem500 = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"The rate limiter of this route is misconfigured."}` + "\n")

// refuseAll is the middleware of a limiter that could not be built.
func refuseAll(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/problem+json")
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(problem500)
	})
}

// Err returns every error of the limiters l could not build, joined, or nil.
func (l *Limits) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// Store returns the store l counts in, for limiters built with package
// middleware on handles of their own, and for metrics' Watch.
func (l *Limits) Store() *store.Store { return l.s }

// IP returns the client-address settings l's per-IP limiters use, for the
// limiters built with package middleware.
func (l *Limits) IP() keyfunc.IPOptions { return l.o.IP }

// ShadowOn reports whether l's limiter named name runs in shadow, for the
// limiters built with package middleware.
func (l *Limits) ShadowOn(name string) bool { return l.o.Shadow != nil && l.o.Shadow(name) }

// Networks returns the exempt and blocked networks of l's limiters, for the
// limiters built with package middleware.
func (l *Limits) Networks() keyfunc.Networks { return l.o.Networks }

// Close closes l's limiters, then what l opened (the store, when [FromEnv]
// opened it). The middlewares must not be used after.
func (l *Limits) Close() error {
	l.mu.Lock()
	own := l.own
	l.own = nil
	l.mu.Unlock()
	var errs []error
	for i := len(own) - 1; i >= 0; i-- {
		errs = append(errs, own[i]())
	}
	return errors.Join(errs...)
}

package gatecount

import (
	"context"
	"log/slog"
	"os"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// An Option configures [FromEnv].
type Option func(*envOptions)

type envOptions struct {
	lookup   func(string) (string, bool)
	logger   *slog.Logger
	observer limiter.Observer
}

// WithLookup reads the variables through lookup instead of os.LookupEnv.
func WithLookup(lookup func(string) (string, bool)) Option {
	return func(o *envOptions) { o.lookup = lookup }
}

// WithLogger sends the store's and the limiters' logs to log; nil means
// slog.Default().
func WithLogger(log *slog.Logger) Option {
	return func(o *envOptions) { o.logger = log }
}

// WithObserver tells obs of every decision. When obs is also a
// [store.Observer] (metrics.Expvar, the Prometheus Collector), it hears of
// the store's calls too.
func WithObserver(obs limiter.Observer) Option {
	return func(o *envOptions) { o.observer = obs }
}

// FromEnv opens the store the environment chooses, and returns a [Limits]
// counting in it. The variables are package config's: RATE_LIMIT_STORE,
// DATABASE_URL, RATE_LIMIT_STORE_URL, REDIS_URL, GATECOUNT_SECRET,
// RATE_LIMIT_MAX_ENTRIES, TRUSTED_PROXIES… The Limits trusts the proxies
// they name. It has the shadow limiters and the networks they name
// (RATE_LIMIT_SHADOW, RATE_LIMIT_EXEMPT_NETWORKS,
// RATE_LIMIT_BLOCK_NETWORKS). Its SignIn and Send guards take the budgets
// of RATE_LIMIT_LOGIN_* and RATE_LIMIT_RESET_*, and sign device cookies
// with GATECOUNT_SECRET. Close closes the limiters and then the store. A
// bad setting is an error naming every variable at fault; a store chosen
// but not reachable is an error, never a silent fall back to memory. A
// shared store opens through its package, which the program imports for its
// driver (see package config):
//
//	import _ "github.com/gatecount/gatecount/store/postgres"
//
//	m := metrics.NewExpvar("gatecount")
//	limits, err := gatecount.FromEnv(ctx, gatecount.WithObserver(m))
//	if err != nil {
//		log.Fatal(err)
//	}
//	m.Watch("limits", limits.Store())
//	r.With(authenticate, limits.PerCaller("api", 30, time.Minute)).Post("/api", api)
//	r.With(limits.SignIn(middleware.SignInOptions{Failed: wrongPassword})).Post("/login", login)
func FromEnv(ctx context.Context, opts ...Option) (*Limits, error) {
	o := envOptions{lookup: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := config.Parse(o.lookup)
	if err != nil {
		return nil, err
	}
	so := store.Options{Logger: o.logger}
	if obs, ok := o.observer.(store.Observer); ok {
		so.Observer = obs
	}
	opened, err := config.Open(ctx, c, so)
	if err != nil {
		return nil, err
	}
	l := New(opened.Store, Options{
		IP:       c.IP(),
		Logger:   o.logger,
		Observer: o.observer,
		Secret:   c.Secret,
		SignIn:   c.SignIn,
		Send:     c.Send,
		Shadow:   c.Shadow.On,
		Networks: c.Networks(),
	})
	l.own = append(l.own, opened.Close)
	return l, nil
}

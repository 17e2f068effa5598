package gatecount

import (
	"context"
	"log/slog"
	"os"

	"github.com/gatecount/gatecount/config"
	"github.com/gatecount/gatecount/store"
)

// FromEnv opens the store the environment chooses (see package config:
// RATE_LIMIT_STORE, DATABASE_URL, RATE_LIMIT_STORE_URL, GATECOUNT_SECRET,
// RATE_LIMIT_MAX_ENTRIES, TRUSTED_PROXIES, TRUSTED_PROXY_HEADER…) and returns
// a Limits counting in it, trusting the proxies it names, with the shadow
// limiters and the networks it names (RATE_LIMIT_SHADOW,
// RATE_LIMIT_EXEMPT_NETWORKS, RATE_LIMIT_BLOCK_NETWORKS). Close closes the
// limiters and then the store. A bad setting is an error naming every
// variable at fault; a store chosen but not reachable is an error, never a
// silent fall back to memory. A shared store opens through its package,
// which the program imports for its driver (see package config):
//
//	import _ "github.com/gatecount/gatecount/store/postgres"
//
//	limits, err := gatecount.FromEnv(ctx)
//	if err != nil {
//		log.Fatal(err)
//	}
//	r.With(authenticate, limits.PerCaller("api", 30, time.Minute)).Post("/api", api)
func FromEnv(ctx context.Context) (*Limits, error) {
	return FromLookup(ctx, os.LookupEnv, nil)
}

// FromLookup is FromEnv reading the variables through lookup, logging to
// log (nil means slog.Default()).
func FromLookup(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (*Limits, error) {
	c, err := config.FromEnv(lookup)
	if err != nil {
		return nil, err
	}
	o, err := config.Open(ctx, c, store.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	l := New(o.Store, Options{IP: c.IP(), Logger: log, Shadow: c.Shadow.On, Networks: c.Networks()})
	l.own = append(l.own, o.Close)
	return l, nil
}

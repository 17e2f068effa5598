package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
)

// ErrURL is matched by the error OpenURL returns for a URL it cannot use.
// The error never repeats the URL's password.
var ErrURL = errors.New("redisstore: invalid Redis URL")

// OpenURL returns a Redis store over a client of its own for rawURL, the
// value of RATE_LIMIT_STORE_URL:
//
//	redis://[user:password@]host[:port][/db][?option=value&...]
//	rediss://...  the same, over TLS
//
// The options are those of go-redis's ParseURL (dial_timeout, pool_size,
// max_retries, ...). Unless the URL sets them, OpenURL picks settings for a
// limit store: the client honours the deadline of each call
// (context_timeout_enabled), never retries a command on its own
// (max_retries -1, as a retried write can count an attempt twice), dials,
// reads, writes and waits for a pooled connection for at most the guard's
// deadline, and pools at least as many connections as the guard lets calls
// run at once. Closing the store closes the client.
//
// Like New, OpenURL checks that Redis answers and returns an error matching
// store.ErrUnavailable if it does not; an unusable URL gives an error
// matching ErrURL.
func OpenURL(ctx context.Context, rawURL string, o Options) (*store.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: it does not parse as a URL", ErrURL)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("%w: %s: want a redis:// or rediss:// URL", ErrURL, u.Redacted())
	}
	ro, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrURL, u.Redacted(), err)
	}
	o.Store = o.Store.WithDefaults()
	q := u.Query()
	set := func(name string) bool { return q.Has(name) }
	d := o.Store.Deadline
	if !set("context_timeout_enabled") {
		ro.ContextTimeoutEnabled = true
	}
	if !set("max_retries") {
		ro.MaxRetries = -1
	}
	if !set("dial_timeout") {
		ro.DialTimeout = d
	}
	if !set("read_timeout") {
		ro.ReadTimeout = d
	}
	if !set("write_timeout") {
		ro.WriteTimeout = d
	}
	if !set("pool_timeout") {
		ro.PoolTimeout = d
	}
	if !set("pool_size") {
		ro.PoolSize = max(10*runtime.GOMAXPROCS(0), o.Store.MaxInFlight)
	}
	c := redis.NewClient(ro)
	b, err := NewBackend(ctx, c, o)
	if err != nil {
		c.Close()
		return nil, err
	}
	b.ownsClient = true
	return store.New(b, o.Store), nil
}

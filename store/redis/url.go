package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// ErrURL is matched by the error [OpenURL] returns for a URL it cannot use.
// The error never repeats the URL's password.
var ErrURL = errors.New("redis: invalid Redis URL")

// OpenURL returns a Redis store over a client of its own for rawURL, the
// value of RATE_LIMIT_STORE_URL:
//
//	redis://[user:password@]host[:port][/db][?option=value&...]
//	rediss://...  the same, over TLS
//	redis://[user:password@]host:port?addr=host2:port2&addr=host3:port3
//
// The URL may name a single server or any node of a Redis Cluster. OpenURL
// asks the server (INFO cluster). On a Cluster node it uses a cluster
// client, which finds the other nodes by itself. The third form, with one
// or more addr options, names more nodes of a Cluster to start from. The
// store can then start while the first one is down. The third form always
// means a Cluster. A Cluster has only database 0: a URL naming another is
// refused.
//
// The options are those of go-redis's ParseURL (dial_timeout, pool_size,
// max_retries, ...), or of ParseClusterURL for a Cluster. Unless the URL
// sets them, OpenURL picks settings for a limit store:
//
//   - The client honours the deadline of each call (ContextTimeoutEnabled).
//   - It never retries a command on its own (max_retries -1), as a retried
//     write can count an attempt twice. A cluster client still follows
//     MOVED and ASK redirects, which Redis answers without running the
//     command.
//   - It dials, reads, writes and waits for a pooled connection for at
//     most the guard's deadline.
//   - It pools at least as many connections as the guard lets calls run at
//     once (per node, on a Cluster).
//
// go-redis's own logs go to the store's logger (see [NewRedisLogger]).
// Closing the store closes the client.
//
// Like [New], OpenURL checks that Redis answers, and returns an error
// matching [store.ErrUnavailable] if it does not. It refuses a server that
// may evict live entries ([ErrEvicting]) unless Options.AllowEviction. An
// unusable URL gives an error matching [ErrURL].
func OpenURL(ctx context.Context, rawURL string, o Options) (*store.Store, error) {
	return storekit.Build(&o.Store, func() (*Backend, error) {
		goredis.SetLogger(NewRedisLogger(storekit.LoggerFor(o.Store, "redis")))
		c, err := openClient(ctx, rawURL, o.Store)
		if err != nil {
			return nil, err
		}
		b, err := NewBackend(ctx, c, o)
		if err != nil {
			c.Close()
			return nil, err
		}
		b.ownsClient = true
		return b, nil
	})
}

// openClient returns a client for rawURL with the settings OpenURL picks:
// a cluster client when the URL names more than one node, or a node of a
// Cluster.
func openClient(ctx context.Context, rawURL string, so store.Options) (goredis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: it does not parse as a URL", ErrURL)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("%w: %s: want a redis:// or rediss:// URL", ErrURL, storekit.RedactURL(u.String()))
	}
	q := u.Query()
	if q.Has("addr") {
		return clusterClient(u, q, so)
	}
	ro, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrURL, storekit.RedactURL(u.String()), err)
	}
	withDefaults(q, so, clientSettings{&ro.ContextTimeoutEnabled, &ro.MaxRetries, &ro.PoolSize,
		&ro.DialTimeout, &ro.ReadTimeout, &ro.WriteTimeout, &ro.PoolTimeout})
	c := goredis.NewClient(ro)
	cluster, err := isCluster(ctx, c, so.Deadline)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: redis does not answer: %w", &store.UnavailableError{Reason: store.ReasonDown, Err: err})
	}
	if !cluster {
		return c, nil
	}
	c.Close()
	if ro.DB != 0 {
		return nil, fmt.Errorf("%w: %s: the server is a Redis Cluster node, and a Cluster has only database 0", ErrURL, storekit.RedactURL(u.String()))
	}
	return clusterClient(u, q, so)
}

// clusterClient returns a cluster client for u, whose query is q.
func clusterClient(u *url.URL, q url.Values, so store.Options) (goredis.UniversalClient, error) {
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("%w: %s: a Redis Cluster has only database 0", ErrURL, storekit.RedactURL(u.String()))
	}
	if q.Has("db") {
		return nil, fmt.Errorf("%w: %s: a Redis Cluster has only database 0 (no db option)", ErrURL, storekit.RedactURL(u.String()))
	}
	cu := *u
	cu.Path = ""
	co, err := goredis.ParseClusterURL(cu.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrURL, storekit.RedactURL(u.String()), err)
	}
	withDefaults(q, so, clientSettings{&co.ContextTimeoutEnabled, &co.MaxRetries, &co.PoolSize,
		&co.DialTimeout, &co.ReadTimeout, &co.WriteTimeout, &co.PoolTimeout})
	return goredis.NewClusterClient(co), nil
}

// clientSettings points at the settings a one-server and a cluster client
// share, in goredis.Options or goredis.ClusterOptions.
type clientSettings struct {
	contextTimeout                 *bool
	maxRetries, poolSize           *int
	dial, read, write, poolTimeout *time.Duration
}

// withDefaults gives the settings the URL's query q leaves out the store's
// values. Calls are bounded by their context, with no retries (a retried
// script may count twice). Timeouts are the guard's deadline, and the pool
// is as large as the calls the guard lets run at once.
func withDefaults(q url.Values, so store.Options, s clientSettings) {
	*s.contextTimeout = true
	if !q.Has("max_retries") {
		*s.maxRetries = -1
	}
	for name, d := range map[string]*time.Duration{
		"dial_timeout": s.dial, "read_timeout": s.read, "write_timeout": s.write, "pool_timeout": s.poolTimeout,
	} {
		if !q.Has(name) {
			*d = so.Deadline
		}
	}
	if !q.Has("pool_size") {
		*s.poolSize = poolSize(so)
	}
}

// poolSize is the pool OpenURL gives a client (per node, on a Cluster).
func poolSize(so store.Options) int {
	return max(10*runtime.GOMAXPROCS(0), so.MaxInFlight)
}

// isCluster reports whether the server c talks to is a node of a Redis
// Cluster, from INFO cluster, or CLUSTER INFO where INFO is not allowed. A
// server that answers neither is taken for a single server. The error is
// that of a server that does not answer.
func isCluster(ctx context.Context, c *goredis.Client, d time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	info, err := c.Info(ctx, "cluster").Result()
	switch {
	case err == nil:
		return infoField(info, "cluster_enabled") == "1", nil
	case !isRedisError(err):
		return false, err
	case strings.Contains(err.Error(), "not allowed in cluster mode"):
		return true, nil // a URL naming a database other than 0
	}
	if err := c.ClusterInfo(ctx).Err(); err != nil {
		if !isRedisError(err) {
			return false, err
		}
		return false, nil // "cluster support disabled", or not allowed
	}
	return true, nil
}

// isRedisError reports whether err is an error answer of the server (as
// opposed to one of the network or the client).
func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && !errors.Is(err, goredis.ErrClosed)
}

// infoField returns the value of field in an INFO answer, or "".
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

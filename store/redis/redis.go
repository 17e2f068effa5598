package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/internal/loop"
	"github.com/gatecount/gatecount/internal/option"
	"github.com/gatecount/gatecount/internal/turns"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/storekit"
)

// Defaults of Options.
const (
	DefaultSweepInterval = 15 * time.Second
	DefaultMaxRetries    = 32
)

// ErrContention is the cause of the unavailable error (ReasonOverloaded) an
// Update returns when it conflicted with concurrent updates of its keys
// Options.MaxRetries times in a row.
var ErrContention = errors.New("redis: update kept conflicting with concurrent updates")

// ErrCorrupt is returned for a key that holds something other than an entry
// in this store's encoding.
var ErrCorrupt = errors.New("redis: value not in the store's encoding")

// Options configure a Redis store.
type Options struct {
	// Secret keys the HMAC that names every key; at least
	// [keyhash.MinSecretLen] bytes, the same on every instance of the app.
	Secret []byte
	// MaxEntries bounds the live entries under Secret; 0 means
	// 1,000,000.
	MaxEntries int
	// MaxRetries bounds how many times an Update that conflicts with
	// concurrent updates of its keys is started over; 0 means
	// [DefaultMaxRetries]. Past it, the Update is answered unavailable
	// (ReasonOverloaded, [ErrContention]).
	MaxRetries int
	// SweepInterval is how often the store sweeps in the background; 0
	// means [DefaultSweepInterval].
	SweepInterval time.Duration
	// AllowEviction accepts a Redis that may evict live entries (a
	// maxmemory with a maxmemory-policy other than noeviction), which New
	// otherwise refuses ([ErrEvicting]). An evicted count frees the budget of
	// whoever it counted: the store logs an error of kind [KindEvicting] at
	// start, and of kind [KindEvicted] whenever keys were evicted.
	AllowEviction bool
	// Store configures the guard.
	Store store.Options
}

// New returns a Redis store over c behind the guard. It checks that Redis
// answers (an error matching [store.ErrUnavailable] if not). It checks that
// Redis cannot evict live entries ([ErrEvicting], unless o.AllowEviction).
// It loads its scripts and starts a background sweep, which runs until the
// store is closed. Closing the store does not close c.
func New(ctx context.Context, c goredis.UniversalClient, o Options) (*store.Store, error) {
	return storekit.Build(&o.Store, func() (*Backend, error) { return NewBackend(ctx, c, o) })
}

// Backend is the Redis store's [store.Backend] and [store.Counter]. Most code
// wants New, which wraps it in the guard; Store.Backend returns it.
type Backend struct {
	c          goredis.UniversalClient
	ownsClient bool
	cluster    bool // c is a cluster client: Spread spreads handles over its masters
	prompt     bool // the client honours call deadlines (OpenURL's does)
	hasher     *keyhash.Hasher
	fp         string
	tags       string // the set of the fingerprint's tags
	bound      *storekit.Bound
	max        int
	warnAt     int
	maxRetries int
	deadline   time.Duration
	log        *slog.Logger
	sweepLog   rate.Sometimes
	oomLog     rate.Sometimes

	allowEviction bool
	factsMu       sync.Mutex
	facts         map[string]serverFacts // server address -> its settings, as last read

	retries atomic.Uint64
	misses  atomic.Uint64
	spaces  sync.Map     // prefix -> *space
	turns   *turns.Turns // the keys' stripes: Updates of a key take turns
	known   [knownSlots]knownLive
	clock   serverClock

	mu    sync.Mutex
	live  map[string]*atomic.Int64 // tag -> its live entries, as last counted
	total atomic.Int64             // the sum of live

	sweepMu   sync.Mutex
	fullSwept atomic.Int64 // when (Unix ns) a new key finding the bound reached last started a sweep
	sweeper   *loop.Loop
	closeOnce sync.Once
	closeErr  error
}

// space is what the backend knows of one prefix.
type space struct {
	tag        string
	keyPrefix  string                // "gatecount:{tag}:fingerprint:"
	index      [indexKeys + 1]string // the live index's keys (see indexOf)
	live       *atomic.Int64
	registered atomic.Bool
	shards     []*space // once spread: the shards, each a space of its own
}

// NewBackend returns the backend New wraps, and starts its background sweep.
// o.Store should already have its defaults (see [store.Options.WithDefaults]).
func NewBackend(ctx context.Context, c goredis.UniversalClient, o Options) (*Backend, error) {
	h, err := keyhash.New(o.Secret)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	option.Default(&o.MaxEntries, storekit.DefaultMaxEntriesDatabase)
	option.Default(&o.MaxRetries, DefaultMaxRetries)
	option.Default(&o.SweepInterval, DefaultSweepInterval)
	option.Default(&o.Store.Deadline, o.Store.WithDefaults().Deadline)
	log := storekit.LoggerFor(o.Store, "redis")
	b := &Backend{
		c:          c,
		hasher:     h,
		fp:         h.Fingerprint(),
		tags:       "gatecount:{" + h.Fingerprint() + "}:tags",
		bound:      storekit.NewBound(o.MaxEntries, log),
		max:        o.MaxEntries,
		warnAt:     o.MaxEntries - o.MaxEntries/5,
		maxRetries: o.MaxRetries,
		deadline:   o.Store.Deadline,
		log:        log,
		sweepLog:   rate.Sometimes{Interval: time.Minute},
		oomLog:     rate.Sometimes{Interval: time.Minute},

		allowEviction: o.AllowEviction,
		facts:         make(map[string]serverFacts),
		live:          make(map[string]*atomic.Int64),
		clock:         serverClock{base: time.Now()},
		prompt:        honoursDeadlines(c),
		turns:         turns.New(),
	}
	// A Cluster with a master down starts, and its limiters on the other
	// masters count: what the master serves is checked once it answers.
	_, cluster := c.(*goredis.ClusterClient)
	b.cluster = cluster
	if !cluster {
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redis: redis does not answer: %w", &store.UnavailableError{Reason: store.ReasonDown, Err: err})
		}
	}
	if err := b.checkServers(ctx); err != nil {
		return nil, err
	}
	for _, s := range []*script{readScript, writeScript, countScript, algoScript, tidyScript} {
		if err := s.load(ctx, c); err != nil && !cluster { // a node without the script is sent it (EVAL)
			return nil, fmt.Errorf("redis: loading a script: %w", &store.UnavailableError{Reason: store.ReasonDown, Err: err})
		}
	}
	if _, err := b.Sweep(ctx); err != nil {
		if !cluster {
			return nil, err
		}
		b.log.Warn("limit store sweep failed at start: the count of live entries under other limiters is taken at the next sweep",
			"kind", storekit.KindSweepFailed, "err", err)
	}
	b.sweeper = loop.Go(ctx, func(ctx context.Context) { loop.Every(ctx, loop.Task{Every: o.SweepInterval, Do: b.sweepTick}) })
	return b, nil
}

// Shared reports true: every instance using the Redis sees the same entries.
func (b *Backend) Shared() bool { return true }

type backing struct {
	c  goredis.UniversalClient
	fp string
}

// Backing returns the client and the secret's fingerprint: two handles with
// one prefix on one client and secret are refused.
func (b *Backend) Backing() any { return backing{b.c, b.fp} }

// Prompt reports whether calls return once their context is done. It is
// true for a *goredis.Client with ContextTimeoutEnabled, as the client
// [OpenURL] makes has. That setting bounds every wait for a connection,
// dial, write and read by the call's deadline. The guard then runs calls on
// the caller's goroutine; with any other client it runs them on goroutines
// of its own, and answers at the deadline however long they take.
func (b *Backend) Prompt() bool { return b.prompt }

// honoursDeadlines reports whether c's calls return once their context's
// deadline passes.
func honoursDeadlines(c goredis.UniversalClient) bool {
	rc, ok := c.(*goredis.Client)
	return ok && rc.Options().ContextTimeoutEnabled
}

// Fingerprint returns the fingerprint of the secret, as it appears in key
// names.
func (b *Backend) Fingerprint() string { return b.fp }

// Retries returns how many update attempts conflicted with a concurrent
// update and were started over, since the backend was made.
func (b *Backend) Retries() uint64 { return b.retries.Load() }

// Misses returns how many times an Update guessed that its keys had no
// entries, and was wrong (see Update).
func (b *Backend) Misses() uint64 { return b.misses.Load() }

// Live returns the live entries under the secret, as last counted.
func (b *Backend) Live() int { return int(b.total.Load()) }

// Close stops the background sweep and waits for it; the client is closed
// if the store opened it ([OpenURL]). Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.sweeper.Stop()
		if b.ownsClient {
			b.closeErr = b.c.Close()
		}
	})
	return b.closeErr
}

// poolWait turns a call's failure to get a connection of the client's pool
// in time into the guard's overloaded answer. That is a busy pool, not a
// failing server, so the call neither opens the breaker nor lets an attempt
// through uncounted.
func poolWait(err *error) {
	if *err != nil && errors.Is(*err, goredis.ErrPoolTimeout) {
		*err = storekit.WaitedOut("a connection of the pool", *err)
	}
}

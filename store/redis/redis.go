// Package redis is the Redis limit store: entries in a Redis shared by
// every instance of an app, on the Redis server's clock. It works over any
// go-redis v9 UniversalClient: a single node, Sentinel (a failover client)
// or Cluster. The examples import go-redis as goredis:
//
//	import goredis "github.com/redis/go-redis/v9"
//
//	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	s, err := redis.New(ctx, client, redis.Options{Secret: secret})
//	...
//	signIn, err := s.Handle("signin:")
//
// or, from the environment configuration, with a URL:
//
//	RATE_LIMIT_STORE_URL=redis://[user:password@]host:6379/0   plain TCP
//	RATE_LIMIT_STORE_URL=rediss://[user:password@]host:6380/0  TLS
//	RATE_LIMIT_STORE_URL=redis://host:7000?addr=host2:7001      a Cluster, from more nodes
//
// which OpenURL turns into a store with a client of its own (see OpenURL for
// the client settings it picks). A URL naming a node of a Redis Cluster
// opens a cluster client. Sentinel, and any client configured by hand, go
// through New.
//
// # Keys
//
// No key is kept in clear: an entry lives under an HMAC-SHA-256 of its
// prefix and key under the secret, and Redis expires it itself. After the
// secret is rotated, entries written under the old one are neither read nor
// counted; Redis removes them when they expire. All keys of one handle share
// a Redis Cluster hash tag, so that one attempt's keys are counted in one
// script on one node: one limiter's traffic goes to one master, while
// different limiters spread over the masters, and one call cannot count keys
// of two handles together. Counting is exact across any number of
// instances, and the bound (Options.MaxEntries) is kept without scanning;
// DESIGN.md says how.
//
// # Redis settings
//
// Redis must not evict: set maxmemory-policy noeviction, or no maxmemory.
// Evicting a live count would free an attacker's budget, and every entry
// has a TTL, so even the volatile-* policies evict them. At start the store
// reads maxmemory and maxmemory-policy of every server it writes to (each
// master of a Cluster), from INFO or else CONFIG GET, and refuses a server
// that may evict with an error matching ErrEvicting, unless
// Options.AllowEviction accepts it (then it logs an error of kind
// KindEvicting). Where neither command is allowed (some managed services)
// it logs a warning of kind KindEvictionUnchecked: check the setting by
// hand then. Each background sweep reads them again and logs an error of
// kind KindEvicting when a server's settings changed so that it may evict,
// and of kind KindEvicted when a server evicted keys since the last sweep.
//
// With noeviction and a maxmemory, a full Redis refuses writes with an OOM
// answer: the store answers it full (store.ErrFull, ReasonFull), as it
// answers a full bound, and logs an error of kind KindOOM (at most once a
// minute). Keys it holds are refused too, since every count is a write:
// size maxmemory for the bound (see the README for the memory an entry
// takes).
//
// A server that keeps nothing on disk (no appendonly, no save) forgets
// every count when it restarts: the store logs a warning of kind
// KindNotPersistent at start. Redis 6.2 or later is needed (SET PXAT), with
// Lua scripting.
//
// # Cluster
//
// Over a *goredis.ClusterClient (OpenURL makes one for a URL naming a Cluster
// node) each script runs on the master of its hash tag's slot; the list of
// tags lives on the slot of the fingerprint's tag. Scripts are sent so that
// the client never runs them a second time after a lost answer (a retried
// write can count an attempt twice), while it still follows MOVED and ASK
// redirects, which Redis answers without running them. A Cluster with a
// master down still opens: the masters that answer are checked (a warning
// of kind KindEvictionUnchecked names the others, checked at a later
// sweep), a script missing on a node is sent in full, and a sweep counts
// the live entries of the tags it can reach. Run a Cluster with
// cluster-require-full-coverage no: otherwise a master that fails stops
// every slot, and every limiter with it.
//
// # Faults
//
// The guard of package store bounds every call by its deadline, bounds the
// calls in flight and opens its breaker when Redis keeps failing; the store
// recovers by itself when Redis answers again. Give a client of your own
// ContextTimeoutEnabled, so that a call abandoned at its deadline does not
// hold its connection until the read timeout (a *goredis.Client with it is
// also called on the caller's goroutine, see Backend.Prompt), and
// MaxRetries -1: a command retried after a lost reply may count an attempt
// twice.
package redis

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/internal/turns"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
)

// Defaults of Options.
const (
	DefaultSweepInterval = 15 * time.Second
	DefaultMaxRetries    = 32
)

// Log kinds: the stable "kind" attribute of the logs this store writes, on
// top of those of package store.
const (
	// KindEvicting: Redis's maxmemory-policy may evict live entries.
	KindEvicting = "limit-store-evicting"
	// KindEvictionUnchecked: the maxmemory-policy could not be read.
	KindEvictionUnchecked = "limit-store-eviction-unchecked"
	// KindSweepFailed: a background sweep failed.
	KindSweepFailed = "limit-store-sweep-failed"
	// KindEvicted: Redis evicted keys since the last sweep.
	KindEvicted = "limit-store-evicted"
	// KindOOM: Redis is at its maxmemory and refuses writes.
	KindOOM = "limit-store-redis-oom"
	// KindNotPersistent: Redis keeps nothing on disk, so a restart
	// forgets every count.
	KindNotPersistent = "limit-store-not-persistent"
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
	// keyhash.MinSecretLen bytes, the same on every instance of the app.
	Secret []byte
	// MaxEntries bounds the live entries under Secret; 0 means
	// store.DefaultMaxEntriesDatabase (1,000,000).
	MaxEntries int
	// MaxRetries bounds how many times an Update that conflicts with
	// concurrent updates of its keys is started over; 0 means
	// DefaultMaxRetries. Past it, the Update is answered unavailable
	// (ReasonOverloaded, ErrContention).
	MaxRetries int
	// SweepInterval is how often the store sweeps in the background; 0
	// means DefaultSweepInterval.
	SweepInterval time.Duration
	// AllowEviction accepts a Redis that may evict live entries (a
	// maxmemory with a maxmemory-policy other than noeviction), which New
	// otherwise refuses (ErrEvicting). An evicted count frees the budget of
	// whoever it counted: the store logs an error of kind KindEvicting at
	// start, and of kind KindEvicted whenever keys were evicted.
	AllowEviction bool
	// Store configures the guard.
	Store store.Options
}

// New returns a Redis store over c behind the guard. It checks that Redis
// answers (an error matching store.ErrUnavailable if not) and cannot evict
// live entries (ErrEvicting, unless o.AllowEviction), loads its scripts and
// starts a background sweep, which runs until the store is closed. Closing
// the store does not close c.
func New(ctx context.Context, c goredis.UniversalClient, o Options) (*store.Store, error) {
	return store.Build(&o.Store, func() (*Backend, error) { return NewBackend(ctx, c, o) })
}

// Backend is the Redis store's store.Backend and store.Counter. Most code
// wants New, which wraps it in the guard; Store.Backend returns it.
type Backend struct {
	c          goredis.UniversalClient
	ownsClient bool
	prompt     bool // the client honours call deadlines (OpenURL's does)
	hasher     *keyhash.Hasher
	fp         string
	tags       string // the set of the fingerprint's tags
	bound      *store.Bound
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
	sweeper   *store.Loop
	closeOnce sync.Once
	closeErr  error
}

// space is what the backend knows of one prefix.
type space struct {
	tag        string
	keyPrefix  string // "gatecount:{tag}:fingerprint:"
	idx        string // the live index
	live       *atomic.Int64
	registered atomic.Bool
}

// NewBackend returns the backend New wraps, and starts its background sweep.
// o.Store should already have its defaults (see store.Options.WithDefaults).
func NewBackend(ctx context.Context, c goredis.UniversalClient, o Options) (*Backend, error) {
	h, err := keyhash.New(o.Secret)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = store.DefaultMaxEntriesDatabase
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.Store.Deadline <= 0 {
		o.Store.Deadline = store.DefaultDeadline
	}
	log := o.Store.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("store", "redis")
	b := &Backend{
		c:          c,
		hasher:     h,
		fp:         h.Fingerprint(),
		tags:       "gatecount:{" + h.Fingerprint() + "}:tags",
		bound:      store.NewBound(o.MaxEntries, log),
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
	if !cluster {
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redis: redis does not answer: %w", store.NewUnavailableError(store.ReasonDown, err))
		}
	}
	if err := b.checkServers(ctx); err != nil {
		return nil, err
	}
	for _, s := range []*script{readScript, writeScript, countScript, tidyScript} {
		if err := s.load(ctx, c); err != nil && !cluster { // a node without the script is sent it (EVAL)
			return nil, fmt.Errorf("redis: loading a script: %w", store.NewUnavailableError(store.ReasonDown, err))
		}
	}
	if _, err := b.Sweep(ctx); err != nil {
		if !cluster {
			return nil, err
		}
		b.log.Warn("limit store sweep failed at start: the count of live entries under other limiters is taken at the next sweep",
			"kind", KindSweepFailed, "err", err)
	}
	b.sweeper = store.Go(ctx, func(ctx context.Context) { store.Every(ctx, o.SweepInterval, b.sweepTick) })
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

// Prompt reports whether calls return once their context is done: true for
// a *goredis.Client with ContextTimeoutEnabled (the client OpenURL makes has
// it), which bounds every wait for a connection, dial, write and read by
// the call's deadline. The guard then runs calls on the caller's goroutine;
// with any other client it runs them on goroutines of its own, and answers
// at the deadline however long they take.
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

func (b *Backend) space(prefix string) *space {
	if sp, ok := b.spaces.Load(prefix); ok {
		return sp.(*space)
	}
	sum := b.hasher.Sum(prefix, "") // keys are never empty: no key shares it
	tag := hex.EncodeToString(sum[:8])
	kp := "gatecount:{" + tag + "}:" + b.fp + ":"
	sp := &space{tag: tag, keyPrefix: kp, idx: kp + "live", live: b.liveOf(tag)}
	v, _ := b.spaces.LoadOrStore(prefix, sp)
	return v.(*space)
}

// liveOf returns the counter of a tag's live entries.
func (b *Backend) liveOf(tag string) *atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.live[tag]
	if n == nil {
		n = new(atomic.Int64)
		b.live[tag] = n
	}
	return n
}

// setLive records that a tag has n live entries.
func (b *Backend) setLive(n *atomic.Int64, v int64) {
	if v < 0 {
		return
	}
	b.total.Add(v - n.Swap(v))
}

// elsewhere returns the live entries under the tags other than sp's.
func (b *Backend) elsewhere(sp *space) int64 {
	return max(b.total.Load()-sp.live.Load(), 0)
}

// keySet is what one call needs of its keys. The arrays hold a lone key,
// the common case, without allocating more.
type keySet struct {
	names   []string      // the Redis keys, then the live index
	members []string      // the keys' members in the live index
	slots   []int         // the keys' slots in the known-live cache
	tags    []uint64      // the keys' tags in those slots
	locks   lockorder.Set // the keys' stripes

	names1   [2]string
	members1 [1]string
	slots1   [1]int
	tags1    [1]uint64
}

// keys names keys under sp.
func (b *Backend) keys(sp *space, prefix string, keys []string) *keySet {
	ks := new(keySet)
	b.nameKeys(ks, sp, prefix, keys)
	return ks
}

// nameKeys fills ks with the names of keys under sp.
func (b *Backend) nameKeys(ks *keySet, sp *space, prefix string, keys []string) {
	n := len(keys)
	if n == 1 {
		ks.names, ks.members, ks.slots, ks.tags = ks.names1[:], ks.members1[:], ks.slots1[:], ks.tags1[:]
	} else {
		ks.names = make([]string, n+1)
		ks.members = make([]string, n)
		ks.slots = make([]int, n)
		ks.tags = make([]uint64, n)
	}
	kp := sp.keyPrefix
	var buf [128]byte
	for i, k := range keys {
		sum := b.hasher.Sum(prefix, k)
		name := append(buf[:0], kp...)
		name = hex.AppendEncode(name, sum[:])
		name = append(name, sum[len(sum)-memberLen:]...)
		both := string(name) // one allocation for the name and the member
		ks.names[i] = both[:len(both)-memberLen]
		ks.members[i] = both[len(both)-memberLen:]
		x := int(binary.BigEndian.Uint16(sum[:2]))
		ks.slots[i] = x % knownSlots // its stripe is turns.Queue(x): the same lock guards it
		ks.tags[i] = binary.BigEndian.Uint64(sum[2:10]) | 1
		ks.locks.Add(turns.Queue(uint64(x)))
	}
	ks.names[n] = sp.idx
}

// memberLen is the length of an entry's member in its live index: the last
// eight bytes of the entry's HMAC, raw. The index costs memory per entry;
// eight raw bytes instead of the name's 64 hex digits save 64 bytes of it
// (see TestMemoryPerEntry). Two entries of one handle share a member with a
// chance of about n²/2⁶⁵ for n entries, which would only make the bound
// count one entry fewer.
const memberLen = 8

// knownSlots is the size of the cache of keys known to be live, a multiple
// of the number of stripes (turns.Queues) Update spreads keys over.
const knownSlots = 8 * turns.Queues

// knownLive is a slot of the cache of keys this process saw live, which
// tells Update when it is worth guessing that its keys are absent. A slot
// is guarded by the stripe lock of the keys that map to it.
type knownLive struct {
	tag uint64 // 0: empty
	exp int64  // Unix ms
}

// register lists sp's tag under the fingerprint, once.
func (b *Backend) register(ctx context.Context, sp *space) {
	if sp.registered.Load() {
		return
	}
	if b.c.SAdd(ctx, b.tags, sp.tag).Err() == nil {
		sp.registered.Store(true)
	}
}

// decode splits a raw value into its expiry and value.
func decode(raw string) (exp int64, value string, err error) {
	i := strings.IndexByte(raw, ':')
	if i > 0 {
		exp, err = strconv.ParseInt(raw[:i], 10, 64)
		if err == nil {
			return exp, raw[i+1:], nil
		}
	}
	return 0, "", ErrCorrupt
}

// read runs readScript on names and returns the server's time in Unix
// milliseconds; raws[i] is the raw value of names[i] and present[i]
// whether there is one.
func (b *Backend) read(ctx context.Context, names []string, raws []string, present []bool) (int64, error) {
	res, err := b.eval(ctx, readScript, names).Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != len(names)+2 {
		return 0, fmt.Errorf("redis: read answered %d values for %d keys", len(res)-2, len(names))
	}
	now, err := serverTime(res[0], res[1])
	if err != nil {
		return 0, err
	}
	b.clock.observe(now)
	for i := range names {
		raws[i], present[i] = "", false
		if s, ok := res[i+2].(string); ok {
			raws[i], present[i] = s, true
		}
	}
	return now, nil
}

// serverTime turns TIME's seconds and microseconds into Unix milliseconds.
func serverTime(sec, usec any) (int64, error) {
	s, _ := sec.(string)
	u, _ := usec.(string)
	si, err1 := strconv.ParseInt(s, 10, 64)
	ui, err2 := strconv.ParseInt(u, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("redis: TIME answered %v %v", sec, usec)
	}
	return si*1000 + ui/1000, nil
}

// Read implements store.Backend.
func (b *Backend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	sp := b.space(prefix)
	names := b.keys(sp, prefix, keys).names[:len(keys)]
	raws := make([]string, len(keys))
	present := make([]bool, len(keys))
	now, err := b.read(ctx, names, raws, present)
	if err != nil {
		return nil, err
	}
	out := make([]store.Entry, len(keys))
	for i := range keys {
		if !present[i] {
			continue
		}
		exp, v, err := decode(raws[i])
		if err != nil {
			return nil, err
		}
		if exp > now {
			out[i] = store.Entry{Value: []byte(v), ExpiresAt: time.UnixMilli(exp)}
		}
	}
	return out, nil
}

// Update implements store.Backend.
//
// Updates of one key from this process take turns, under a local lock, so
// that they never conflict with each other; only other processes' updates
// can. When no key of the update is known here to be live, Update first
// guesses that none is: it calls apply with no entries and an estimate of
// the server's time (see serverClock), and sends its result to the write
// script, which checks the guess (every key absent, the estimate not after
// the server's time) as it checks a read. A right guess saves the read's
// round trip. A wrong one writes nothing and is answered with what the
// keys hold, as a read would be, and the Update goes on from that read: it
// costs no more round trips than reading first.
func (b *Backend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	sp := b.space(prefix)
	n := len(keys)
	u := newUpdateCall(n)
	ks := &u.ks
	b.nameKeys(ks, sp, prefix, keys)
	if err := b.turns.Take(ctx, &ks.locks); err != nil {
		return err
	}
	defer b.turns.Give(&ks.locks)
	u.setHead(&b.max)
	var now int64
	read := false // raws and present hold a read at now
	if est, ok := b.clock.now(); ok && b.noneKnown(ks, est) {
		var done bool
		var err error
		if done, read, now, err = b.guess(ctx, sp, prefix, u, est, apply); done {
			return err
		}
	}
	swept := false
	for conflicts := 0; ; {
		if !read {
			var err error
			if now, err = b.read(ctx, ks.names[:n], u.raws, u.present); err != nil {
				return err
			}
		}
		read = false
		if err := b.entriesRead(u, now); err != nil {
			return err
		}
		if err := apply(time.UnixMilli(now), u.entries); err != nil {
			return err
		}
		changed, fresh := u.plan(now)
		if !changed {
			return nil // a read: it happened at the read's instant
		}
		u.others, u.at = b.elsewhere(sp), now
		res, _, err := b.write(ctx, ks, u.args, nil, nil)
		if err != nil {
			return err
		}
		switch res[0] {
		case 1:
			b.wrote(ctx, sp, prefix, ks, u.entries, res[1], res[2], u.others)
			return nil
		case 2:
			b.setLive(sp.live, res[1])
			if swept {
				return b.refuse(prefix, res[1]+b.elsewhere(sp)+fresh-1)
			}
			b.sweepFull(ctx)
			swept = true
		default:
			conflicts++
			if conflicts > b.maxRetries {
				return store.NewUnavailableError(store.ReasonOverloaded, fmt.Errorf("%w: %d attempts", ErrContention, conflicts))
			}
			b.retries.Add(1)
			if err := backoff(ctx, conflicts); err != nil {
				return err
			}
		}
	}
}

// updateCall is the scratch of one Update: its keys, the entries apply
// sees and the write script's arguments, which point into it rather than
// hold copies (each copy of a string or a large number in an interface
// would be an allocation of its own). The arrays hold a lone key, the
// common case, so that it takes one allocation.
type updateCall struct {
	ks      keySet
	entries []store.Entry
	args    []any    // see writeScript
	values  []string // each key's new raw value
	expires []int64  // each key's new expiry
	others  int64    // live entries under other tags
	at      int64    // the time apply was given
	raws    []string // each key's raw value as read
	present []bool   // whether each key had a raw value
	exps    []int64  // the expiry of each key's live entry as read, else 0
	bodies  []string // the value of each key's live entry as read

	entries1 [1]store.Entry
	args1    [writeHead + writePer]any
	values1  [1]string
	expires1 [1]int64
	raws1    [1]string
	present1 [1]bool
	exps1    [1]int64
	bodies1  [1]string
}

// newUpdateCall returns the scratch of an Update of n keys.
func newUpdateCall(n int) *updateCall {
	u := new(updateCall)
	if n == 1 {
		u.entries, u.args, u.values, u.expires = u.entries1[:], u.args1[:], u.values1[:], u.expires1[:]
		u.raws, u.present, u.exps, u.bodies = u.raws1[:], u.present1[:], u.exps1[:], u.bodies1[:]
		return u
	}
	u.entries = make([]store.Entry, n)
	u.args = make([]any, writeHead+writePer*n)
	u.values = make([]string, n)
	u.expires = make([]int64, n)
	u.raws = make([]string, n)
	u.present = make([]bool, n)
	u.exps = make([]int64, n)
	u.bodies = make([]string, n)
	return u
}

// guess runs apply on the guess that no key has an entry, at the estimated
// server time est, and writes its result if the guess was right. It
// reports done when the Update is answered; otherwise the Update goes on
// from the read a wrong guess was answered with (read: u.raws and
// u.present hold it, at the server's time now), or with a read of its own.
func (b *Backend) guess(ctx context.Context, sp *space, prefix string, u *updateCall, est int64, apply store.ApplyFunc) (done, read bool, now int64, err error) {
	ks, entries := &u.ks, u.entries
	clear(entries)
	if apply(time.UnixMilli(est), entries) != nil {
		return false, false, 0, nil // an error on a guess is not the Update's answer
	}
	writes := false
	for i := range entries {
		e := &entries[i]
		u.setRead(i, modeAbsent, "")
		if exp := e.ExpiresAt.UnixMilli(); e.Value != nil && exp > est {
			u.setValue(i, exp, e.Value)
			writes = true
		} else {
			u.keep(i)
		}
	}
	if !writes {
		return false, false, 0, nil // a read must see the store to be right
	}
	u.others, u.at = b.elsewhere(sp), est
	res, read, err := b.write(ctx, ks, u.args, u.raws, u.present)
	if err != nil {
		return true, false, 0, err
	}
	if res[0] == 1 {
		b.wrote(ctx, sp, prefix, ks, entries, res[1], res[2], u.others)
		return true, false, 0, nil
	}
	// A conflict, or no room for a new entry (the Update's own read and
	// checks of the bound take that from here).
	b.misses.Add(1)
	return false, read, res[2], nil
}

// write runs writeScript and notes the server's time it answers.
//
// On a conflict, when raws is not nil, raws and present get what the
// conflict answered the keys hold, as read does, at the server's time the
// answer carries; read reports that they did.
func (b *Backend) write(ctx context.Context, ks *keySet, args []any, raws []string, present []bool) (res [3]int64, read bool, err error) {
	ans, err := b.eval(ctx, writeScript, ks.names, args...).Slice()
	if err != nil {
		return res, false, err
	}
	n := len(ks.names) - 1
	ok := len(ans) == 3 || len(ans) == 3+n
	for i := 0; ok && i < 3; i++ {
		res[i], ok = ans[i].(int64)
	}
	if !ok || len(ans) > 3 && res[0] != 0 {
		return res, false, fmt.Errorf("redis: write answered %v", ans)
	}
	b.clock.observe(res[2])
	if len(ans) == 3 || raws == nil {
		return res, false, nil
	}
	for i := range n {
		raws[i], present[i] = "", false
		if s, ok := ans[3+i].(string); ok {
			raws[i], present[i] = s, true
		}
	}
	return res, true, nil
}

// noneKnown reports whether no key of ks is known here to be live at est.
func (b *Backend) noneKnown(ks *keySet, est int64) bool {
	for i, s := range ks.slots {
		if k := b.known[s]; k.tag == ks.tags[i] && k.exp > est {
			return false
		}
	}
	return true
}

// know records that key i of ks is live until exp, or not live (exp 0).
// The caller holds the key's stripe.
func (b *Backend) know(ks *keySet, i int, exp int64) {
	k := &b.known[ks.slots[i]]
	switch {
	case exp > 0:
		*k = knownLive{ks.tags[i], exp}
	case k.tag == ks.tags[i]:
		*k = knownLive{}
	}
}

// wrote records a successful write of entries, at the server's time now,
// that left live entries under sp's tag (-1: not counted), with others
// elsewhere. The caller holds the keys' stripes.
func (b *Backend) wrote(ctx context.Context, sp *space, prefix string, ks *keySet, entries []store.Entry, live, now, others int64) {
	for i := range entries {
		exp := int64(0)
		if e := entries[i]; e.Value != nil && e.ExpiresAt.UnixMilli() > now {
			exp = e.ExpiresAt.UnixMilli()
		}
		b.know(ks, i, exp)
	}
	b.counted(ctx, sp, prefix, live, others)
}

// counted records that a write left live entries under sp's tag (-1: not
// counted), with others elsewhere, and logs when the store is filling.
func (b *Backend) counted(ctx context.Context, sp *space, prefix string, live, others int64) {
	if live < 0 {
		return
	}
	b.setLive(sp.live, live)
	b.register(ctx, sp)
	if total := live + others; total >= int64(b.warnAt) && total <= int64(b.max) {
		_ = b.bound.Admit(int(total)-1, prefix) // logs that the store is filling
	}
}

// refuse answers a new key the bound has no room for.
func (b *Backend) refuse(prefix string, live int64) error {
	if err := b.bound.Admit(int(max(live, int64(b.max))), prefix); err != nil {
		return err
	}
	return store.ErrFull
}

// backoff waits a random while, growing with the number of conflicts, for
// the update that won to finish.
func backoff(ctx context.Context, conflicts int) error {
	limit := min(20*time.Microsecond<<min(conflicts, 10), 2*time.Millisecond)
	d := rand.N(limit) + time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// maxExact is the largest cap or amount countScript takes: Lua counts in
// float64, exact to 2^53.
const maxExact = 1 << 52

// Count implements store.Counter: one script, one round trip.
func (b *Backend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	if n > maxExact {
		return b.countByUpdate(ctx, prefix, keys, caps, n, t)
	}
	for _, c := range caps {
		if int64(c.Limit) > maxExact {
			return b.countByUpdate(ctx, prefix, keys, caps, n, t)
		}
	}
	sp := b.space(prefix)
	ks := b.keys(sp, prefix, keys)
	args := countArgs(n, b.max, ks.members, caps)
	for swept := false; ; {
		others := b.elsewhere(sp)
		args[countElsewhere] = others
		res, err := b.eval(ctx, countScript, ks.names, args...).Int64Slice()
		if err != nil {
			return err
		}
		switch {
		case len(res) == 1 && res[0] == -1:
			return b.countByUpdate(ctx, prefix, keys, caps, n, t)
		case len(res) == 3 && res[0] == -2:
			b.setLive(sp.live, res[2])
			if swept {
				return b.refuse(prefix, res[2]+b.elsewhere(sp))
			}
			b.sweepFull(ctx)
			swept = true
			continue
		case len(res) != 4+2*len(keys):
			return fmt.Errorf("redis: count answered %v", res)
		}
		*t = store.Tally{Allowed: res[0] == 1, Now: time.UnixMilli(res[1]), Limiting: int(res[2]) - 1}
		for i := range keys {
			t.Counts[i] = res[4+2*i]
			if e := res[5+2*i]; e > 0 {
				t.ExpiresAt[i] = time.UnixMilli(e)
			}
		}
		b.clock.observe(res[1])
		if t.Allowed {
			b.counted(ctx, sp, prefix, res[3], others)
		}
		return nil
	}
}

// countByUpdate is the generic Count, through Update, for what countScript
// cannot count exactly.
func (b *Backend) countByUpdate(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	return b.Update(ctx, prefix, keys, func(now time.Time, es []store.Entry) error {
		return store.ApplyCount(now, es, caps, n, t)
	})
}

// Sweep implements store.Backend. Redis removes expired entries by itself;
// Sweep removes the expired members of every live index under the secret,
// recounts the live entries under each tag (which the bound uses), and
// returns how many expired entries it removed from the indexes.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	own := map[string]*space{}
	b.spaces.Range(func(_, v any) bool {
		sp := v.(*space)
		own[sp.tag] = sp
		if !sp.registered.Load() {
			b.register(ctx, sp)
		}
		return true
	})
	tags, err := b.c.SMembers(ctx, b.tags).Result()
	if err != nil {
		return 0, err
	}
	removed := 0
	var first error // the tags on other nodes of a Cluster are swept still
	for _, tag := range tags {
		if len(tag) != 16 {
			continue
		}
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		idx := "gatecount:{" + tag + "}:" + b.fp + ":live"
		res, err := b.eval(ctx, tidyScript, []string{idx}).Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("redis: tidy answered %v", res)
		}
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		removed += int(res[0])
		b.setLive(b.liveOf(tag), res[1])
	}
	return removed, first
}

// sweepFull is what Update and Count do when a new key seems to find the
// bound reached: they sweep, which recounts the live entries under every
// tag, and try once more. A sweep that fails (a Cluster node down, say)
// leaves the tags it could not count at their last counts, as between two
// sweeps: the second try is decided on those, and a Redis that does not
// answer fails that try.
func (b *Backend) sweepFull(ctx context.Context) { _, _ = b.Sweep(ctx) }

// sweepTick is the background sweep's work, every SweepInterval: a sweep
// and a recheck of the servers, within the guard's deadline. Close ends it.
func (b *Backend) sweepTick(loop context.Context) {
	ctx, cancel := context.WithTimeout(loop, b.deadline)
	defer cancel()
	if _, err := b.Sweep(ctx); err != nil && loop.Err() == nil {
		b.sweepLog.Do(func() {
			b.log.Warn("limit store sweep failed: the count of live entries may be stale",
				"kind", KindSweepFailed, "err", err)
		})
	}
	b.recheckServers(ctx)
}

// Close stops the background sweep and waits for it; the client is closed
// if the store opened it (OpenURL). Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.sweeper.Stop()
		if b.ownsClient {
			b.closeErr = b.c.Close()
		}
	})
	return b.closeErr
}

// serverClock estimates the server's time from the times it answers, so
// that an Update that guesses its keys are absent need not read the time
// first. Each answer carrying the server's time S, arriving at local time
// L, bounds the offset of the server's clock from below: S was read before
// L, so the server's clock reads at least S - L + l at any later local time
// l. The estimate is that bound, less a millisecond for rounding: never
// after the server's time, unless a clock jumps, which the write script
// catches; and behind it by at most the round trip of the answer it came
// from. The bound is kept at its highest, or renewed once a second, so that
// clock drift does not build up.
type serverClock struct {
	base   time.Time // the local origin, on the monotonic clock
	mu     sync.Mutex
	offset int64 // server ms less local ms, from below
	at     int64 // local ms when offset was set; 0: never
}

// local returns the local time in ms since base, at least 1.
func (c *serverClock) local() int64 { return time.Since(c.base).Milliseconds() + 1 }

// observe notes that the server's time was server (Unix ms) a moment ago.
func (c *serverClock) observe(server int64) {
	l := c.local()
	o := server - l - 1
	c.mu.Lock()
	if c.at == 0 || o > c.offset || l-c.at > 1000 {
		c.offset, c.at = o, l
	}
	c.mu.Unlock()
}

// now returns the estimate of the server's time in Unix ms, and whether
// there is one.
func (c *serverClock) now() (int64, bool) {
	c.mu.Lock()
	o, at := c.offset, c.at
	c.mu.Unlock()
	if at == 0 {
		return 0, false
	}
	return c.local() + o, true
}

package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/loop"
	"github.com/gatecount/gatecount/internal/option"
	"github.com/gatecount/gatecount/internal/turns"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/storekit"
)

// Defaults of Options.
const (
	DefaultSweepInterval = 5 * time.Minute
	DefaultCountInterval = 30 * time.Second
	// SweepBatch is the most rows one statement of a sweep deletes.
	SweepBatch = 1000
)

// ErrNoSecret is returned by New when Options.Secret is empty. The store
// never reads a secret from anywhere else: the app passes it in (package
// config reads it from GATECOUNT_SECRET).
var ErrNoSecret = errors.New("postgres: no secret: set Options.Secret")

// Options configure a PostgreSQL store. Secret is required; the zero value
// of every other field gives its default.
type Options struct {
	// Secret keys the HMAC under which keys are stored, at least
	// [keyhash.MinSecretLen] bytes; it is required ([ErrNoSecret] when empty,
	// [keyhash.ErrWeakSecret] when short). Every instance of an app must use
	// the same secret to share counts.
	Secret []byte
	// MaxEntries bounds the live entries of this secret; 0 means
	// 1,000,000.
	MaxEntries int
	// SweepInterval is how often expired rows are removed in the
	// background, after a first sweep when the store starts; 0 means
	// [DefaultSweepInterval].
	SweepInterval time.Duration
	// SyncCommit makes every count wait until its transaction's WAL is
	// flushed to disk before it answers. By default (false) a count's
	// transaction commits asynchronously (synchronous_commit = off for that
	// transaction only). It answers, and releases its keys' locks, without
	// waiting for the flush. On an ordinary disk the flush takes
	// milliseconds, and would bound one hot key to a few hundred counts a
	// second. If the database server crashes, the counts of its last
	// moments (at most three times wal_writer_delay, 600 ms by default) are
	// lost; the table stays consistent. Set SyncCommit when that matters
	// more than speed. SyncCommit leaves the session's setting as it is
	// (on, unless the pool's connections set synchronous_commit otherwise):
	// on a pool whose sessions turn it off, counts commit asynchronously
	// all the same.
	SyncCommit bool
	// CountInterval is how often the approximate count of live entries the
	// bound relies on is made exact again; 0 means [DefaultCountInterval].
	CountInterval time.Duration
	// Store configures the guard.
	Store store.Options

	// processNow is the process clock, used only to schedule; tests skew it.
	processNow func() time.Time
}

// New returns a store over pool, the app's own pool, behind the guard. It
// checks that [Migrate] has run, or returns an error matching
// [ErrNotMigrated]. It checks that pgx can run queries with the pool's
// settings, or returns an error matching [ErrPoolSetting], naming the
// setting. It starts the background sweep and count, which run until the
// Store is closed. Closing the Store does not close pool. The store runs
// its statements in the pool's own query exec mode (see "Statements" in the
// package documentation): behind a pooler in transaction mode, give the
// pool default_query_exec_mode=exec.
//
// Stores made by several New calls over one pool share it and open no
// connections of their own. A prefix can have one handle on a pool at a
// time ([store.ErrDuplicatePrefix]).
func New(ctx context.Context, pool *pgxpool.Pool, o Options) (*store.Store, error) {
	var b *Backend
	s, err := storekit.Build(&o.Store, func() (*Backend, error) {
		var err error
		b, err = NewBackend(ctx, pool, o)
		return b, err
	})
	if err == nil { // set before any call can reach hold
		b.members = s.Members
		b.exactUntil = b.processNow().Add(exactStart * o.Store.Announce).UnixNano()
	}
	return s, err
}

// Backend is the PostgreSQL store's [store.Backend] and [store.Counter]. Most
// code wants New, which wraps it in the guard.
type Backend struct {
	pool       *pgxpool.Pool
	hasher     *keyhash.Hasher
	fp         string
	bound      *storekit.Bound
	boundLock  int64
	slack      int64
	log        *slog.Logger
	processNow func() time.Time
	countEvery time.Duration
	syncCommit bool
	mode       execMode
	turns      *turns.Turns
	batcher    countBatcher

	// estimate is the approximate number of live entries of this secret:
	// the last exact count plus this instance's additions since, or -1
	// when unknown. countedAt is when (process clock, Unix ns) it was last
	// made exact.
	estimate  atomic.Int64
	countedAt atomic.Int64
	// grown counts the entries this instance added, so that a recount adds
	// those added while it counted, which its count may have missed.
	grown atomic.Int64
	// grownAtCount is grown as of the last exact count: grown less it is
	// what this instance added since.
	grownAtCount atomic.Int64
	// held counts the new entries of calls admitted without the exact
	// count that have not ended (see hold).
	held atomic.Int64
	// exactUntil ends the start of this instance (Unix nanoseconds, its
	// clock): while members is 0 until then, every new key is counted
	// exactly (see hold).
	exactUntil int64
	// members, when set, is how many instances share the store (see
	// [store.Store.Members]); hold takes each of the others to add as many
	// entries as this one, and counts every new key exactly while it is 0.
	members func() int
	// soonest is the earliest expiry (Unix ms) of the entries this instance
	// wrote that no exact count has seen expire, so that knownFull stops
	// trusting a full count once one of them has freed room.
	soonest atomic.Int64
	// removedAt is when this instance last removed a live entry, and
	// fullAt when an exact count last found no room, with fullLive the
	// live entries it found (Unix nanoseconds, its clock; see knownFull).
	removedAt, fullAt, fullLive atomic.Int64

	sweepMu sync.Mutex    // one sweep at a time per instance
	started chan struct{} // closed when the first sweep and count are done
	loop    *loop.Loop
}

// NewBackend returns the PostgreSQL backend and starts its background
// sweep and count. o.Store should already have its defaults (see
// [store.Options.WithDefaults]).
func NewBackend(ctx context.Context, pool *pgxpool.Pool, o Options) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	if len(o.Secret) == 0 {
		return nil, fmt.Errorf("%w: at least %d bytes, the same on every instance (%s)", ErrNoSecret, keyhash.MinSecretLen, keyhash.HowToMakeSecret)
	}
	h, err := keyhash.New(o.Secret)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	option.Default(&o.MaxEntries, storekit.DefaultMaxEntriesDatabase)
	option.Default(&o.SweepInterval, DefaultSweepInterval)
	option.Default(&o.CountInterval, DefaultCountInterval)
	if o.processNow == nil {
		o.processNow = time.Now
	}
	mode, err := execModeOf(pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool); err != nil {
		return nil, err
	}
	if mode == modeNamed {
		if err := checkNamedStatements(ctx, pool); err != nil {
			return nil, err
		}
	}
	log := storekit.LoggerFor(o.Store, "postgres")
	b := &Backend{
		pool:       pool,
		hasher:     h,
		fp:         h.Fingerprint(),
		bound:      storekit.NewBound(o.MaxEntries, log),
		boundLock:  lockID(sha256.Sum256([]byte("gatecount bound " + h.Fingerprint()))),
		slack:      slackFor(o.MaxEntries),
		log:        log,
		processNow: o.processNow,
		countEvery: o.CountInterval,
		syncCommit: o.SyncCommit,
		mode:       mode,
		turns:      turns.New(),
		started:    make(chan struct{}),
	}
	b.batcher = countBatcher{limit: countBatches(pool), run: b.runCounts}
	b.estimate.Store(-1)
	b.soonest.Store(math.MaxInt64)
	b.loop = loop.Go(ctx, func(ctx context.Context) { b.background(ctx, o.SweepInterval, o.CountInterval) })
	return b, nil
}

// countBatches is how many batches of single-key counts run at a time: an
// eighth of the pool's connections, at least one. Counts arriving while
// they all run are counted together by the next batch, in one statement.
// That costs the database little more than a count alone, so under load
// fewer and larger batches count more keys a second (see DESIGN.md,
// "Count").
func countBatches(pool *pgxpool.Pool) int { return max(1, int(pool.Config().MaxConns)/8) }

// slackFor is how far below the bound the approximate count is trusted: a
// twentieth of it, but never fewer than 1,000 entries (so small bounds are
// always counted exactly).
func slackFor(bound int) int64 { return int64(max(bound/20, min(bound, 1000))) }

// Shared reports true: every instance over the same database sees the same
// entries.
func (b *Backend) Shared() bool { return true }

// Backing returns the pool, so that two handles with one prefix on one pool
// are refused even from different Stores.
func (b *Backend) Backing() any { return b.pool }

// Prompt reports true: pgx watches a call's context during its round trips
// and ends the call, closing its connection, when the context ends (see
// "Deadlines" in DESIGN.md).
func (b *Backend) Prompt() bool { return true }

// Fingerprint names the store's secret, as recorded in each of its rows.
func (b *Backend) Fingerprint() string { return b.fp }

// lockID is the advisory lock of a key: the first 8 bytes of its hash.
func lockID(h [sha256.Size]byte) int64 { return int64(binary.BigEndian.Uint64(h[:8])) }

// hold reports whether added new entries may be admitted without the exact
// count: whether they leave the store outside the slack of its bound. When
// they may, it holds room for them in the estimate until release: calls in
// flight are not yet in it, and many start on one estimate at once. A
// caller that got true calls release(added) once the call has ended.
func (b *Backend) hold(added int) bool {
	est := b.estimate.Load()
	if est < 0 {
		return false
	}
	// An estimate not refreshed for two intervals (the database was
	// unreachable, say) is not trusted. Past half the bound, it is
	// counted every second.
	now := b.processNow().UnixNano()
	every := b.countEvery
	if b.pastHalf(est) {
		every = halfCountEvery
	}
	if now-b.countedAt.Load() > int64(2*every) {
		return false
	}
	// The estimate misses what the other instances added since the last
	// count. Each is taken to add as many as this one, so that the
	// instances together stop admitting uncounted at the margin, not each
	// of them on its own (which let n instances fill n times the room).
	others := int64(0)
	if b.members != nil {
		switch m := b.members(); {
		case m > 0:
			others = int64(m - 1)
		case now < b.exactUntil:
			// Not counted yet, as at a fleet's start: the others may
			// be adding as much as this one. Past the start, 0 is a
			// store no limiter joined (see store.Store.Join), each
			// instance on its own estimate.
			return false
		}
	}
	since := max(b.grown.Load()-b.grownAtCount.Load(), 0)
	for {
		held := b.held.Load()
		if est+held+others*(since+held)+int64(added) > int64(b.bound.Max())-b.slack {
			return false
		}
		if b.held.CompareAndSwap(held, held+int64(added)) {
			return true
		}
	}
}

// exactStart is how many announce intervals after it opens a store counts
// every new key exactly until it has counted the instances sharing it.
const exactStart = 3

// release gives back the room hold held for added entries.
func (b *Backend) release(added int) { b.held.Add(-int64(added)) }

// fullRecheck is how long an exact count that found the store full is
// trusted to refuse new keys without counting again (see knownFull).
const fullRecheck = time.Second

// knownFull reports whether an exact count made within fullRecheck found
// no room for added more entries, and returns the live entries it found.
// A new key is then refused at once, without queueing for the bound's
// lock behind every other instance to count the whole store again only to
// be refused: while the store is full that lock serialises every new key
// of the fleet, and calls that wait for it past their deadline leave their
// backends waiting in its queue still. An entry this instance removed
// since, or wrote and has expired since, ends it at once.
func (b *Backend) knownFull(added int) (live int64, full bool) {
	at, now := b.fullAt.Load(), b.processNow()
	if at == 0 || now.UnixNano()-at > int64(fullRecheck) || b.removedAt.Load() >= at || now.UnixMilli() >= b.soonest.Load() {
		return 0, false
	}
	live = b.fullLive.Load()
	return live, live+int64(added) > int64(b.bound.Max())
}

// foundFull records that an exact count found live entries and no room.
func (b *Backend) foundFull(live int64) {
	now := b.processNow()
	b.countedExpiries(now.UnixMilli())
	b.fullLive.Store(live)
	b.fullAt.Store(now.UnixNano())
}

// wroteExpiry notes an entry written with expiry exp (Unix ms).
func (b *Backend) wroteExpiry(exp int64) {
	for {
		cur := b.soonest.Load()
		if exp >= cur || b.soonest.CompareAndSwap(cur, exp) {
			return
		}
	}
}

// countedExpiries forgets the expiries noted that an exact count made at
// now (Unix ms) has seen pass.
func (b *Backend) countedExpiries(now int64) {
	if cur := b.soonest.Load(); cur <= now {
		b.soonest.CompareAndSwap(cur, math.MaxInt64)
	}
}

// SQL of the store. See DESIGN.md.
const (
	// sqlLock locks the rows of keys, in ascending keyhash order. It
	// inserts a placeholder (expired, so never live) for each key without
	// one, and returns the keys it inserted placeholders for. ON CONFLICT
	// DO UPDATE locks the conflicting row even though its WHERE false
	// changes nothing.
	sqlLock = `INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
SELECT k, $2, '', timestamptz 'epoch' FROM unnest($1::bytea[]) AS u(k) ORDER BY k
ON CONFLICT (keyhash) DO UPDATE SET value = g.value WHERE false
RETURNING g.keyhash`
	// Statements that name keys by an array have a single-key twin that
	// names its key by a scalar (the names ending in 1). PostgreSQL plans a
	// prepared statement afresh on every call while its generic plan looks
	// dearer than the plans for the arrays it was given. The generic plan
	// is made for an array of unknown length, and for "keyhash = ANY($1)"
	// it always looks dearer. Planning costs more than running these
	// statements. The twins' generic plans cost what their custom plans do,
	// so they are planned once per connection.
	sqlRead = `SELECT c.now, g.keyhash, g.value, g.expires_at
  FROM (SELECT date_trunc('milliseconds', clock_timestamp()) AS now) c
  LEFT JOIN gatecount_entries g
    ON g.keyhash = ANY($1) AND g.fingerprint = $2 AND g.expires_at > c.now`
	sqlRead1 = `SELECT c.now, g.keyhash, g.value, g.expires_at
  FROM (SELECT date_trunc('milliseconds', clock_timestamp()) AS now) c
  LEFT JOIN gatecount_entries g
    ON g.keyhash = $1 AND g.fingerprint = $2 AND g.expires_at > c.now`
	// sqlLockRead locks the rows that keys have, in ascending keyhash
	// order, and reads them and then the clock. An aggregate's result is
	// computed after it has consumed, and so locked, every row.
	// sqlLockReadAsync also makes the transaction commit asynchronously.
	sqlLockRead      = `SELECT date_trunc('milliseconds', clock_timestamp()),` + sqlLockReadRest
	sqlLockReadAsync = `SELECT date_trunc('milliseconds', clock_timestamp()), set_config('synchronous_commit', 'off', true),` + sqlLockReadRest
	sqlLockReadRest  = `
       array_agg(l.keyhash), array_agg(l.fingerprint), array_agg(l.value), array_agg(l.expires_at)
  FROM (SELECT keyhash, fingerprint, value, expires_at FROM gatecount_entries
         WHERE keyhash = ANY($1) ORDER BY keyhash FOR UPDATE) AS l`
	// sqlLockRead1 is sqlLockRead for one key, with scalar results: the
	// clock, then the row's fingerprint, value and expiry, all null when
	// the key has no row. The left join makes the result one row, which is
	// computed (the clock read) after its inner side has locked the row. It
	// costs the server less than aggregates of one row or none.
	sqlLockRead1      = `SELECT date_trunc('milliseconds', clock_timestamp()),` + sqlLockRead1Cols + sqlLockRead1From
	sqlLockRead1Async = `SELECT date_trunc('milliseconds', clock_timestamp()),` + sqlLockRead1Cols +
		`, set_config('synchronous_commit', 'off', true)` + sqlLockRead1From
	sqlLockRead1Cols = `
       l.fingerprint, l.value, l.expires_at`
	sqlLockRead1From = `
  FROM (VALUES (1)) AS d(x)
  LEFT JOIN LATERAL (SELECT fingerprint, value, expires_at FROM gatecount_entries
                      WHERE keyhash = $1 FOR UPDATE) AS l ON true`
	sqlWrite = `UPDATE gatecount_entries AS g SET fingerprint = $2, value = u.v, expires_at = u.e
  FROM unnest($1::bytea[], $3::text[], $4::timestamptz[]) AS u(k, v, e)
 WHERE g.keyhash = u.k`
	sqlWrite1 = `UPDATE gatecount_entries SET fingerprint = $2, value = $3, expires_at = $4 WHERE keyhash = $1`
	// sqlInsert inserts keys that had no row. A key that has one now
	// (another transaction inserted it since) is left as it is; the caller,
	// seeing fewer rows inserted, starts again.
	sqlInsert = `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
SELECT k, $2, v, e FROM unnest($1::bytea[], $3::text[], $4::timestamptz[]) AS u(k, v, e)
ON CONFLICT (keyhash) DO NOTHING`
	sqlInsert1 = `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (keyhash) DO NOTHING`
	sqlDelete  = `DELETE FROM gatecount_entries WHERE keyhash = ANY($1)`
	sqlDelete1 = `DELETE FROM gatecount_entries WHERE keyhash = $1`
	sqlAdmit   = `SELECT gatecount_admit($1, $2, $3, $4, $5)`
	sqlCount   = `SELECT now_ms, allowed, limiting, counts, expires_ms, added, bad, is_full, live
  FROM gatecount_count($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	// sqlCountOne is the single-key Count far from the bound: one plain
	// statement, serialised by the primary key. A first insert waits for a
	// concurrent one; the conflict path locks the row and decides on its
	// newest version. It judges expiry at the statement's start, now(). It
	// returns no row when there is no room. sqlCountOneAsync is the same,
	// committing asynchronously.
	sqlCountOne = `INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
SELECT $1, $2, $3::bigint::text, date_trunc('milliseconds', now()) + $5::bigint * interval '1 millisecond'` +
		sqlCountOneRest
	sqlCountOneAsync = `INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
SELECT $1, $2, $3::bigint::text, date_trunc('milliseconds', now()) + $5::bigint * interval '1 millisecond'
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS c(s) WHERE c.s = 'off'` +
		sqlCountOneRest
	// sqlCountMany is sqlCountOne for several distinct keys, each with its
	// own n, cap and window (arrays in one order). It inserts (and so
	// locks) them in ascending keyhash order, so that it never deadlocks
	// with another statement that locks keys in order. Each key is counted
	// or refused on its own; a counted key returns a row, with its keyhash.
	// On conflict, EXCLUDED.value is the key's n as text.
	sqlCountMany = `INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
SELECT u.k, $2, u.n::text, date_trunc('milliseconds', now()) + u.w * interval '1 millisecond'
  FROM unnest($1::bytea[], $3::bigint[], $5::bigint[]) AS u(k, n, w)
 ORDER BY u.k` + sqlCountManyRest
	sqlCountManyAsync = `INSERT INTO gatecount_entries AS g (keyhash, fingerprint, value, expires_at)
SELECT u.k, $2, u.n::text, date_trunc('milliseconds', now()) + u.w * interval '1 millisecond'
  FROM unnest($1::bytea[], $3::bigint[], $5::bigint[]) AS u(k, n, w),
       (SELECT set_config('synchronous_commit', 'off', true)) AS c(s)
 WHERE c.s = 'off'
 ORDER BY u.k` + sqlCountManyRest
	sqlCountManyRest = `
ON CONFLICT (keyhash) DO UPDATE SET
  value = CASE WHEN g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
               THEN EXCLUDED.value ELSE (g.value::bigint + EXCLUDED.value::bigint)::text END,
  expires_at = CASE WHEN g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
                    THEN EXCLUDED.expires_at ELSE g.expires_at END
WHERE g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
   OR CASE WHEN g.value ~ '^(0|[1-9][0-9]{0,17})$'
           THEN g.value::bigint <= ($4::bigint[])[array_position($1::bytea[], EXCLUDED.keyhash)] - EXCLUDED.value::bigint
           ELSE false END
RETURNING g.keyhash, g.value::bigint, g.expires_at, date_trunc('milliseconds', now())`
	sqlCountOneRest = `
ON CONFLICT (keyhash) DO UPDATE SET
  value = CASE WHEN g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
               THEN EXCLUDED.value ELSE (g.value::bigint + $3::bigint)::text END,
  expires_at = CASE WHEN g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
                    THEN EXCLUDED.expires_at ELSE g.expires_at END
WHERE g.expires_at <= date_trunc('milliseconds', now()) OR g.fingerprint <> EXCLUDED.fingerprint
   OR CASE WHEN g.value ~ '^(0|[1-9][0-9]{0,17})$' THEN g.value::bigint <= $4::bigint - $3::bigint ELSE false END
RETURNING g.value::bigint, g.expires_at, date_trunc('milliseconds', now())`
	sqlLive = `SELECT count(*) FROM gatecount_entries WHERE fingerprint = $1 AND expires_at > now()`
	// sqlSweep skips rows that others hold: it never waits for a count,
	// nor holds a row a count waits for.
	sqlSweep = `DELETE FROM gatecount_entries
 WHERE keyhash IN (SELECT keyhash FROM gatecount_entries WHERE expires_at <= now()
                    LIMIT $1 FOR UPDATE SKIP LOCKED)
   AND expires_at <= now()`
)

// errFullCode is the SQLSTATE gatecount_admit raises when the bound has no
// room.
const errFullCode = "GCF01"

// setEstimate sets the estimate to live entries, counted at once, of
// which this instance's write added added.
func (b *Backend) setEstimate(live, added int64) {
	b.grownAtCount.Store(b.grown.Add(added))
	b.estimate.Store(live)
	b.countedAt.Store(b.processNow().UnixNano())
}

// addEstimate adds d to a known estimate.
func (b *Backend) addEstimate(d int64) {
	b.grown.Add(max(d, 0))
	for {
		est := b.estimate.Load()
		if est < 0 || b.estimate.CompareAndSwap(est, max(est+d, 0)) {
			return
		}
	}
}

// Read implements [store.Backend] in one statement, judged on the database
// server's clock.
func (b *Backend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	hashes := make([][]byte, len(keys))
	for i, k := range keys {
		h := b.hasher.Sum(prefix, k)
		hashes[i] = h[:]
	}
	if len(hashes) == 1 {
		val, _, exp, err := b.read1(ctx, hashes[0])
		if err != nil {
			return nil, fmt.Errorf("postgres: read: %w", err)
		}
		out := make([]store.Entry, 1)
		if val != nil {
			out[0] = store.Entry{Value: val, ExpiresAt: exp}
		}
		return out, nil
	}
	out := make([]store.Entry, len(keys))
	err := b.runOne(ctx, rRead, func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		var now time.Time
		var kh, val []byte
		var exp *time.Time
		if err := r.scan(fields, vals, &now, &kh, &val, &exp); err != nil {
			return err
		}
		for i := range hashes {
			if kh != nil && bytes.Equal(kh, hashes[i]) {
				out[i] = store.Entry{Value: val, ExpiresAt: time.UnixMilli(exp.UnixMilli())}
			}
		}
		return nil
	}, hashes, b.fp)
	if err != nil {
		return nil, fmt.Errorf("postgres: read: %w", err)
	}
	return out, nil
}

// runOne runs statement i with args in a transaction of its own, one round
// trip on a connection of the pool, calling each with each of its rows.
func (b *Backend) runOne(ctx context.Context, i int, each func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error, args ...any) (err error) {
	return b.runAcquired(ctx, nil, i, each, args...)
}

// runAcquired is runOne, calling acquired (unless nil) once it holds a
// connection.
func (b *Backend) runAcquired(ctx context.Context, acquired func(), i int, each func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error, args ...any) (err error) {
	conn, r, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	if acquired != nil {
		acquired()
	}
	defer func() { err = release(conn, r.overrun(err)) }()
	defer r.close()
	var rowFn func([]pgconn.FieldDescription, [][]byte) error
	if each != nil {
		rowFn = func(fields []pgconn.FieldDescription, vals [][]byte) error { return each(r, fields, vals) }
	}
	return r.one(i, rowFn, args...)
}

// Count implements [store.Counter]. A single key far from the bound is
// counted by one plain statement. That is sqlCountOne, or sqlCountMany for
// the single-key counts of several calls at once (see countOne). Anything
// else is counted by one call of the function gatecount_count. Either is
// one round trip and one implicit transaction; a refused single-key count
// takes a second round trip to read the count it was refused at.
func (b *Backend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	for _, c := range caps {
		if c.Algorithm != store.FixedWindow {
			return b.countAlgorithms(ctx, prefix, keys, caps, n, t)
		}
	}
	if len(keys) == 1 && n <= int64(caps[0].Limit) && b.hold(1) {
		h := b.hasher.Sum(prefix, keys[0])
		done, err := b.countOne(ctx, h[:], caps[0], n, t)
		b.release(1)
		if done || err != nil {
			return err
		}
	}
	hashes := make([][]byte, len(keys))
	maxes := make([]int64, len(keys))
	windows := make([]int64, len(keys))
	for i, k := range keys {
		h := b.hasher.Sum(prefix, k)
		hashes[i] = h[:]
		maxes[i] = int64(caps[i].Limit)
		windows[i] = caps[i].Window.Milliseconds()
	}
	exact := !b.hold(len(keys))
	if !exact {
		defer b.release(len(keys))
	}
	return b.countBy(ctx, cCount, prefix, keys, t, hashes, b.fp, maxes, windows, n, int64(b.bound.Max()), exact, b.boundLock, !b.syncCommit)
}

// countBy runs stmt with args: a Count of keys in one call of a function
// that answers as gatecount_count does. It keeps the bound's estimate and
// writes the Tally into t.
func (b *Backend) countBy(ctx context.Context, stmt int, prefix string, keys []string, t *store.Tally, args ...any) error {
	var (
		nowMs, live          int64
		allowed, full        bool
		limiting, added, bad int32
		counts, expires      []int64
	)
	found := false
	err := b.runOne(ctx, stmt, func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		found = true
		return r.scan(fields, vals, &nowMs, &allowed, &limiting, &counts, &expires, &added, &bad, &full, &live)
	}, args...)
	if err == nil && !found {
		err = pgx.ErrNoRows
	}
	if err != nil {
		return fmt.Errorf("postgres: count: %w", err)
	}
	if bad >= 0 {
		return fmt.Errorf("postgres: count: key %d: %w", bad, store.ErrNotCounter)
	}
	if live >= 0 {
		b.setEstimate(live, 0) // added is added below
	}
	if full {
		b.foundFull(live)
		return b.bound.Admit(int(live)+len(keys)-1, prefix)
	}
	if live >= 0 && added > 0 {
		_ = b.bound.Admit(int(live)+int(added)-1, prefix) // logs when filling
	}
	if added > 0 {
		b.addEstimate(int64(added))
	}
	for _, e := range expires {
		if e != 0 {
			b.wroteExpiry(e)
		}
	}
	*t = store.Tally{Allowed: allowed, Now: time.UnixMilli(nowMs), Limiting: int(limiting)}
	for i := range keys {
		t.Counts[i] = counts[i]
		if expires[i] != 0 {
			t.ExpiresAt[i] = time.UnixMilli(expires[i])
		}
	}
	return nil
}

// countOne counts one key, in a batch with the single-key counts of other
// calls (see countBatcher and runCounts). When the statement counts, that
// is the answer. When it refuses, countOne reads the key. A live count with
// no room for n is the answer, as of the read. A live value that is not a
// count is ErrNotCounter. Otherwise the key changed since, or holds a count
// the statement's pattern does not take, and countOne reports false, having
// written nothing, for gatecount_count to decide.
func (b *Backend) countOne(ctx context.Context, hash []byte, c store.Budget, n int64, t *store.Tally) (done bool, err error) {
	r := &oneCount{hash: hash, n: n, max: int64(c.Limit), window: c.Window.Milliseconds()}
	err = b.batcher.do(ctx, r)
	if errors.Is(err, errSameKey) {
		err = b.runCounts(ctx, []*oneCount{r})
	}
	if err != nil {
		return false, fmt.Errorf("postgres: count: %w", err)
	}
	if r.counted {
		*t = store.Tally{Allowed: true, Now: r.now, Limiting: -1}
		t.Counts[0] = r.v
		t.ExpiresAt[0] = r.exp
		if t.ExpiresAt[0].Equal(t.Now.Add(c.Window)) {
			b.addEstimate(1) // a new counter: a new row, or an expired one started afresh
			b.wroteExpiry(t.ExpiresAt[0].UnixMilli())
		}
		return true, nil
	}
	return b.readRefused(ctx, hash, c, n, t)
}

// runCounts runs a batch of single-key counts in one statement, and sets
// each one's result: sqlCountOne for a batch of one, sqlCountMany for more.
func (b *Backend) runCounts(ctx context.Context, batch []*oneCount) error {
	if d, ok := ctx.Deadline(); ok {
		// The batch is the leader's call and its members': it keeps the
		// leader's deadline but not its cancellation.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
		defer cancel()
	}
	acquired := func() { // the batch's calls wait no more: they run
		for _, r := range batch {
			r.sent.Store(true)
		}
	}
	if len(batch) == 1 {
		r := batch[0]
		s := cCountOneAsync
		if b.syncCommit {
			s = cCountOne
		}
		return b.runAcquired(ctx, acquired, s, func(q *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
			return r.counts(q, fields, vals)
		}, r.hash, b.fp, r.n, r.max, r.window)
	}
	s := cCountManyAsync
	if b.syncCommit {
		s = cCountMany
	}
	hashes := make([][]byte, len(batch))
	ns := make([]int64, len(batch))
	maxes := make([]int64, len(batch))
	windows := make([]int64, len(batch))
	for i, r := range batch {
		hashes[i], ns[i], maxes[i], windows[i] = r.hash, r.n, r.max, r.window
	}
	var kh []byte
	return b.runAcquired(ctx, acquired, s, func(q *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		if err := q.scan(fields[:1], vals[:1], &kh); err != nil {
			return err
		}
		i := slices.IndexFunc(batch, func(r *oneCount) bool { return bytes.Equal(r.hash, kh) })
		if i < 0 {
			return errors.New("a counted key not in the batch")
		}
		return batch[i].counts(q, fields[1:], vals[1:])
	}, hashes, b.fp, ns, maxes, windows)
}

// readRefused reads a key whose count was refused. A live count with no
// room for n is the answer, as of the read. A live value that is not a
// count is ErrNotCounter. Otherwise it reports false, for gatecount_count
// to decide.
func (b *Backend) readRefused(ctx context.Context, hash []byte, c store.Budget, n int64, t *store.Tally) (done bool, err error) {
	val, now, exp, err := b.read1(ctx, hash)
	if err != nil {
		return false, fmt.Errorf("postgres: count: read the refused key: %w", err)
	}
	if val == nil {
		return false, nil
	}
	cur, err := store.ParseCount(val)
	if err != nil {
		return true, fmt.Errorf("postgres: count: %w", err)
	}
	if cur <= int64(c.Limit)-n {
		return false, nil
	}
	*t = store.Tally{Now: now, Limiting: 0}
	t.Counts[0] = cur
	t.ExpiresAt[0] = exp
	return true, nil
}

// read1 reads one key's live entry of this secret with cRead1: its value
// (nil when it has none) and expiry, and the server's clock, to the
// millisecond.
func (b *Backend) read1(ctx context.Context, hash []byte) (val []byte, now, exp time.Time, err error) {
	err = b.runOne(ctx, cRead1, func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		var e *time.Time
		if err := r.scan(fields, vals, &now, nil, &val, &e); err != nil {
			return err
		}
		if e != nil {
			exp = time.UnixMilli(e.UnixMilli())
		}
		return nil
	}, hash, b.fp)
	return val, time.UnixMilli(now.UnixMilli()), exp, err
}

// Sweep implements [store.Backend]: it deletes expired rows, of every secret,
// in statements of at most [SweepBatch] rows each, until none is left, and
// returns how many went.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	total := 0
	for {
		// Planned afresh each time (a fresh statement), on the table's
		// size now: a plan cached while the table was small would scan it
		// all (see Backend.statements).
		tag, err := b.runExec(ctx, sSweep, int64(SweepBatch))
		if err != nil {
			return total, fmt.Errorf("postgres: sweep: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < SweepBatch {
			return total, nil
		}
	}
}

// runExec runs statement i with args in a transaction of its own and
// returns its command tag.
func (b *Backend) runExec(ctx context.Context, i int, args ...any) (tag pgconn.CommandTag, err error) {
	conn, r, err := b.acquire(ctx)
	if err != nil {
		return tag, err
	}
	defer func() { err = release(conn, r.overrun(err)) }()
	defer r.close()
	if err := r.send(i, args...); err != nil {
		return tag, err
	}
	if err := r.sync(); err != nil {
		return tag, err
	}
	tag, err = r.exec()
	if serr := r.synced(); err == nil {
		err = serr
	}
	return tag, err
}

// recount makes the estimate of live entries exact.
func (b *Backend) recount(ctx context.Context) error {
	before := b.grown.Load()
	var n int64
	err := b.runOne(ctx, sLive, func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		return r.scan(fields, vals, &n)
	}, b.fp) // a fresh statement, planned afresh as the sweep
	if err != nil {
		return fmt.Errorf("postgres: count live entries: %w", err)
	}
	// Entries added while it counted may be missing from n: they are
	// added, once more at worst.
	b.estimate.Store(n + b.grown.Load() - before)
	b.grownAtCount.Store(before)
	b.countedAt.Store(b.processNow().UnixNano())
	return nil
}

// background counts and sweeps at once, then sweeps every sweepEvery, and
// recounts after each sweep and every countEvery, until ctx is cancelled.
// The first count comes before the first sweep, which can take seconds on a
// table with many expired rows. Until the estimate is known, every new key
// is admitted through the bound's lock, one at a time.
func (b *Backend) background(ctx context.Context, sweepEvery, countEvery time.Duration) {
	sweep := func() {
		if _, err := b.Sweep(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("limit store sweep failed; expired entries stay until the next sweep",
				"kind", storekit.KindSweepFailed, "err", err)
		}
	}
	recount := func() {
		if err := b.recount(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("limit store count failed; new keys are counted exactly until it succeeds",
				"kind", KindCountFailed, "err", err)
		}
	}
	recount()
	sweep()
	recount()
	close(b.started)
	loop.Every(ctx,
		loop.Task{Every: sweepEvery, Do: func(context.Context) { sweep(); recount() }},
		loop.Task{Every: countEvery, Do: func(context.Context) { recount() }},
		loop.Task{Every: halfCountEvery, Do: func(context.Context) {
			if b.pastHalf(b.estimate.Load()) {
				recount()
			}
		}})
}

// halfCountEvery is how often the live entries are counted while the
// estimate is past half the bound: the others' additions, which it misses,
// then matter.
const halfCountEvery = time.Second

// pastHalf reports whether an estimate of est is past half the bound.
func (b *Backend) pastHalf(est int64) bool { return est >= int64(b.bound.Max())/2 }

// Close stops the background sweep and count and waits for them. It does
// not close the pool, which is the app's. It is idempotent.
func (b *Backend) Close() error {
	b.loop.Stop()
	return nil
}

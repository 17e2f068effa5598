package postgres

// Benchmarks of the store against the single-statement floor, in one run:
//
//	go test -run '^$' -bench . -benchmem ./store/postgres/
//
// Each benchmark runs at pool concurrency 1 and 8 (that many goroutines on
// a pool of that many connections) and reports ops/s and the p50 and p99
// latency of one call. "hot" counts on one key, "random" on keys drawn from
// a million, almost all new.
//
// The benchmark pools, floors and stores alike, connect in plain TCP
// (sslmode=disable, see benchURL): pgx's default sslmode=prefer would wrap
// every loopback connection in TLS wherever the server offers it (Debian's
// and Ubuntu's packages do, with a snakeoil certificate), whereas the
// issue's reference figures are for a stock server over TCP loopback, which
// offers no TLS. An app that reaches its database over a network should
// keep TLS; the tests and the store leave the setting to the URL.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

var benchConcurrency = []int{1, 8}

// benchPool opens a pool of conns connections, with extra run-time
// parameters, and connects them all before it returns, so that no
// benchmark times the connecting. Each of opts changes the pool's config
// first.
func benchPool(b testing.TB, conns int, params map[string]string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	b.Helper()
	newPool(b) // skips or fails when unreachable; migrates
	return connectedPool(b, benchURL(), conns, params, opts...)
}

// connectedPool opens a pool on url of conns connections, with extra
// run-time parameters, connected before it returns.
func connectedPool(b testing.TB, url string, conns int, params map[string]string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range opts {
		o(cfg)
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ctx := context.Background()
	held := make([]*pgxpool.Conn, conns)
	for i := range held {
		if held[i], err = pool.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range held {
		c.Release()
	}
	return pool
}

// benchURL is testURL with sslmode=disable, unless the URL or PGSSLMODE
// chooses a mode: the benchmarks measure over plain TCP loopback, as the
// issue's reference figures do (see the comment at the top).
func benchURL() string {
	u := testURL()
	if os.Getenv("PGSSLMODE") != "" || strings.Contains(u, "sslmode=") {
		return u
	}
	if p, err := url.Parse(u); err == nil && (p.Scheme == "postgres" || p.Scheme == "postgresql") {
		q := p.Query()
		q.Set("sslmode", "disable")
		p.RawQuery = q.Encode()
		return p.String()
	}
	return u + " sslmode=disable" // keyword/value form
}

// keySource returns, per call, the key to count: one hot key, or a random
// one.
func keySource(hot bool) func(r *rand.Rand) string {
	if hot {
		k := "hot-" + randomPrefix("k")
		return func(*rand.Rand) string { return k }
	}
	run := randomPrefix("r")
	return func(r *rand.Rand) string { return run + strconv.Itoa(r.IntN(1_000_000)) }
}

// runConcurrent runs b.N calls of op on conc goroutines through
// benchload.Run, with a background context.
func runConcurrent(b *testing.B, conc int, op func(ctx context.Context, r *rand.Rand) error) {
	b.Helper()
	ctx := context.Background()
	benchload.Run(b, conc, func(r *rand.Rand) error { return op(ctx, r) })
}

// benchPath is a way from the benchmarks to the database, which a store
// and its floors share in one run.
type benchPath struct {
	name string
	// schema makes an empty schema with the store's tables in it, for the
	// stores (or the floor's table) of one benchmark function, and returns
	// its name.
	schema func(b *testing.B) string
	// pool opens a pool of conns connections, connected, whose
	// search_path is schema; with async every transaction commits
	// asynchronously (the floors' setting).
	pool func(b *testing.B, conns int, schema string, async bool) *pgxpool.Pool
	// sync reports whether the path can run with synchronous commit.
	sync bool
}

// aliasTxBench is the alias of .ci/pgbouncer.sh for the benchmarks:
// transaction mode, search_path pgbouncerBenchSchema, every session with
// synchronous_commit off (PgBouncer passes no such setting from a client).
const (
	aliasTxBench         = "gatecount_tx_bench"
	pgbouncerBenchSchema = "gatecount_pgbouncer_bench"
)

// benchPaths are the paths the benchmarks run through: directly, with
// pgx's defaults, and through PgBouncer in transaction mode with
// default_query_exec_mode=exec, as the README tells apps behind such a
// pooler. A benchmark through PgBouncer fails under CI=true when PgBouncer
// is unreachable, and is skipped otherwise.
var benchPaths = []benchPath{
	{
		name:   "direct",
		schema: benchSchema,
		pool: func(b *testing.B, conns int, schema string, async bool) *pgxpool.Pool {
			params := map[string]string{"search_path": schema}
			if async {
				params["synchronous_commit"] = "off"
			}
			return benchPool(b, conns, params)
		},
		sync: true,
	},
	{
		name: "pgbouncer",
		schema: func(b *testing.B) string {
			poolerPool(b, aliasTxBench, "exec") // skips or fails when unreachable
			admin := newPool(b)
			ctx := context.Background()
			if _, err := admin.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %[1]s", pgbouncerBenchSchema)); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgbouncerBenchSchema+" CASCADE") })
			if err := Migrate(ctx, benchPool(b, 1, map[string]string{"search_path": pgbouncerBenchSchema})); err != nil {
				b.Fatal(err)
			}
			return pgbouncerBenchSchema
		},
		pool: func(b *testing.B, conns int, _ string, _ bool) *pgxpool.Pool {
			return connectedPool(b, poolerURL(aliasTxBench, "exec"), conns, nil)
		},
	},
}

func BenchmarkSelect1(b *testing.B) {
	for _, path := range benchPaths {
		for _, conc := range benchConcurrency {
			b.Run(fmt.Sprintf("%s/c%d", path.name, conc), func(b *testing.B) {
				if path.name != "direct" {
					path.schema(b) // skips or fails when unreachable
				}
				pool := path.pool(b, conc, "public", false)
				runConcurrent(b, conc, func(ctx context.Context, _ *rand.Rand) error {
					var one int
					return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
				})
			})
		}
	}
}

// BenchmarkUpsertCounter is the floor a special-purpose store could reach:
// a fixed-window counter in one INSERT ... ON CONFLICT DO UPDATE ...
// RETURNING on a table of its own, without a bound or all-or-nothing keys.
// "async" commits as this store does by default; "sync" waits for the WAL
// flush (directly only).
func BenchmarkUpsertCounter(b *testing.B) {
	const table = "gatecount_upsert_floor"
	q := `INSERT INTO ` + table + ` AS t (keyhash, value, expires_at)
VALUES ($1, 1, now() + interval '1 minute')
ON CONFLICT (keyhash) DO UPDATE SET
  value = CASE WHEN t.expires_at <= now() THEN 1 ELSE t.value + 1 END,
  expires_at = CASE WHEN t.expires_at <= now() THEN EXCLUDED.expires_at ELSE t.expires_at END
RETURNING value, expires_at`
	for _, path := range benchPaths {
		b.Run(path.name, func(b *testing.B) {
			schema := path.schema(b)
			if _, err := newPool(b).Exec(context.Background(), "CREATE TABLE "+schema+"."+table+` (
		keyhash bytea PRIMARY KEY, value bigint NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			for _, commit := range []string{"async", "sync"} {
				if commit == "sync" && !path.sync {
					continue
				}
				for _, hot := range []bool{true, false} {
					for _, conc := range benchConcurrency {
						b.Run(fmt.Sprintf("%s/%s/c%d", commit, keysName(hot), conc), func(b *testing.B) {
							pool := path.pool(b, conc, schema, commit == "async")
							vacuumFirst(b, pool, table)
							key := keySource(hot)
							runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
								var v int64
								var e time.Time
								return pool.QueryRow(ctx, q, []byte(key(r))).Scan(&v, &e)
							})
						})
					}
				}
			}
		})
	}
}

func keysName(hot bool) string {
	if hot {
		return "hot"
	}
	return "random"
}

// vacuumFirst vacuums table before the first round of each benchmark
// (b.N == 1), so that stores and the floor are measured on tables as
// autovacuum would keep them: test servers often run without autovacuum,
// and earlier benchmarks and runs leave dead rows behind (the sweep of each
// new store deletes the rows that expired since).
func vacuumFirst(b *testing.B, pool *pgxpool.Pool, table string) {
	b.Helper()
	if b.N != 1 {
		return
	}
	if _, err := pool.Exec(context.Background(), "VACUUM "+table); err != nil {
		b.Logf("vacuum %s: %v", table, err)
	}
}

// benchSchema creates a schema for one run of a benchmark function, with the
// store's tables migrated into it, and drops it when the run ends: each
// run's stores start from an empty table, as UpsertCounter's floor starts
// from a table of its own, rather than from one that every earlier run has
// grown and filled with dead rows and expired entries.
func benchSchema(b *testing.B) string { return migratedSchema(b) }

// migratedSchema is benchSchema, for tests too.
func migratedSchema(b testing.TB) string {
	b.Helper()
	admin := newPool(b)
	ctx := context.Background()
	schema := "gatecount_bench_" + randomPrefix("s")[2:14]
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	if err := Migrate(ctx, benchPool(b, 1, map[string]string{"search_path": schema})); err != nil {
		b.Fatal(err)
	}
	return schema
}

// benchHandle opens a store of its own secret, in schema through path, on
// a pool of conc connections, running (see runningStore).
func benchHandle(b *testing.B, path benchPath, schema string, conc int, o Options) *store.Handle {
	b.Helper()
	pool := path.pool(b, conc, schema, false)
	s := runningStore(b, pool, o)
	vacuumFirst(b, pool, "gatecount_entries")
	return newHandle(b, s, "bench")
}

// benchAnnounce is how often the benchmarks' stores announce themselves,
// unless their options say: short, so that their start ends soon.
const benchAnnounce = 50 * time.Millisecond

// runningStore opens a store of its own secret on pool and waits until it
// is running: the benchmarks measure a store that is running, not one that
// is starting. It waits for the store's first sweep and count (see
// Backend.background). Then it waits until the store counts new keys by its
// estimate: until it has counted the fleet, or exactStart announce
// intervals after it opened (see Backend.hold). Until then every count takes
// gatecount_count and the bound's exact count.
func runningStore(t testing.TB, pool *pgxpool.Pool, o Options) *store.Store {
	t.Helper()
	o.Secret = randomSecret()
	if o.Store.Announce == 0 {
		o.Store.Announce = benchAnnounce
	}
	s := newStore(t, pool, o)
	be := s.Backend().(*Backend)
	<-be.started
	for be.members() == 0 {
		left := time.Duration(be.exactUntil - be.processNow().UnixNano())
		if left <= 0 {
			break
		}
		time.Sleep(left)
	}
	return s
}

// TestBenchStoreRunning: a store the benchmarks measure counts one key at
// a time with the single-key statement, never with gatecount_count, which
// a store still starting takes for every count. A count of two keys takes
// it, so that the test sees the function's calls.
func TestBenchStoreRunning(t *testing.T) {
	ctx := context.Background()
	schema := migratedSchema(t)
	pool := connectedPool(t, benchURL(), 1, map[string]string{"search_path": schema, "track_functions": "all"})
	h := newHandle(t, runningStore(t, pool, Options{}), "bench")
	caps := []store.Budget{{Limit: 1 << 40, Window: time.Minute}, {Limit: 1 << 40, Window: time.Minute}}
	for i := range 20 {
		key := "hot"
		if i%2 == 0 {
			key = fmt.Sprint("new", i)
		}
		if _, err := h.Count(ctx, []string{key}, caps[:1], 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := functionCalls(t, pool, schema, "gatecount_count"); got != 0 {
		t.Errorf("20 counts of one key called gatecount_count %d times, want 0", got)
	}
	if _, err := h.Count(ctx, []string{"a", "b"}, caps, 1); err != nil {
		t.Fatal(err)
	}
	if got := functionCalls(t, pool, schema, "gatecount_count"); got != 1 {
		t.Errorf("gatecount_count called %d times after a count of two keys, want 1", got)
	}
}

// functionCalls returns how many times the connections of pool, whose
// sessions track function calls (track_functions), called the function
// name of schema. It makes them report their statistics first: pool must
// hold one connection.
func functionCalls(t *testing.T, pool *pgxpool.Pool, schema, name string) int64 {
	t.Helper()
	ctx := context.Background()
	// The server reports a session's statistics when it goes idle after
	// pg_stat_force_next_flush, before it answers.
	if _, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	var calls int64
	err := newPool(t).QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions
		WHERE schemaname = $1 AND funcname = $2`, schema, name).Scan(&calls)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// forPaths runs bench for each path (those that can run with synchronous
// commit, when sync), hot and random keys and each concurrency, each path
// with a schema of its own.
func forPaths(b *testing.B, sync bool, bench func(b *testing.B, path benchPath, schema string, hot bool, conc int)) {
	for _, path := range benchPaths {
		if sync && !path.sync {
			continue
		}
		b.Run(path.name, func(b *testing.B) {
			schema := path.schema(b)
			for _, hot := range []bool{true, false} {
				for _, conc := range benchConcurrency {
					b.Run(fmt.Sprintf("%s/c%d", keysName(hot), conc), func(b *testing.B) {
						bench(b, path, schema, hot, conc)
					})
				}
			}
		})
	}
}

// BenchmarkUpdate is the generic path: two round trips, apply in between.
func BenchmarkUpdate(b *testing.B) {
	forPaths(b, false, func(b *testing.B, path benchPath, schema string, hot bool, conc int) {
		h := benchHandle(b, path, schema, conc, Options{})
		key := keySource(hot)
		runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
			return h.Update(ctx, []string{key(r)}, incr)
		})
	})
}

// BenchmarkCount is Handle.Count through the native Counter: one statement.
func BenchmarkCount(b *testing.B) { benchCount(b, Options{}) }

// BenchmarkCountSyncCommit is BenchmarkCount with Options.SyncCommit: every
// count waits for its WAL flush, as UpsertCounter/sync does (directly
// only).
func BenchmarkCountSyncCommit(b *testing.B) { benchCount(b, Options{SyncCommit: true}) }

func benchCount(b *testing.B, o Options) {
	caps := []store.Budget{{Limit: 1 << 40, Window: time.Minute}}
	forPaths(b, o.SyncCommit, func(b *testing.B, path benchPath, schema string, hot bool, conc int) {
		h := benchHandle(b, path, schema, conc, o)
		key := keySource(hot)
		runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
			_, err := h.Count(ctx, []string{key(r)}, caps, 1)
			return err
		})
	})
}

// BenchmarkLimiterAttempt is limiter.Attempt over this store.
// Under the Local policy the limiter also marks each attempt in its memory
// while the store answers it (so that counting alone could take it as
// admitted); under Deny, the default, it does not.
func BenchmarkLimiterAttempt(b *testing.B) {
	for _, policy := range []limiter.Policy{limiter.Deny, limiter.Local} {
		b.Run("policy="+policy.String(), func(b *testing.B) {
			forPaths(b, false, func(b *testing.B, path benchPath, schema string, hot bool, conc int) {
				h := benchHandle(b, path, schema, conc, Options{})
				l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Minute}, Unavailable: policy})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				key := keySource(hot)
				runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
					_, err := l.Attempt(ctx, key(r))
					return err
				})
			})
		})
	}
}

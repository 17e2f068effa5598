package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/servicetest"
)

// The tests behind a pooler go through the PgBouncer that .ci/pgbouncer.sh
// starts, at GATECOUNT_TEST_PGBOUNCER_URL (postgres://postgres@127.0.0.1:6432
// by default), whose databases are aliases of the test database.
const (
	aliasTx        = "gatecount_tx"         // pool_mode=transaction
	aliasSession   = "gatecount_session"    // pool_mode=session
	aliasTxScratch = "gatecount_tx_scratch" // transaction, search_path scratchSchema
	scratchSchema  = "gatecount_pgbouncer_scratch"
)

// pgbouncerBase is the URL of the PgBouncer the tests go through, without
// a database.
func pgbouncerBase() string {
	if u := os.Getenv("GATECOUNT_TEST_PGBOUNCER_URL"); u != "" {
		return strings.TrimSuffix(u, "/")
	}
	return "postgres://postgres@127.0.0.1:6432"
}

// poolerURL is the URL of alias through PgBouncer, with pgx's query exec
// mode (its name in a connection string; "" keeps pgx's default).
func poolerURL(alias, mode string) string {
	u := pgbouncerBase() + "/" + alias + "?sslmode=disable"
	if mode != "" {
		u += "&default_query_exec_mode=" + mode
	}
	return u
}

// poolerPool opens a pool on alias through PgBouncer, in mode, after
// migrating the test database directly. When PgBouncer is unreachable, the
// test fails under CI=true and is skipped otherwise.
func poolerPool(t testing.TB, alias, mode string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	newPool(t)
	return openPool(t, poolerURL(alias, mode), "PgBouncer", "run .ci/pgbouncer.sh, or set GATECOUNT_TEST_PGBOUNCER_URL", opts...)
}

// pgbouncerReconnect asks PgBouncer, on its admin console, to close every
// server connection once its client releases it, so that the next
// transactions run on new ones. It first waits (up to a minute) until no
// server connection is logging in: PgBouncer 1.18 takes a login cut short
// by RECONNECT for a failed one, and then refuses clients for
// server_login_retry.
func pgbouncerReconnect(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, pgbouncerBase()+"/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatalf("PgBouncer's admin console: %v", err)
	}
	defer c.Close(ctx)
	for {
		rows, err := c.Query(ctx, "SHOW POOLS")
		if err != nil {
			t.Fatalf("SHOW POOLS: %v", err)
		}
		pools, err := pgx.CollectRows(rows, pgx.RowToMap)
		if err != nil {
			t.Fatalf("SHOW POOLS: %v", err)
		}
		login := 0
		for _, p := range pools {
			switch n := p["sv_login"].(type) {
			case int32:
				login += int(n)
			case int64:
				login += int(n)
			default:
				t.Fatalf("SHOW POOLS: sv_login is %T", n)
			}
		}
		if login == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("PgBouncer still logging in %d server connections", login)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := c.Exec(ctx, "RECONNECT"); err != nil {
		t.Fatalf("RECONNECT: %v", err)
	}
}

// poolerModes are the pooler modes and pgx modes the tests run through: a
// transaction pooler with each mode that prepares no named statement, and a
// session pooler with pgx's default statement cache.
var poolerModes = []struct{ alias, mode string }{
	{aliasTx, "exec"},
	{aliasTx, "simple_protocol"},
	{aliasTx, "cache_describe"},
	{aliasTx, "describe_exec"},
	{aliasSession, ""},
}

func poolerName(alias, mode string) string {
	if mode == "" {
		mode = "default"
	}
	return strings.TrimPrefix(alias, "gatecount_") + "/" + mode
}

// TestPoolerContract runs the contract suite through PgBouncer, as
// TestContract does directly: two pools as two instances, in the first
// pooler mode and pgx mode. TestPoolerContractModes runs it in the others.
func TestPoolerContract(t *testing.T) {
	m := poolerModes[0]
	t.Run(poolerName(m.alias, m.mode), func(t *testing.T) {
		runContract(t, poolerPool(t, m.alias, m.mode), poolerPool(t, m.alias, m.mode))
	})
}

// TestPoolerContractModes runs the contract suite through PgBouncer in
// each pooler mode and pgx mode but the first (long: a minute more).
func TestPoolerContractModes(t *testing.T) {
	servicetest.Long(t)
	for _, m := range poolerModes[1:] {
		t.Run(poolerName(m.alias, m.mode), func(t *testing.T) {
			runContract(t, poolerPool(t, m.alias, m.mode), poolerPool(t, m.alias, m.mode))
		})
	}
}

// TestPoolerExactBudget runs TestExactBudget's bursts through PgBouncer, in
// each pooler mode and pgx mode, with PgBouncer's server connections
// replaced (RECONNECT) between bursts: exactly the budget is admitted each
// time, and no call fails.
func TestPoolerExactBudget(t *testing.T) {
	for _, m := range poolerModes {
		t.Run(poolerName(m.alias, m.mode), func(t *testing.T) {
			exactBudget(t, poolerPool(t, m.alias, m.mode), poolerPool(t, m.alias, m.mode), 5, func(t *testing.T) { pgbouncerReconnect(t) })
		})
	}
}

// TestPoolerMigrate: four instances migrating an empty schema at once
// through PgBouncer all succeed, five times over, in transaction mode (with
// pgx's default mode too: Migrate prepares nothing) and in session mode;
// each migration is applied once, and no advisory lock is left behind.
func TestPoolerMigrate(t *testing.T) {
	admin := newPool(t)
	ctx := context.Background()
	for _, c := range []struct{ alias, mode string }{
		{aliasTxScratch, "exec"},
		{aliasTxScratch, ""},
		{aliasSession, ""},
	} {
		t.Run(poolerName(c.alias, c.mode), func(t *testing.T) {
			for round := range 5 {
				schema := scratchSchema
				var opts []func(*pgxpool.Config)
				if c.alias == aliasSession {
					// A session pooler keeps the client's session: its
					// search_path can be set after connecting.
					schema = "gatecount_test_" + randomPrefix("m")[2:14]
					opts = append(opts, func(cfg *pgxpool.Config) {
						cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
							_, err := c.Exec(ctx, "SET search_path = "+schema)
							return err
						}
					})
				}
				if _, err := admin.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %[1]s", schema)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
				pools := make([]*pgxpool.Pool, 4)
				for i := range pools {
					pools[i] = poolerPool(t, c.alias, c.mode, opts...)
				}
				errs := make([]error, len(pools))
				var wg sync.WaitGroup
				for i, p := range pools {
					wg.Go(func() { errs[i] = Migrate(ctx, p) })
				}
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Fatalf("round %d: Migrate %d: %v", round, i, err)
					}
				}
				var applied, version int
				if err := admin.QueryRow(ctx, fmt.Sprintf("SELECT count(*), max(version) FROM %s.gatecount_migrations", schema)).Scan(&applied, &version); err != nil {
					t.Fatal(err)
				}
				if applied != len(migrations) || version != SchemaVersion() {
					t.Fatalf("round %d: %d migrations recorded, up to version %d; want %d, up to %d", round, applied, version, len(migrations), SchemaVersion())
				}
				if n := migrationLocks(t, admin); n != 0 {
					t.Fatalf("round %d: %d migration locks held after Migrate returned", round, n)
				}
				for _, p := range pools {
					p.Close()
				}
			}
		})
	}
}

// migrationLocks counts the advisory locks on migrationLock in the test
// database, held or awaited.
func migrationLocks(t testing.TB, admin *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 1
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (classid::bigint << 32 | objid::bigint) = $1`, migrationLock).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateLockTimeout: a migration that waits longer than the lock
// timeout for another gives up with ErrMigrationLocked, having changed
// nothing, and succeeds once the other ends.
func TestMigrateLockTimeout(t *testing.T) {
	admin := newPool(t)
	pool := freshSchema(t)
	ctx := context.Background()
	defer func(d time.Duration) { migrationLockTimeout = d }(migrationLockTimeout)
	migrationLockTimeout = 100 * time.Millisecond
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
		t.Fatal(err)
	}
	err = Migrate(ctx, pool)
	if !errors.Is(err, ErrMigrationLocked) {
		t.Fatalf("Migrate while another holds the lock: %v, want ErrMigrationLocked", err)
	}
	if have, err := schemaVersion(ctx, pool); err != nil || have != 0 {
		t.Fatalf("schema version %d (%v) after the migration gave up, want 0", have, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate once the lock is free: %v", err)
	}
	if n := migrationLocks(t, admin); n != 0 {
		t.Fatalf("%d migration locks held after Migrate returned", n)
	}
}

// TestPoolerNamedStatementsRefused: with pgx's default statement cache
// through PgBouncer in transaction mode, whose server connections keep no
// statement across transactions, New refuses the pool with an error
// matching ErrPoolSetting that names default_query_exec_mode, rather than
// failing at the first count; in session mode the same settings work.
func TestPoolerNamedStatementsRefused(t *testing.T) {
	_, err := New(context.Background(), poolerPool(t, aliasTx, ""), Options{Secret: testSecret})
	if !errors.Is(err, ErrPoolSetting) || !strings.Contains(err.Error(), "default_query_exec_mode") {
		t.Fatalf("New through a transaction pooler with pgx's default mode: %v, want ErrPoolSetting naming default_query_exec_mode", err)
	}
	s, err := New(context.Background(), poolerPool(t, aliasSession, ""), Options{Secret: testSecret})
	if err != nil {
		t.Fatalf("New through a session pooler with pgx's default mode: %v", err)
	}
	s.Close()
}

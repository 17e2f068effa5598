package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	schema "github.com/gatecount/gatecount/internal/migrations"
)

// ErrNotMigrated is matched by the error [New] returns when the database
// lacks the store's table, or has an older version of it. Run [Migrate]
// first, or `go run github.com/gatecount/gatecount/cmd/gatecount migrate`
// with DATABASE_URL set.
var ErrNotMigrated = errors.New("postgres: database not migrated for gatecount")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the transaction-scoped advisory lock each migration's
// transaction takes first, so that instances starting at once apply each
// migration once.
const migrationLock int64 = 0x6761_7465_6d69_6772 // "gatemigr"

// MigrationLockTimeout is how long [Migrate] waits for a lock. That is the
// migration lock, while another instance migrates. It is also a lock on the
// store's tables that a migration's statements need, while calls hold it.
// Past it Migrate gives up with an error matching [ErrMigrationLocked].
// Migrations take milliseconds, so a wait this long means one is stuck.
const MigrationLockTimeout = 30 * time.Second

// ErrMigrationLocked is matched by the error of a Migrate that waited
// [MigrationLockTimeout] for a lock and gave up, having changed nothing.
var ErrMigrationLocked = errors.New("postgres: migrate: gave up waiting for a lock")

// migrationLockTimeout is MigrationLockTimeout; tests shorten it.
var migrationLockTimeout = MigrationLockTimeout

// migrations are the embedded migrations, in version order. The files are
// the package's own, so a malformed one is a bug caught by every test.
var migrations = func() []schema.Migration {
	ms, err := schema.Load(migrationFiles, "migrations")
	if err != nil {
		panic("postgres: " + err.Error())
	}
	return ms
}()

// SchemaVersion is the version of the store's schema this package needs:
// the number of its newest migration.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

// Migrate brings the database pool connects to up to [SchemaVersion]: it
// creates the store's table and functions, recording each applied migration
// in the table gatecount_migrations. It is idempotent, and safe to run from
// several instances at once, directly or through a pooler in any mode. Each
// migration runs in a transaction of its own, which first takes a
// transaction-scoped advisory lock (pg_advisory_xact_lock). One instance
// applies it while the others wait, then find it applied. The lock ends
// with its transaction, on the connection that took it. A wait for a lock
// ends after [MigrationLockTimeout] (lock_timeout, set for the transaction
// alone) with an error matching [ErrMigrationLocked]. A database that is up
// to date is only read, without the lock.
//
// Migrate sends its statements in the simple protocol, whatever the pool's
// default_query_exec_mode, so that it prepares no named statement.
//
// Tables are created in the first schema of the connection's search_path.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	have, err := schemaVersion(ctx, pool)
	if err != nil {
		return fmt.Errorf("postgres: migrate: read the schema version: %w", err)
	}
	for have < SchemaVersion() {
		if have, err = migrateOne(ctx, pool); err != nil {
			return err
		}
	}
	return nil
}

// migrateOne applies, in one transaction under the migration lock, the
// migration after the database's version, if there is one, and returns the
// database's version after it.
func migrateOne(ctx context.Context, pool *pgxpool.Pool) (version int, err error) {
	const simple = pgx.QueryExecModeSimpleProtocol
	step := "take the migration lock"
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrationLockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", simple, migrationLock); err != nil {
			return err
		}
		step = "create gatecount_migrations"
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS gatecount_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		step = "read the schema version"
		if err := tx.QueryRow(ctx, sqlSchemaVersion, simple).Scan(&version); err != nil {
			return err
		}
		if version >= SchemaVersion() {
			return nil
		}
		m := migrations[version] // version+1
		step = "apply " + m.Name
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO gatecount_migrations (version, name) VALUES ($1, $2)", simple, m.Version, m.Name); err != nil {
			return err
		}
		version = m.Version
		return nil
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == errLockTimeout && step == "take the migration lock":
		return 0, fmt.Errorf("%w: another migration held the migration lock for %v; try again once it ends (pg_stat_activity shows it): %w", ErrMigrationLocked, migrationLockTimeout, err)
	case errors.As(err, &pgErr) && pgErr.Code == errLockTimeout:
		return 0, fmt.Errorf("%w: %s: a lock on the store's tables was held for %v; try again: %w", ErrMigrationLocked, step, migrationLockTimeout, err)
	case err != nil:
		return 0, fmt.Errorf("postgres: migrate: %s: %w", step, err)
	}
	return version, nil
}

// errLockTimeout is the SQLSTATE of a statement that waited lock_timeout
// for a lock (lock_not_available).
const errLockTimeout = "55P03"

const sqlSchemaVersion = "SELECT coalesce(max(version), 0) FROM gatecount_migrations"

// schemaVersion reads the database's schema version, 0 when it has no
// gatecount_migrations table, in the simple protocol.
func schemaVersion(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var have int
	err := pool.QueryRow(ctx, sqlSchemaVersion, pgx.QueryExecModeSimpleProtocol).Scan(&have)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	return have, err
}

// checkSchema returns an error matching ErrNotMigrated unless the database
// has at least SchemaVersion.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	have, err := schemaVersion(ctx, pool)
	if err != nil {
		return fmt.Errorf("postgres: check the schema version: %w", err)
	}
	if have < SchemaVersion() {
		return fmt.Errorf("%w: schema version %d, need %d: run `go run github.com/gatecount/gatecount/cmd/gatecount migrate` with DATABASE_URL set, or call postgres.Migrate", ErrNotMigrated, have, SchemaVersion())
	}
	return nil
}

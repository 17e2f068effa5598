package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	schema "github.com/gatecount/gatecount/internal/migrations"
)

// ErrNotMigrated is matched by the error New returns when the database lacks
// the store's table, or has an older version of it: run Migrate, or
// `go run ./cmd/gatecount migrate` with DATABASE_URL set, first.
var ErrNotMigrated = errors.New("postgres: database not migrated for gatecount")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the session advisory lock Migrate holds while it runs,
// so that instances starting at once apply each migration once.
const migrationLock int64 = 0x6761_7465_6d69_6772 // "gatemigr"

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

// Migrate brings the database pool connects to up to SchemaVersion: it
// creates the store's table and functions, recording each applied migration
// in the table gatecount_migrations. It is idempotent, and safe to run from
// several instances at once: a session advisory lock lets one apply the
// migrations while the others wait, then find nothing left to do. Each
// migration runs in a transaction of its own.
//
// Tables are created in the first schema of the connection's search_path.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: acquire a connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return fmt.Errorf("postgres: migrate: take the migration lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLock); uerr != nil {
			// A session lock must not outlive Migrate on a pooled
			// connection: close the connection, which drops the lock.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			if err == nil {
				err = fmt.Errorf("postgres: migrate: release the migration lock: %w", uerr)
			}
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS gatecount_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres: migrate: create gatecount_migrations: %w", err)
	}
	var have int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM gatecount_migrations").Scan(&have); err != nil {
		return fmt.Errorf("postgres: migrate: read the schema version: %w", err)
	}
	for _, m := range migrations {
		if m.Version <= have {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO gatecount_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migrate: apply %s: %w", m.Name, err)
		}
	}
	return nil
}

// checkSchema returns an error matching ErrNotMigrated unless the database
// has at least SchemaVersion.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var have int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM gatecount_migrations").Scan(&have)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		have = 0
	case err != nil:
		return fmt.Errorf("postgres: check the schema version: %w", err)
	}
	if have < SchemaVersion() {
		return fmt.Errorf("%w: schema version %d, need %d: run `go run ./cmd/gatecount migrate` with DATABASE_URL set, or call postgres.Migrate", ErrNotMigrated, have, SchemaVersion())
	}
	return nil
}

package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. Each file
// is named NNNN_name.sql.
var migrations = func() []migration {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	var ms []migration
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic("postgres: migration file without a version: " + n)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms
}()

// SchemaVersion is the version of the store's schema this package needs:
// the number of its newest migration.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

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
		if m.version <= have {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO gatecount_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migrate: apply %s: %w", m.name, err)
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

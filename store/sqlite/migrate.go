package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strconv"

	schema "github.com/gatecount/gatecount/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaVersion is the schema version this package needs: the number of the
// last migration embedded in it.
var SchemaVersion = func() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}()

// ErrNotMigrated is returned by Open and New when the database's schema is
// older than [SchemaVersion]: run Migrate first (or set Options.AutoMigrate).
var ErrNotMigrated = errors.New("sqlite: limit store schema not migrated")

// migrations returns the embedded migrations in version order.
func migrations() ([]schema.Migration, error) {
	ms, err := schema.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

const schemaTable = `CREATE TABLE IF NOT EXISTS gatecount_limit_schema (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at INTEGER NOT NULL
)`

// Migrate brings the limit store's tables in db up to [SchemaVersion]. It
// applies each embedded migration the database has not had, in order, in
// one BEGIN IMMEDIATE transaction: all of them or none. It is idempotent,
// and safe to run from several processes at once on one file: they take
// turns and the later ones find nothing to do. It also turns on WAL mode,
// which the file keeps.
//
// db must use the driver of modernc.org/sqlite (driver name "sqlite").
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := migrate(ctx, db)
	return err
}

// migrate is Migrate, returning the version the database had before.
func migrate(ctx context.Context, db *sql.DB) (from int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer conn.Close()
	for _, p := range []string{
		"PRAGMA busy_timeout = " + strconv.FormatInt(DefaultBusyTimeout.Milliseconds(), 10),
		"PRAGMA journal_mode = WAL",
	} {
		if _, err := conn.ExecContext(ctx, p); err != nil {
			return 0, fmt.Errorf("sqlite: migrate: %s: %w", p, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("sqlite: migrate: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if _, err := conn.ExecContext(ctx, schemaTable); err != nil {
		return 0, fmt.Errorf("sqlite: migrate: %w", err)
	}
	var have int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM gatecount_limit_schema").Scan(&have); err != nil {
		return 0, fmt.Errorf("sqlite: migrate: %w", err)
	}
	for _, m := range ms {
		if m.Version <= have {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return 0, fmt.Errorf("sqlite: migrate: %s: %w", m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO gatecount_limit_schema (version, applied_at) VALUES (?, unixepoch())", m.Version); err != nil {
			return 0, fmt.Errorf("sqlite: migrate: %s: %w", m.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return 0, fmt.Errorf("sqlite: migrate: commit: %w", err)
	}
	committed = true
	return have, nil
}

// MigrateFile runs Migrate on the SQLite file at path, creating it if need
// be: what a migrate command calls with the path [ParseURL] returns. It
// returns the schema version the file had before: 0 for a new file,
// [SchemaVersion] when there was nothing to do.
func MigrateFile(ctx context.Context, path string) (from int, err error) {
	if path == "" {
		return 0, errors.New("sqlite: empty path")
	}
	db, err := sql.Open("sqlite", fileURI(path))
	if err != nil {
		return 0, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	defer db.Close()
	if from, err = migrate(ctx, db); err != nil {
		return 0, pathError(path, err)
	}
	return from, nil
}

// schemaVersion returns the version the database was migrated to, 0 when
// it never was.
func schemaVersion(ctx context.Context, conn *sql.Conn) (int, error) {
	var n int
	err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'gatecount_limit_schema'").Scan(&n)
	if err != nil || n == 0 {
		return 0, err
	}
	var v int
	err = conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM gatecount_limit_schema").Scan(&v)
	return v, err
}

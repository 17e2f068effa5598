package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Version returns the schema version the database pool connects to was
// migrated to: 0 when it never was, SchemaVersion when it is up to date.
func Version(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var have int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM gatecount_migrations").Scan(&have)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("postgres: read the schema version: %w", err)
	}
	return have, nil
}

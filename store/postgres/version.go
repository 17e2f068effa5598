package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Version returns the schema version the database pool connects to was
// migrated to: 0 when it never was, [SchemaVersion] when it is up to date.
// Like Migrate, it prepares no named statement, so it works through any
// pooler.
func Version(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	v, err := schemaVersion(ctx, pool)
	if err != nil {
		return 0, fmt.Errorf("postgres: read the schema version: %w", err)
	}
	return v, nil
}

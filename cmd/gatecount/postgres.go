package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store/postgres"
)

func init() {
	migrators["postgres"] = migratePostgres
	migrators["postgresql"] = migratePostgres
}

// migratePostgres runs postgres.Migrate on the database url names and
// returns the schema version it had before and has after.
func migratePostgres(ctx context.Context, url string) (from, to int, err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, 0, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if from, err = postgres.Version(ctx, pool); err != nil {
		return 0, 0, err
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		return 0, 0, err
	}
	return from, postgres.SchemaVersion(), nil
}

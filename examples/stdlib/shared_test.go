package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/store/postgres"
)

// Two servers with one DATABASE_URL share every budget exactly.
func TestSharedPostgres(t *testing.T) {
	url := servicetest.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = postgres.Migrate(context.Background(), pool)
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL":                  url,
		"GATECOUNT_SECRET":              demotest.NewSecret(),
		"RATE_LIMIT_EXECUTE_PER_MINUTE": "30",
		"TRUSTED_PROXIES":               "127.0.0.1/32",
	}
	demotest.CheckShared(t, demotest.Start(t, routes, env), demotest.Start(t, routes, env))
}

// Two servers with one RATE_LIMIT_STORE_URL share every budget exactly.
func TestSharedRedis(t *testing.T) {
	env := map[string]string{
		"RATE_LIMIT_STORE_URL":          servicetest.RedisURL(t),
		"GATECOUNT_SECRET":              demotest.NewSecret(),
		"RATE_LIMIT_EXECUTE_PER_MINUTE": "30",
		"TRUSTED_PROXIES":               "127.0.0.1/32",
	}
	demotest.CheckShared(t, demotest.Start(t, routes, env), demotest.Start(t, routes, env))
}

// Two servers with one SQLite file share every budget exactly.
func TestSharedSQLite(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":                  "sqlite:" + filepath.Join(t.TempDir(), "gatecount.db"),
		"GATECOUNT_SECRET":              demotest.NewSecret(),
		"RATE_LIMIT_EXECUTE_PER_MINUTE": "30",
		"TRUSTED_PROXIES":               "127.0.0.1/32",
	}
	demotest.CheckShared(t, demotest.Start(t, routes, env), demotest.Start(t, routes, env))
}

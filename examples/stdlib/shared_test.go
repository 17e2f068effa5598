package main

import (
	"path/filepath"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demotest"
	"github.com/gatecount/gatecount/internal/servicetest"
)

// Two servers with one DATABASE_URL share every budget exactly.
func TestSharedPostgres(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":                  migratedPostgres(t),
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

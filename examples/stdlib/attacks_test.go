package main

import (
	"path/filepath"
	"testing"

	"github.com/gatecount/gatecount/examples/internal/demotest"
)

// The sign-in attacks of TestExample, on a store that does I/O, where a
// refusal may be answered from the limiter's memory without a store call.
func TestAttacksSQLite(t *testing.T) {
	env := func(t *testing.T) map[string]string {
		e := map[string]string{
			"DATABASE_URL":     "sqlite:" + filepath.Join(t.TempDir(), "gatecount.db"),
			"GATECOUNT_SECRET": demotest.NewSecret(),
		}
		for k, v := range demotest.AttackEnv {
			e[k] = v
		}
		return e
	}
	t.Run("device cookies", func(t *testing.T) { demotest.CheckDeviceCookies(t, demotest.Start(t, routes, env(t))) })
	t.Run("one reading", func(t *testing.T) { demotest.CheckUnreadable(t, demotest.Start(t, routes, env(t))) })
	t.Run("retry-after", func(t *testing.T) { demotest.CheckRetryAfter(t, demotest.Start(t, routes, env(t))) })
}

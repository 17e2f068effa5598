// Package servicetest finds the real servers that store tests talk to, and
// decides what a test does when one is missing: under CI=true it fails,
// elsewhere it is skipped with a message that says how to point it at one.
package servicetest

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Defaults, overridden by GATECOUNT_TEST_POSTGRES_URL and
// GATECOUNT_TEST_REDIS_URL.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// PostgresURL returns the URL of the test PostgreSQL server, once it answers
// on its port.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return reach(t, "GATECOUNT_TEST_POSTGRES_URL", DefaultPostgresURL, "5432")
}

// RedisURL returns the URL of the test Redis server, once it answers on its
// port.
func RedisURL(t testing.TB) string {
	t.Helper()
	return reach(t, "GATECOUNT_TEST_REDIS_URL", DefaultRedisURL, "6379")
}

func reach(t testing.TB, env, def, port string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		u = def
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	host := parsed.Host
	if parsed.Port() == "" {
		host = net.JoinHostPort(parsed.Hostname(), port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		Missing(t, "the server at "+host+" ("+env+")", err)
	}
	c.Close()
	return u
}

// Missing ends a test that needs a service it cannot reach: it fails under
// CI=true and is skipped otherwise.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is unreachable: %v", what, err)
	}
	t.Skipf("%s is unreachable, skipped outside CI: %v", what, err)
}

// LongEnv is the variable that turns on the long tests: floods, soaks and
// long fault runs. CI sets it in a phase of their own.
const LongEnv = "GATECOUNT_LONG"

// IsLong reports whether the long tests run: LongEnv is "1".
func IsLong() bool { return os.Getenv(LongEnv) == "1" }

// Long skips t unless the long tests run. Call it first in a long test.
func Long(t testing.TB) {
	t.Helper()
	if !IsLong() {
		t.Skip("a long test: set " + LongEnv + "=1 to run it")
	}
}

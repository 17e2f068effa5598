package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redisURL is the Redis the tests use.
func redisURL() string {
	if u := os.Getenv("GATECOUNT_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// unreachable fails the test under CI and skips it otherwise.
func unreachable(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("Redis at %s is unreachable: %v", redisURL(), err)
	}
	tb.Skipf("Redis at %s is unreachable (%v); set GATECOUNT_TEST_REDIS_URL, or CI=true to fail instead", redisURL(), err)
}

// clientOptions are the options of a test client for addr ("" for the
// test Redis).
func clientOptions(tb testing.TB, addr string) *redis.Options {
	tb.Helper()
	o, err := redis.ParseURL(redisURL())
	if err != nil {
		tb.Fatalf("GATECOUNT_TEST_REDIS_URL: %v", err)
	}
	if addr != "" {
		o.Addr = addr
	}
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.PoolSize = 64
	return o
}

// newClient returns a client of its own on the test Redis, closed when the
// test ends.
func newClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(clientOptions(tb, ""))
	tb.Cleanup(func() { c.Close() })
	if err := c.Ping(tb.Context()).Err(); err != nil {
		unreachable(tb, err)
	}
	return c
}

// quiet is the logger of the stores open makes: the tests that look at
// logs give a logger of their own.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSecret returns a random secret, so that a test's keys are its own.
func newSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

func randomName(label string) string {
	var b [6]byte
	rand.Read(b[:])
	return label + "-" + hex.EncodeToString(b[:])
}

// open returns a store over c, closed when the test ends.
func open(tb testing.TB, c redis.UniversalClient, o redisstore.Options) *store.Store {
	tb.Helper()
	if o.Store.Logger == nil {
		o.Store.Logger = quiet
	}
	s, err := redisstore.New(context.Background(), c, o)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func handle(tb testing.TB, s *store.Store, prefix string) *store.Handle {
	tb.Helper()
	h, err := s.Handle(prefix)
	if err != nil {
		tb.Fatalf("Handle(%q): %v", prefix, err)
	}
	return h
}

// startServer starts a Redis server of the test's own on the loopback
// port (see servicetest.StartRedis).
func startServer(tb testing.TB, port int, args ...string) string {
	tb.Helper()
	return servicetest.StartRedis(tb, port, args...)
}

// stopServer shuts down the Redis server at addr, if one answers there.
func stopServer(addr string) { servicetest.StopRedis(addr) }

// ownClient returns a client on a server a test started, closed when the
// test ends.
func ownClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	o := clientOptions(tb, addr)
	o.DB, o.Username, o.Password = 0, "", ""
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

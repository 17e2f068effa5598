package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testURL is the database the tests use.
func testURL() string {
	if u := os.Getenv("GATECOUNT_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

var migrateOnce struct {
	sync.Mutex
	done bool
}

// newPool opens a pool on the test database, migrated, closed when t ends.
// When the database is unreachable the test fails under CI=true and is
// skipped otherwise.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPoolURL(t, testURL(), true)
}

func newPoolURL(t testing.TB, url string, migrate bool) *pgxpool.Pool {
	t.Helper()
	pool := openPool(t, url, "PostgreSQL", "set GATECOUNT_TEST_POSTGRES_URL")
	if migrate {
		migrateOnce.Lock()
		defer migrateOnce.Unlock()
		if !migrateOnce.done {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			migrateOnce.done = true
		}
	}
	return pool
}

// openPool opens a pool on url, changed first by each of opts, and checks
// that it answers; it is closed when t ends. When it does not answer, the
// test fails under CI=true and is skipped otherwise, naming what is
// unreachable and how to reach it.
func openPool(t testing.TB, url, what, how string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s at %s is unreachable: %v", what, url, err)
		}
		t.Skipf("%s at %s is unreachable (%s): %v", what, url, how, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// randomSecret returns a fresh secret, so that a store's rows and bound are
// its own.
func randomSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// testSecret is the secret the tests' stores share unless they need their
// own.
var testSecret = []byte("gatecount test secret, not for production use!")

func randomPrefix(label string) string {
	var b [6]byte
	rand.Read(b[:])
	return label + "-" + hex.EncodeToString(b[:]) + ":"
}

// newStore opens a store over pool, closed when t ends.
func newStore(t testing.TB, pool *pgxpool.Pool, o Options) *store.Store {
	t.Helper()
	if o.Secret == nil {
		o.Secret = testSecret
	}
	s, err := New(context.Background(), pool, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newHandle(t testing.TB, s *store.Store, label string) *store.Handle {
	t.Helper()
	h, err := s.Handle(randomPrefix(label))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

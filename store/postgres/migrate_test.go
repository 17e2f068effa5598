package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// freshSchema returns a pool whose search_path is a new, empty schema of
// its own, dropped when t ends.
func freshSchema(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin := newPoolURL(t, testURL(), false)
	schema := "gatecount_test_" + randomPrefix("s")[2:14]
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestNotMigrated: New on a database without the table says to migrate;
// several instances migrating at once all succeed; migrating again changes
// nothing; then New works.
func TestMigrate(t *testing.T) {
	pool := freshSchema(t)
	ctx := context.Background()
	if _, err := New(ctx, pool, Options{Secret: testSecret}); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("New before Migrate: %v, want ErrNotMigrated", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(ctx, pool) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var applied int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM gatecount_migrations").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(migrations) {
		t.Fatalf("%d migrations recorded, want %d", applied, len(migrations))
	}
	s, err := New(ctx, pool, Options{Secret: testSecret})
	if err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}
	defer s.Close()
	h, err := s.Handle("migrated:")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Count(ctx, []string{"k"}, faultCaps, 1); err != nil {
		t.Fatal(err)
	}
	// An older schema is refused too.
	if _, err := pool.Exec(ctx, "DELETE FROM gatecount_migrations WHERE version = $1", SchemaVersion()); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, pool, Options{Secret: testSecret}); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("New on an older schema: %v, want ErrNotMigrated", err)
	}
}

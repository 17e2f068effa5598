package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/store"
)

// TestAppQueryAfterStoreDeadline: the deadline of a store's call goes with
// the call, so the app's own use of the pool's connection after it, past
// that deadline, is not cut short.
func TestAppQueryAfterStoreDeadline(t *testing.T) {
	newPool(t)
	u := testURL()
	if strings.Contains(u, "?") {
		u += "&pool_max_conns=1"
	} else {
		u += "?pool_max_conns=1"
	}
	pool := newPoolURL(t, u, false) // one connection: the store's and the app's
	s := newStore(t, pool, Options{Secret: testSecret, Store: store.Options{Deadline: time.Second}})
	h := newHandle(t, s, "deadline")
	ctx := context.Background()
	if _, err := h.Count(ctx, []string{"k"}, faultCaps, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.Update(ctx, []string{"u"}, incr); err != nil {
		t.Fatal(err)
	}
	// A second: the one connection may be held by the store's own background
	// calls (announcements, sweeps) for a moment, and the calls wait for it.
	time.Sleep(1100 * time.Millisecond) // past both calls' deadlines
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the app's query after the store's calls: %v", err)
	}
}

// TestBackendDeadline: a call to a database that does not answer ends with
// an error matching context.DeadlineExceeded, for each path that bounds its
// I/O by the connection's deadline; a context cancelled before the call
// ends it before any I/O.
func TestBackendDeadline(t *testing.T) {
	p, pool := faultPool(t)
	b, err := NewBackend(context.Background(), pool, Options{Secret: randomSecret()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	<-b.started
	prefix := randomPrefix("bd")
	ops := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"count", func(ctx context.Context) error {
			var tl store.Tally
			return b.Count(ctx, prefix, []string{"k"}, faultCaps, 1, &tl)
		}},
		{"update", func(ctx context.Context) error { return b.Update(ctx, prefix, []string{"u"}, incr) }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			if err := op.call(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := op.call(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("call with a cancelled context: %v, want context.Canceled", err)
			}
			p.BlackHole()
			defer p.Restore()
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := op.call(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call to a black hole: %v, want context.DeadlineExceeded", err)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				t.Fatalf("call to a black hole: a server error %v", pgErr)
			}
		})
	}
}

// TestReplanAfterGrowth: statements prepared while the table was nearly
// empty are prepared again once it has grown, so that the one-key lock of
// Update, planned as a sequential scan of a table of no pages, becomes a
// lookup by primary key.
func TestReplanAfterGrowth(t *testing.T) {
	schema := migratedSchema(t)
	// One connection, whose statements are prepared by name whatever the
	// test URL's mode.
	pool := benchPool(t, 1, map[string]string{"search_path": schema}, func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	})
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "VACUUM gatecount_entries"); err != nil { // statistics of an empty table
		t.Fatal(err)
	}
	b, err := NewBackend(ctx, pool, Options{Secret: randomSecret()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	<-b.started
	prefix := randomPrefix("replan")
	updates := func(label string) {
		for i := range 8 { // past the 5 custom plans PostgreSQL makes before it settles
			if err := b.Update(ctx, prefix, []string{fmt.Sprint(label, i)}, incr); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan := func() string {
		rows, err := pool.Query(ctx, fmt.Sprintf(`EXPLAIN EXECUTE %s('\x00'::bytea)`, stmtName(uLockRead1Async)), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	updates("before")
	if p := plan(); !strings.Contains(p, "Seq Scan") {
		t.Fatalf("plan on a nearly empty table, before growth: want PostgreSQL's sequential scan, the case this guards against:\n%s", p)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
		SELECT sha256(g::text::bytea), $1, '1', now() + interval '1 hour' FROM generate_series(1, 5000) AS g`, b.fp); err != nil {
		t.Fatal(err)
	}
	if err := b.recount(ctx); err != nil {
		t.Fatal(err)
	}
	updates("after")
	if p := plan(); !strings.Contains(p, "Index Scan") {
		t.Fatalf("plan after the table grew to 5,000 rows: want a lookup by primary key:\n%s", p)
	}
}

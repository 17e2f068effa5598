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

// modePool opens a pool of one connection on the test database in pgx's
// mode (its connection-string name).
func modePool(t *testing.T, mode string) *pgxpool.Pool {
	t.Helper()
	newPool(t)
	return newPoolURL(t, testURL()+sep(testURL())+"pool_max_conns=1&default_query_exec_mode="+mode, false)
}

var allModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// TestRunner, in every mode: statements sent before a sync are one
// transaction, which a flush leaves open and the sync commits; after a
// statement fails, it and every later one return its error, the sync rolls
// the transaction back and the connection is idle again; and a runner
// closed with its transaction open closes the connection, rolling the
// transaction back.
func TestRunner(t *testing.T) {
	for _, mode := range allModes {
		t.Run(mode, func(t *testing.T) {
			pool := modePool(t, mode)
			b, err := NewBackend(context.Background(), pool, Options{Secret: randomSecret()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			<-b.started
			ctx := context.Background()
			prefix := randomPrefix("runner")
			key := func(name string) []byte { h := b.hasher.Sum(prefix, name); return h[:] }
			exp := time.Now().Add(time.Hour)
			hasRow := func(name string) bool {
				t.Helper()
				var n int
				if err := pool.QueryRow(ctx, "SELECT count(*) FROM gatecount_entries WHERE keyhash = $1", key(name)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 1
			}
			// with runs f on a runner of its own, then closes it.
			with := func(f func(r *runner, c *pgxpool.Conn)) {
				t.Helper()
				ctx, cancel := context.WithTimeout(ctx, time.Minute) // a runner that hangs fails the test
				defer cancel()
				c, r, err := b.acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Release()
				defer r.close()
				f(r, c)
			}
			// readBack reads key's value in the runner's transaction.
			readBack := func(r *runner, name string) (string, error) {
				var v []byte
				err := r.row(nil, nil, &v, nil)
				return string(v), err
			}

			t.Run("commit", func(t *testing.T) {
				with(func(r *runner, c *pgxpool.Conn) {
					if err := r.send(uInsert1, key("commit"), b.fp, "7", exp); err != nil {
						t.Fatal(err)
					}
					if err := r.flush(); err != nil {
						t.Fatal(err)
					}
					if tag, err := r.exec(); err != nil || tag.RowsAffected() != 1 {
						t.Fatalf("insert: %v, %v", tag, err)
					}
					if err := r.send(cRead1, key("commit"), b.fp); err != nil {
						t.Fatal(err)
					}
					if err := r.sync(); err != nil {
						t.Fatal(err)
					}
					if v, err := readBack(r, "commit"); err != nil || v != "7" {
						t.Fatalf("read in the transaction %q, %v; want 7", v, err)
					}
					if err := r.synced(); err != nil {
						t.Fatal(err)
					}
					if s := c.Conn().PgConn().TxStatus(); s != 'I' {
						t.Fatalf("transaction status %q after the sync, want idle", s)
					}
				})
				if !hasRow("commit") {
					t.Fatal("the insert before the sync was not committed")
				}
			})

			t.Run("fail", func(t *testing.T) {
				with(func(r *runner, c *pgxpool.Conn) {
					if err := r.send(uInsert1, key("fail"), b.fp, "1", exp); err != nil {
						t.Fatal(err)
					}
					if err := r.flush(); err != nil {
						t.Fatal(err)
					}
					if _, err := r.exec(); err != nil {
						t.Fatalf("insert: %v", err)
					}
					// The bound refuses one entry more than -1.
					if err := r.send(uAdmit, b.fp, int32(1), int64(-1), time.Now(), b.boundLock); err != nil {
						t.Fatal(err)
					}
					if err := r.send(cRead1, key("fail"), b.fp); err != nil {
						t.Fatal(err)
					}
					if err := r.sync(); err != nil {
						t.Fatal(err)
					}
					var pgErr *pgconn.PgError
					if _, err := r.exec(); !errors.As(err, &pgErr) || pgErr.Code != errFullCode {
						t.Fatalf("admission past the bound: %v, want SQLSTATE %s", err, errFullCode)
					}
					if _, err := readBack(r, "fail"); !errors.As(err, &pgErr) || pgErr.Code != errFullCode {
						t.Fatalf("statement after the failed one: %v, want the same error", err)
					}
					if err := r.synced(); err != nil {
						t.Fatal(err)
					}
					pc := c.Conn().PgConn()
					if s := pc.TxStatus(); s != 'I' || pc.IsClosed() {
						t.Fatalf("after the sync: transaction status %q, closed %v; want an idle connection", s, pc.IsClosed())
					}
				})
				if hasRow("fail") {
					t.Fatal("a transaction with a failed statement committed its insert")
				}
			})

			t.Run("close", func(t *testing.T) {
				with(func(r *runner, c *pgxpool.Conn) {
					if err := r.send(uInsert1, key("close"), b.fp, "1", exp); err != nil {
						t.Fatal(err)
					}
					if err := r.flush(); err != nil {
						t.Fatal(err)
					}
					if _, err := r.exec(); err != nil {
						t.Fatal(err)
					}
					r.close()
					if !c.Conn().PgConn().IsClosed() {
						t.Fatal("a runner closed with its transaction open left the connection open")
					}
				})
				if hasRow("close") {
					t.Fatal("a runner closed with its transaction open committed its insert")
				}
			})

			// A connection that breaks mid-transaction is closed by pgconn,
			// whose closing goroutine then writes to it: the runner writes
			// nothing more (a write would race with it). pgx batches, in the
			// simple protocol, check the connection themselves.
			broken := func(t *testing.T) {
				with(func(r *runner, c *pgxpool.Conn) {
					if err := r.send(uInsert1, key("broken"), b.fp, "1", exp); err != nil {
						t.Fatal(err)
					}
					if err := r.flush(); err != nil {
						t.Fatal(err)
					}
					_ = c.Conn().PgConn().Conn().Close()
					if _, err := r.exec(); err == nil {
						t.Fatal("a read on a broken connection succeeded")
					}
					if err := r.sync(); !errors.Is(err, errConnClosed) {
						t.Fatalf("sync on a closed connection: %v, want errConnClosed", err)
					}
					if err := r.send(cRead1, key("broken"), b.fp); !errors.Is(err, errConnClosed) {
						t.Fatalf("send on a closed connection: %v, want errConnClosed", err)
					}
				})
				if hasRow("broken") {
					t.Fatal("a transaction on a broken connection committed its insert")
				}
			}
			if mode != "simple_protocol" {
				t.Run("broken", broken)
			}
		})
	}
}

// TestModes: in every mode of pgx the store counts, updates and reads, and
// only with the statement cache (cache_statement) does it leave prepared
// statements on its connection; with the others, neither it nor pgx
// prepares a named statement.
func TestModes(t *testing.T) {
	for _, mode := range allModes {
		t.Run(mode, func(t *testing.T) {
			pool := modePool(t, mode) // one connection: the store's and the check's
			h := newHandle(t, newStore(t, pool, Options{Secret: randomSecret()}), "modes")
			ctx := context.Background()
			caps := []store.Budget{{Limit: 3, Window: time.Minute}, {Limit: 3, Window: time.Minute}}
			for i := range 4 {
				tl, err := h.Count(ctx, []string{"one"}, caps[:1], 1)
				if err != nil || tl.Allowed != (i < 3) {
					t.Fatalf("count %d of one key: %+v, %v", i, tl, err)
				}
				if tl, err = h.Count(ctx, []string{"a", "b"}, caps, 1); err != nil || tl.Allowed != (i < 3) {
					t.Fatalf("count %d of two keys: %+v, %v", i, tl, err)
				}
				if err := h.Update(ctx, []string{"u"}, incr); err != nil {
					t.Fatal(err)
				}
				if err := h.Update(ctx, []string{"v", "w"}, incr); err != nil {
					t.Fatal(err)
				}
			}
			es, err := h.Read(ctx, []string{"u", "w"})
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				if string(e.Value) != "4" {
					t.Fatalf("entry %d after 4 updates: %q", i, e.Value)
				}
			}
			if es, err = h.Read(ctx, []string{"one"}); err != nil || string(es[0].Value) != "3" {
				t.Fatalf("the counted key: %q, %v", es, err)
			}
			var named []string
			rows, err := pool.Query(ctx, "SELECT name FROM pg_prepared_statements ORDER BY name", pgx.QueryExecModeSimpleProtocol)
			if err == nil {
				named, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			ours := 0
			for _, n := range named {
				if strings.HasPrefix(n, "gatecount_") {
					ours++
				}
			}
			if mode == "cache_statement" {
				if ours == 0 {
					t.Fatalf("no statement of the store prepared with the statement cache; prepared: %q", named)
				}
				return
			}
			if len(named) != 0 {
				t.Fatalf("prepared statements in mode %s: %q", mode, named)
			}
		})
	}
}

// TestPoolSettings: New refuses settings of the pool with which pgx could
// run no query, with an error matching ErrPoolSetting that names the
// setting, rather than failing at the first count.
func TestPoolSettings(t *testing.T) {
	newPool(t)
	for _, c := range []struct{ query, want string }{
		{"statement_cache_capacity=0", "statement_cache_capacity"},
		{"default_query_exec_mode=cache_describe&description_cache_capacity=0", "description_cache_capacity"},
	} {
		t.Run(c.want, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(testURL() + sep(testURL()) + c.query)
			if err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			_, err = New(context.Background(), pool, Options{Secret: testSecret})
			if !errors.Is(err, ErrPoolSetting) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want ErrPoolSetting naming %s", err, c.want)
			}
		})
	}
	// A mode pgx does not have.
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecMode(99)
	if _, err := execModeOf(cfg.ConnConfig); !errors.Is(err, ErrPoolSetting) || !strings.Contains(err.Error(), "default_query_exec_mode") {
		t.Fatalf("an unknown mode: %v, want ErrPoolSetting naming default_query_exec_mode", err)
	}
	for _, mode := range allModes {
		cfg, err := pgxpool.ParseConfig(testURL() + fmt.Sprintf("%sdefault_query_exec_mode=%s", sep(testURL()), mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := execModeOf(cfg.ConnConfig); err != nil {
			t.Errorf("mode %s: %v", mode, err)
		}
	}
}

// sep is what joins another parameter to url's query.
func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

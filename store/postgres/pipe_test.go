package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestPipe: statements sent before a Sync are one transaction, which a
// Flush leaves open and the Sync commits; after a statement fails, it and
// every later one return its error, the Sync rolls the transaction back
// and the connection is idle again; and a pipe closed before its Sync
// closes the connection, rolling the transaction back.
func TestPipe(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	prefix := randomPrefix("pipe")
	key := func(name string) []byte { return []byte(prefix + name) }
	hasRow := func(k []byte) bool {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM gatecount_entries WHERE keyhash = $1", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DELETE FROM gatecount_entries WHERE keyhash IN ($1, $2, $3)", key("commit"), key("fail"), key("close"))
	})
	// withPipe runs f on a pipe on a connection of its own, with three
	// statements: insert a key, divide by an int, read an int.
	withPipe := func(t *testing.T, f func(q *pipe, ins, div, read *preparedStmt, c *pgxpool.Conn)) {
		t.Helper()
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		pc := c.Conn().PgConn()
		// So that a pipe that waits for an answer that never comes fails
		// the test rather than hangs it.
		if err := pc.Conn().SetDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		defer pc.Conn().SetDeadline(time.Time{})
		prep := func(name, sql string) *preparedStmt {
			t.Helper()
			sd, err := pc.Prepare(ctx, name, sql, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := newPreparedStmt(sd, []int16{pgx.TextFormatCode})
			return &s
		}
		ins := prep("pipe_ins", `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
VALUES ($1, 'pipe', '1', now())`)
		div := prep("pipe_div", "SELECT 1 / $1::int")
		read := prep("pipe_read", "SELECT $1::int")
		defer func() {
			if !pc.IsClosed() {
				pc.Exec(ctx, "DEALLOCATE pipe_ins; DEALLOCATE pipe_div; DEALLOCATE pipe_read").Close()
			}
		}()
		f(newPipe(ctx, c.Conn()), ins, div, read, c)
	}

	t.Run("commit", func(t *testing.T) {
		withPipe(t, func(q *pipe, ins, div, read *preparedStmt, c *pgxpool.Conn) {
			defer q.close()
			if err := q.send(ins, key("commit")); err != nil {
				t.Fatal(err)
			}
			if err := q.flush(); err != nil {
				t.Fatal(err)
			}
			if tag, err := q.exec(); err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("insert: %v, %v", tag, err)
			}
			if err := q.send(read, 7); err != nil {
				t.Fatal(err)
			}
			if err := q.sync(); err != nil {
				t.Fatal(err)
			}
			var got int
			if err := q.row(&got); err != nil || got != 7 {
				t.Fatalf("read %d, %v; want 7", got, err)
			}
			if err := q.synced(); err != nil {
				t.Fatal(err)
			}
			if s := c.Conn().PgConn().TxStatus(); s != 'I' {
				t.Fatalf("transaction status %q after the Sync, want idle", s)
			}
		})
		if !hasRow(key("commit")) {
			t.Fatal("the insert before the Sync was not committed")
		}
	})

	t.Run("fail", func(t *testing.T) {
		withPipe(t, func(q *pipe, ins, div, read *preparedStmt, c *pgxpool.Conn) {
			defer q.close()
			for _, send := range []func() error{
				func() error { return q.send(ins, key("fail")) },
				func() error { return q.send(div, 0) },
				func() error { return q.send(read, 1) },
			} {
				if err := send(); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.sync(); err != nil {
				t.Fatal(err)
			}
			if _, err := q.exec(); err != nil {
				t.Fatalf("insert: %v", err)
			}
			var pgErr *pgconn.PgError
			if _, err := q.exec(); !errors.As(err, &pgErr) || pgErr.Code != "22012" {
				t.Fatalf("division by zero: %v, want SQLSTATE 22012", err)
			}
			var got int
			if err := q.row(&got); !errors.As(err, &pgErr) || pgErr.Code != "22012" {
				t.Fatalf("statement after the failed one: %v, want the same error", err)
			}
			if err := q.synced(); err != nil {
				t.Fatal(err)
			}
			if s := c.Conn().PgConn().TxStatus(); s != 'I' || c.Conn().PgConn().IsClosed() {
				t.Fatalf("after the Sync: transaction status %q, closed %v; want an idle connection", s, c.Conn().PgConn().IsClosed())
			}
			if err := c.Conn().PgConn().Ping(ctx); err != nil {
				t.Fatalf("the connection after a failed transaction: %v", err)
			}
		})
		if hasRow(key("fail")) {
			t.Fatal("a transaction with a failed statement committed its insert")
		}
	})

	t.Run("close", func(t *testing.T) {
		withPipe(t, func(q *pipe, ins, div, read *preparedStmt, c *pgxpool.Conn) {
			if err := q.send(ins, key("close")); err != nil {
				t.Fatal(err)
			}
			if err := q.flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := q.exec(); err != nil {
				t.Fatal(err)
			}
			q.close()
			if !c.Conn().PgConn().IsClosed() {
				t.Fatal("a pipe closed before its Sync left the connection open")
			}
		})
		if hasRow(key("close")) {
			t.Fatal("a pipe closed before its Sync committed its insert")
		}
	})
}

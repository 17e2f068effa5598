package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/gatecount/gatecount/store"
)

// statements are the writer's prepared statements. They are used only by
// the holder of the writer.
type statements struct {
	begin, commit, rollback *sql.Stmt
	upsert, del             *sql.Stmt
	count, purge, sweep     *sql.Stmt
	fastCount               *sql.Stmt
	sel                     [store.MaxKeys + 1]*sql.Stmt // sel[n] reads n rows, prepared when first needed
}

const (
	sqlUpsert = `INSERT INTO gatecount_limit_entries (name, secret, value, expires_at)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`

	sqlDelete = `DELETE FROM gatecount_limit_entries WHERE name = ?1`

	sqlCount = `SELECT COALESCE((SELECT n FROM gatecount_limit_counts WHERE secret = ?1), 0)`

	// sqlPurge removes a batch of one secret's expired rows.
	sqlPurge = `DELETE FROM gatecount_limit_entries WHERE name IN (
    SELECT name FROM gatecount_limit_entries WHERE expires_at <= ?1 AND secret = ?2 LIMIT ?3)`

	// sqlSweep removes a batch of expired rows of any secret.
	sqlSweep = `DELETE FROM gatecount_limit_entries WHERE name IN (
    SELECT name FROM gatecount_limit_entries WHERE expires_at <= ?1 LIMIT ?2)`

	// sqlFastCount counts n on one key in one statement when that is sure
	// to give what the generic Count gives, and returns the counter. It
	// returns no row, and changes nothing, when the key has a live value
	// that is not a plain count, or has no room. It does the same for a new
	// key when the store is at 80% of its bound, where a new key must be
	// logged or refused. The caller then counts the long way.
	//
	// ?1 name, ?2 secret, ?3 n, ?4 expiry of a new counter, ?5 the rows
	// below which a new key is admitted without a log, ?6 now, ?7 cap - n.
	sqlFastCount = `INSERT INTO gatecount_limit_entries (name, secret, value, expires_at)
SELECT ?1, ?2, ?3, ?4
WHERE COALESCE((SELECT n FROM gatecount_limit_counts WHERE secret = ?2), 0) < ?5
   OR EXISTS (SELECT 1 FROM gatecount_limit_entries WHERE name = ?1)
ON CONFLICT (name) DO UPDATE SET
    value = CASE WHEN expires_at <= ?6 THEN excluded.value ELSE CAST(value AS INTEGER) + excluded.value END,
    expires_at = CASE WHEN expires_at <= ?6 THEN excluded.expires_at ELSE expires_at END
WHERE secret = excluded.secret
  AND (expires_at <= ?6
       OR (CAST(CAST(value AS INTEGER) AS BLOB) = CAST(value AS BLOB)
           AND CAST(value AS INTEGER) BETWEEN 0 AND ?7))
RETURNING value, expires_at`
)

func (s *statements) prepare(ctx context.Context, conn *sql.Conn) error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.begin, "BEGIN IMMEDIATE"},
		{&s.commit, "COMMIT"},
		{&s.rollback, "ROLLBACK"},
		{&s.upsert, sqlUpsert},
		{&s.del, sqlDelete},
		{&s.count, sqlCount},
		{&s.purge, sqlPurge},
		{&s.sweep, sqlSweep},
		{&s.fastCount, sqlFastCount},
	} {
		st, err := conn.PrepareContext(ctx, p.sql)
		if err != nil {
			return err
		}
		*p.dst = st
	}
	return nil
}

// selectN returns the statement that reads n rows by name.
func (s *statements) selectN(ctx context.Context, conn *sql.Conn, n int) (*sql.Stmt, error) {
	if st := s.sel[n]; st != nil {
		return st, nil
	}
	q := `SELECT name, secret, CAST(value AS BLOB), expires_at FROM gatecount_limit_entries WHERE name IN (?` +
		strings.Repeat(", ?", n-1) + `)`
	st, err := conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.sel[n] = st
	return st, nil
}

func (s *statements) close() error {
	var first error
	all := []*sql.Stmt{s.begin, s.commit, s.rollback, s.upsert, s.del, s.count, s.purge, s.sweep, s.fastCount}
	all = append(all, s.sel[:]...)
	for _, st := range all {
		if st == nil {
			continue
		}
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

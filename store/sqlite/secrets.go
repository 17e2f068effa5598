package sqlite

import (
	"context"
	"fmt"
)

// sqlSecrets tells whether live rows of a secret exist, and names another
// secret with live rows; each stops at its first row.
const sqlSecrets = `SELECT
  EXISTS (SELECT 1 FROM gatecount_limit_entries WHERE secret = ?1 AND expires_at > ?2),
  coalesce((SELECT secret FROM gatecount_limit_entries WHERE secret <> ?1 AND expires_at > ?2 LIMIT 1), '')`

// Secrets reports whether the file holds live rows of the store's secret,
// and the fingerprint of one other secret with live rows, or ""
// (store.Secrets).
func (b *Backend) Secrets(ctx context.Context) (own bool, other string, err error) {
	err = b.db.QueryRowContext(ctx, sqlSecrets, b.fp, b.now().UnixMilli()).Scan(&own, &other)
	if err != nil {
		return false, "", fmt.Errorf("sqlite: reading the secrets of live rows: %w", err)
	}
	return own, other, nil
}

package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// sqlSecrets tells whether live rows of this secret exist, and names
// another secret with live rows; each stops at its first row.
const sqlSecrets = `SELECT
  EXISTS (SELECT 1 FROM gatecount_entries WHERE fingerprint = $1 AND expires_at > now()),
  coalesce((SELECT fingerprint FROM gatecount_entries WHERE fingerprint <> $1 AND expires_at > now() LIMIT 1), '')`

// Secrets reports whether the table holds live rows of the store's secret,
// and the fingerprint of one other secret with live rows, or ""
// (store.Secrets). It runs in the simple protocol, so through any pooler.
func (b *Backend) Secrets(ctx context.Context) (own bool, other string, err error) {
	err = b.pool.QueryRow(ctx, sqlSecrets, pgx.QueryExecModeSimpleProtocol, b.fp).Scan(&own, &other)
	if err != nil {
		return false, "", fmt.Errorf("postgres: reading the secrets of live rows: %w", err)
	}
	return own, other, nil
}

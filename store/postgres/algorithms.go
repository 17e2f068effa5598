package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gatecount/gatecount/store"
)

// sqlCountAlgorithms counts budgets of any algorithm in one statement: the
// function gatecount_count_algorithms (migration 3).
const sqlCountAlgorithms = `SELECT now_ms, allowed, limiting, counts, expires_ms, added, bad, is_full, live
  FROM gatecount_count_algorithms($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// CountsAlgorithms implements store.AlgorithmCounter: a Count with a
// budget other than a fixed window is one call of the function
// gatecount_count_algorithms.
func (b *Backend) CountsAlgorithms() {}

// countAlgorithms is Count of budgets not all fixed windows, in one round
// trip; it answers as the fixed-window count through gatecount_count does.
func (b *Backend) countAlgorithms(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	hashes := make([][]byte, len(keys))
	algs := make([]int32, len(keys))
	capacities := make([]int64, len(keys))
	windows := make([]int64, len(keys))
	intervals := make([]int64, len(keys))
	for i, k := range keys {
		h := b.hasher.Sum(prefix, k)
		hashes[i] = h[:]
		c := caps[i]
		algs[i], capacities[i] = int32(c.Algorithm), c.Capacity()
		windows[i], intervals[i] = c.Window.Milliseconds(), c.Interval().Microseconds()
	}
	exact := b.near(len(keys))
	var (
		nowMs, live          int64
		allowed, full        bool
		limiting, added, bad int32
		counts, expires      []int64
	)
	found := false
	err := b.runOne(ctx, cCountAlgorithms, func(r *runner, fields []pgconn.FieldDescription, vals [][]byte) error {
		found = true
		return r.scan(fields, vals, &nowMs, &allowed, &limiting, &counts, &expires, &added, &bad, &full, &live)
	}, hashes, b.fp, algs, capacities, windows, intervals, n, int64(b.bound.Max()), exact, b.boundLock, !b.syncCommit)
	if err == nil && !found {
		err = pgx.ErrNoRows
	}
	if err != nil {
		return fmt.Errorf("postgres: count: %w", err)
	}
	if bad >= 0 {
		return fmt.Errorf("postgres: count: key %d: %w", bad, store.ErrNotCounter)
	}
	if live >= 0 {
		b.estimate.Store(live)
		b.countedAt.Store(b.processNow().UnixNano())
	}
	if full {
		return b.bound.Admit(int(live)+len(keys)-1, prefix)
	}
	if live >= 0 && added > 0 {
		_ = b.bound.Admit(int(live)+int(added)-1, prefix) // logs when filling
	}
	if added > 0 {
		b.addEstimate(int64(added))
	}
	*t = store.Tally{Allowed: allowed, Now: time.UnixMilli(nowMs), Limiting: int(limiting)}
	for i := range keys {
		t.Counts[i] = counts[i]
		if expires[i] != 0 {
			t.ExpiresAt[i] = time.UnixMilli(expires[i])
		}
	}
	return nil
}

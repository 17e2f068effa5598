package postgres

import (
	"context"

	"github.com/gatecount/gatecount/store"
)

// sqlCountAlgorithms counts budgets of any algorithm in one statement: the
// function gatecount_count_algorithms (migration 3).
const sqlCountAlgorithms = `SELECT now_ms, allowed, limiting, counts, expires_ms, added, bad, is_full, live
  FROM gatecount_count_algorithms($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// CountsAlgorithms implements [store.AlgorithmCounter]: a Count with a
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
	exact := !b.hold(len(keys))
	if !exact {
		defer b.release(len(keys))
	}
	return b.countBy(ctx, cCountAlgorithms, prefix, keys, t, hashes, b.fp, algs, capacities, windows, intervals, n, int64(b.bound.Max()), exact, b.boundLock, !b.syncCommit)
}

package redis

import (
	"cmp"
	"context"
	"fmt"

	"github.com/gatecount/gatecount/store"
)

// Sweep implements [store.Backend]. Redis removes expired entries by itself.
// Sweep removes the expired members of every live index under the secret,
// and recounts the live entries under each tag (which the bound uses). It
// returns how many expired entries it removed from the indexes.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	b.spaces.Range(func(_, v any) bool {
		b.register(ctx, v.(*space))
		return true
	})
	tags, err := b.c.SMembers(ctx, b.tags).Result()
	if err != nil {
		return 0, err
	}
	removed := 0
	var first error // the tags on other nodes of a Cluster are swept still
	for _, tag := range tags {
		if len(tag) != 16 {
			continue
		}
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		res, err := b.eval(ctx, tidyScript, []string{b.indexOf(tag)}).Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("redis: tidy answered %v", res)
		}
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		removed += int(res[0])
		b.setLive(b.liveOf(tag), res[1])
	}
	return removed, first
}

// sweepFull is what Update and Count do when a new key seems to find the
// bound reached. They sweep, which recounts the live entries under every
// tag, and try once more. A sweep that fails (a Cluster node down, say)
// leaves the tags it could not count at their last counts, as between two
// sweeps. The second try is decided on those, and a Redis that does not
// answer fails that try.
func (b *Backend) sweepFull(ctx context.Context) { _, _ = b.Sweep(ctx) }

// sweepTick is the background sweep's work, every SweepInterval: a sweep
// and a recheck of the servers, within the guard's deadline. Close ends it.
func (b *Backend) sweepTick(loop context.Context) {
	ctx, cancel := context.WithTimeout(loop, b.deadline)
	defer cancel()
	if _, err := b.Sweep(ctx); err != nil && loop.Err() == nil {
		b.sweepLog.Do(func() {
			b.log.Warn("limit store sweep failed: the count of live entries may be stale",
				"kind", store.KindSweepFailed, "err", err)
		})
	}
	b.recheckServers(ctx)
}

package redis

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gatecount/gatecount/store/storekit"
)

// Sweep implements [store.Backend]. Redis removes expired entries by itself.
// Sweep removes the expired entries from every live index under the
// secret, and recounts the live entries under each tag (which the bound uses). It
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
	var (
		mu      sync.Mutex
		removed int
		first   error // the tags on other nodes of a Cluster are swept still
		wg      sync.WaitGroup
		next    = make(chan string)
	)
	workers := 1
	if b.cluster {
		workers = sweepers
	}
	for range min(workers, len(tags)) {
		wg.Go(func() {
			for tag := range next {
				n, err := b.tidy(ctx, tag)
				mu.Lock()
				removed += n
				if err != nil {
					first = cmp.Or(first, err)
				}
				mu.Unlock()
			}
		})
	}
	for _, tag := range tags {
		if !validTag(tag) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		next <- tag
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return removed, ctx.Err()
	}
	return removed, first
}

// sweepers is how many tags a sweep of a Cluster tidies at once: a spread
// handle has a tag per shard, each a round trip. A single server's has the
// tags of its handles only, tidied one at a time.
const sweepers = 8

// tidy runs tidyScript on tag's live index until the index earlier
// versions kept is empty, records the live entries it counts, and returns
// how many expired entries it removed.
func (b *Backend) tidy(ctx context.Context, tag string) (removed int, err error) {
	idx := b.indexOf(tag)
	for {
		res, err := b.eval(ctx, tidyScript, idx[:]).Int64Slice()
		if err == nil && len(res) != 3 {
			err = fmt.Errorf("redis: tidy answered %v", res)
		}
		if err != nil {
			return removed, err
		}
		removed += int(res[0])
		b.setLive(b.liveOf(tag), res[1]+res[2])
		if res[2] == 0 || ctx.Err() != nil {
			return removed, ctx.Err()
		}
	}
}

// fullSweepGap is the least time between two sweeps that new keys finding
// the bound reached start.
const fullSweepGap = time.Second

// sweepFull is what Update and Count do when a new key seems to find the
// bound reached. They sweep, which recounts the live entries under every
// tag, and try once more if it reports true. A sweep that fails (a Cluster
// node down, say) leaves the tags it could not count at their last counts,
// as between two sweeps. The second try is decided on those, and a Redis
// that does not answer fails that try.
//
// A flood of new keys on a full store would sweep once a key. So a sweep
// starts only if none started within fullSweepGap; otherwise sweepFull
// reports false, and the key is refused on the counts as they are. The
// script tidies its own tag before it answers full, so those counts are
// stale only for the other tags, and for at most fullSweepGap.
func (b *Backend) sweepFull(ctx context.Context) bool {
	now, last := time.Now().UnixNano(), b.fullSwept.Load()
	if last != 0 && now-last < int64(fullSweepGap) || !b.fullSwept.CompareAndSwap(last, now) {
		return false
	}
	_, _ = b.Sweep(ctx)
	return true
}

// sweepTick is the background sweep's work, every SweepInterval: a sweep
// and a recheck of the servers, within the guard's deadline. Close ends it.
func (b *Backend) sweepTick(loop context.Context) {
	ctx, cancel := context.WithTimeout(loop, b.deadline)
	defer cancel()
	if _, err := b.Sweep(ctx); err != nil && loop.Err() == nil {
		b.sweepLog.Do(func() {
			b.log.Warn("limit store sweep failed: the count of live entries may be stale",
				"kind", storekit.KindSweepFailed, "err", err)
		})
	}
	b.recheckServers(ctx)
}

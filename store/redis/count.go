package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/gatecount/gatecount/store"
)

// maxExact is the largest cap or amount countScript takes: Lua counts in
// float64, exact to 2^53.
const maxExact = 1 << 52

// Count implements store.Counter: one script, one round trip.
func (b *Backend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) (err error) {
	defer poolWait(&err)
	if n > maxExact {
		return b.countByUpdate(ctx, prefix, keys, caps, n, t)
	}
	for _, c := range caps {
		if int64(c.Limit) > maxExact {
			return b.countByUpdate(ctx, prefix, keys, caps, n, t)
		}
	}
	for _, c := range caps {
		if c.Algorithm != store.FixedWindow {
			return b.countAlgorithms(ctx, prefix, keys, caps, n, t)
		}
	}
	sp := b.space(prefix)
	ks := b.keys(sp, prefix, keys)
	args := countArgs(n, b.max, ks.members, caps)
	for swept := false; ; {
		others := b.elsewhere(sp)
		args[countElsewhere] = others
		res, err := b.eval(ctx, countScript, ks.names, args...).Int64Slice()
		if err != nil {
			return err
		}
		switch {
		case len(res) == 1 && res[0] == -1:
			return b.countByUpdate(ctx, prefix, keys, caps, n, t)
		case len(res) == 3 && res[0] == -2:
			b.setLive(sp.live, res[2])
			if swept {
				return b.refuse(prefix, res[2]+b.elsewhere(sp))
			}
			b.sweepFull(ctx)
			swept = true
			continue
		case len(res) != 4+2*len(keys):
			return fmt.Errorf("redis: count answered %v", res)
		}
		*t = store.Tally{Allowed: res[0] == 1, Now: time.UnixMilli(res[1]), Limiting: int(res[2]) - 1}
		for i := range keys {
			t.Counts[i] = res[4+2*i]
			if e := res[5+2*i]; e > 0 {
				t.ExpiresAt[i] = time.UnixMilli(e)
			}
		}
		b.clock.observe(res[1])
		if t.Allowed {
			b.counted(ctx, sp, prefix, res[3], others)
		}
		return nil
	}
}

// countByUpdate is the generic Count, through Update, for what countScript
// cannot count exactly.
func (b *Backend) countByUpdate(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	return b.Update(ctx, prefix, keys, func(now time.Time, es []store.Entry) error {
		return store.ApplyCount(now, es, caps, n, t)
	})
}

package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gatecount/gatecount/store"
)

// maxExact is the largest cap or amount countScript takes: Lua counts in
// float64, exact to 2^53.
const maxExact = 1 << 52

// Count implements [store.Counter]: one script, one round trip; countScript
// for fixed windows alone, algoScript for any other algorithm among caps.
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
	sp := b.space(prefix)
	c := countCalls.Get().(*countCall)
	defer c.done()
	sp, err = b.nameKeys(&c.ks, sp, prefix, keys)
	if err != nil {
		return err
	}
	s, cmd := countScript, c.setArgs(n, caps)
	if !fixedOnly(caps) {
		s, cmd = algoScript, c.setAlgoArgs(n, caps)
	}
	for swept := false; ; {
		c.setOthers(b, b.elsewhere(sp))
		res, err := b.evalInts(ctx, s, cmd)
		if err != nil {
			return err
		}
		switch {
		case len(res) == 1 && res[0] == -1:
			return b.countByUpdate(ctx, prefix, keys, caps, n, t)
		case len(res) == 3 && res[0] == -2:
			b.setLive(sp.live, res[2])
			if swept || !b.sweepFull(ctx) {
				return b.refuse(prefix, res[2]+b.elsewhere(sp))
			}
			swept = true
			continue
		case len(res) != 3+2*len(keys) || res[0] < 0:
			return fmt.Errorf("redis: count answered %v", res)
		}
		*t = store.Tally{Allowed: res[1] == 0, Now: time.UnixMilli(res[0]), Limiting: int(res[1]) - 1}
		for i := range keys {
			t.Counts[i] = res[3+2*i]
			if e := res[4+2*i]; e > 0 {
				t.ExpiresAt[i] = time.UnixMilli(e)
			}
		}
		b.clock.observe(res[0])
		if t.Allowed {
			b.counted(ctx, sp, prefix, res[2], c.others)
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

// countCall is the scratch of one Count: its keys and the script's command.
// The command's arguments point into it rather than hold copies: a string
// or a large number put in an interface would be an allocation of its own.
// Counts take them from countCalls, so that a Count allocates none.
type countCall struct {
	ks     keySet
	cmd    [3 + store.MaxCountKeys + indexKeys + max(countHead, algoHead) + max(countPer, algoPer)*store.MaxCountKeys]any
	n      int64                     // the amount
	others int64                     // live entries under other tags
	room   int64                     // the backend's max entries less others
	limits [store.MaxCountKeys]int64 // caps, or capacities for algoScript
	spans  [store.MaxCountKeys]int64 // each key's span: its window in ms, or a token bucket's interval in µs
	algs   [store.MaxCountKeys]int64 // algoScript's algorithms
}

// fixedOnly reports whether every budget of caps is a fixed window.
func fixedOnly(caps []store.Budget) bool {
	for _, c := range caps {
		if c.Algorithm != store.FixedWindow {
			return false
		}
	}
	return true
}

var countCalls = sync.Pool{New: func() any { return new(countCall) }}

// done clears c and gives it back to countCalls.
func (c *countCall) done() {
	*c = countCall{}
	countCalls.Put(c)
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Count implements [store.Counter] and [store.AlgorithmCounter]:
// [store.Handle.Count] with the result the generic Count gives, whatever each
// budget's algorithm. Alone on the writer, a count of one key is one UPSERT
// in a transaction of its own, in the common case: the key new, expired, or
// live with room. A write statement outside BEGIN takes the file's write
// lock when it starts, as BEGIN IMMEDIATE does. Otherwise it runs in the
// writer's BEGIN IMMEDIATE transaction, shared with the calls that waited
// with it.
func (b *Backend) Count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	// The writer fills its own Tally: it may still run once ctx is done
	// and Count has returned.
	wt := new(store.Tally)
	*wt = *t
	var solo func(context.Context) (bool, error)
	if len(keys) == 1 && n <= int64(caps[0].Limit) && caps[0].Algorithm == store.FixedWindow {
		solo = func(ctx context.Context) (bool, error) {
			return b.countOne(ctx, prefix, keys[0], caps[0], n, wt)
		}
	}
	answered, err := b.do(ctx, func(tctx context.Context) error {
		if solo != nil {
			if done, err := b.countOne(tctx, prefix, keys[0], caps[0], n, wt); done || err != nil {
				return err
			}
		}
		return b.count(tctx, prefix, keys, caps, n, wt)
	}, solo)
	if answered {
		*t = *wt
	}
	return err
}

// CountsAlgorithms implements [store.AlgorithmCounter]: Count runs
// [store.ApplyCount], the rule of every algorithm, in its own transaction;
// only a fixed window's one-key Count has a statement of its own.
func (b *Backend) CountsAlgorithms() {}

// countOne counts n on key in one statement, and reports whether it did.
func (b *Backend) countOne(ctx context.Context, prefix, key string, c store.Budget, n int64, t *store.Tally) (bool, error) {
	nowMs := b.now().UnixMilli()
	now := time.UnixMilli(nowMs)
	name := b.nameOf(prefix, key)
	expMs := now.Add(c.Window).Truncate(time.Millisecond).UnixMilli()
	warnAt := b.bound.Max() - b.bound.Max()/5
	var v, exp int64
	err := b.st.fastCount.QueryRowContext(ctx, name[:], b.fp, n, expMs, warnAt-1, nowMs, int64(c.Limit)-n).Scan(&v, &exp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, b.failed("count", ctx, err)
	}
	*t = store.Tally{Allowed: true, Now: now, Limiting: -1}
	t.Counts[0] = v
	t.ExpiresAt[0] = time.UnixMilli(exp)
	return true, nil
}

func (b *Backend) count(ctx context.Context, prefix string, keys []string, caps []store.Budget, n int64, t *store.Tally) error {
	nowMs := b.now().UnixMilli()
	names, rows, entries, err := b.read(ctx, prefix, keys, nowMs)
	if err != nil {
		return err
	}
	if err := store.ApplyCount(time.UnixMilli(nowMs), entries, caps, n, t); err != nil || !t.Allowed {
		return err
	}
	// As in the generic Count, the Tally says what would have been counted
	// even when the write fails (a full store): callers look at the error
	// first.
	return b.write(ctx, prefix, names, rows, entries, nowMs)
}

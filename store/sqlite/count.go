package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Count implements store.Counter: store.Handle.Count in one BEGIN IMMEDIATE
// transaction on the writer, with the result the generic Count gives. A
// count of one key is one UPSERT in the common case (the key new, expired,
// or live with room); the rest is done as the generic Count does it.
func (b *Backend) Count(ctx context.Context, prefix string, keys []string, caps []store.Cap, n int64, t *store.Tally) error {
	if err := b.acquire(ctx); err != nil {
		return err
	}
	defer b.release()
	if err := b.begin(ctx); err != nil {
		return err
	}
	tctx := context.WithoutCancel(ctx)
	err := b.count(tctx, prefix, keys, caps, n, t)
	if err != nil {
		b.rollback(tctx)
		return err
	}
	return b.commit(tctx)
}

func (b *Backend) count(ctx context.Context, prefix string, keys []string, caps []store.Cap, n int64, t *store.Tally) error {
	nowMs := b.now().UnixMilli()
	now := time.UnixMilli(nowMs)
	if len(keys) == 1 && n <= caps[0].Max {
		name := b.nameOf(prefix, keys[0])
		expMs := now.Add(caps[0].Window).Truncate(time.Millisecond).UnixMilli()
		warnAt := b.bound.Max() - b.bound.Max()/5
		var v, exp int64
		err := b.st.fastCount.QueryRowContext(ctx, name[:], b.fp, n, expMs, warnAt-1, nowMs, caps[0].Max-n).Scan(&v, &exp)
		switch {
		case err == nil:
			*t = store.Tally{Allowed: true, Now: now, Limiting: -1}
			t.Counts[0] = v
			t.ExpiresAt[0] = time.UnixMilli(exp)
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("sqlite: count: %w", err)
		}
		// Nothing was written: count the long way, in the same transaction.
	}
	names := make([][32]byte, len(keys))
	for i, k := range keys {
		names[i] = b.nameOf(prefix, k)
	}
	rows := make([]row, len(keys))
	if err := b.readRows(ctx, names, rows, nowMs); err != nil {
		return fmt.Errorf("sqlite: read: %w", err)
	}
	*t = store.Tally{Now: now, Limiting: -1}
	for i := range rows {
		var v int64
		if e := rows[i].entry; e.Live() {
			var err error
			if v, err = store.ParseCount(e.Value); err != nil {
				return err
			}
			t.ExpiresAt[i] = e.ExpiresAt
		}
		t.Counts[i] = v
		if t.Limiting < 0 && v > caps[i].Max-n {
			t.Limiting = i
		}
	}
	if t.Limiting >= 0 {
		return nil
	}
	entries := make([]store.Entry, len(keys))
	for i := range rows {
		t.Counts[i] += n
		e := rows[i].entry
		if !e.Live() {
			e.ExpiresAt = now.Add(caps[i].Window).Truncate(time.Millisecond)
			t.ExpiresAt[i] = e.ExpiresAt
		}
		e.Value = store.AppendCount(e.Value[:0], t.Counts[i])
		entries[i] = e
	}
	// As in the generic Count, the Tally says what would have been counted
	// even when the write fails (a full store): callers look at the error
	// first.
	t.Allowed = true
	return b.write(ctx, prefix, names, rows, entries, nowMs)
}

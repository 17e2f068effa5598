package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/internal/turns"
	"github.com/gatecount/gatecount/store"
)

// Update implements store.Backend in one transaction of its own, on a
// connection of the pool, in two round trips. See the package
// documentation.
func (b *Backend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	hashes := make([][]byte, len(keys))
	var queues lockorder.Set
	for i, k := range keys {
		h := b.hasher.Sum(prefix, k)
		hashes[i] = h[:]
		queues.Add(turns.Queue(binary.BigEndian.Uint64(h[:8])))
	}
	// Updates of a key from this instance take turns in the process, first
	// come first served, before they take a connection. The database
	// serialises them anyway, by the key's row lock; but waiters on a row
	// lock each hold a pool connection while they wait, and when the row is
	// released they race for its next version, so that an unlucky call can
	// lose many times in a row. Waiting here holds no connection and hands
	// the key to the next call in order. Calls from other instances, and
	// Counts, still meet at the row.
	if err := b.turns.Take(ctx, &queues); err != nil {
		return fmt.Errorf("postgres: update: wait for the keys' turn: %w", err)
	}
	defer b.turns.Give(&queues)
	// The first try is optimistic: it locks the rows the keys have, and a
	// key without one is inserted at the end. It gives up, having written
	// nothing, when another transaction inserted that key first, or when
	// it would insert a key while it holds other rows (which could
	// deadlock with a transaction that holds the new key and waits for
	// them). The second try locks a placeholder row for every key without
	// one, in keyhash order, and cannot fail so.
	retry, err := b.update(ctx, prefix, hashes, apply, false)
	if retry {
		if retry, err = b.update(ctx, prefix, hashes, apply, true); retry {
			// Every key has a row once placeholders are in: unreachable.
			err = errors.New("postgres: update: a key without a row after locking")
		}
	}
	return err
}

// update is one try of Update. Without placeholders it reports true, having
// written nothing, when it must try again with them.
func (b *Backend) update(ctx context.Context, prefix string, hashes [][]byte, apply store.ApplyFunc, placeholders bool) (retry bool, err error) {
	conn, q, err := b.acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: update: %w", err)
	}
	defer func() { err = release(conn, err) }()
	// close, before release, reads what is left up to the end of the
	// transaction; a runner closed with its transaction open closes the
	// connection, which rolls the transaction back, and which the pool
	// then drops: a failure never hands an open transaction to the pool.
	defer q.close()

	// Round trip 1: lock the keys' rows in ascending order (with
	// placeholders for keys without one, when asked), read them and the
	// clock.
	n := len(hashes)
	entries := make([]store.Entry, n)
	hasRow := make([]bool, n)
	placeholder := make([]bool, n)
	var now time.Time
	err = func() error {
		if placeholders {
			if err := q.send(uLock, hashes, b.fp); err != nil {
				return err
			}
		}
		var err error
		switch {
		case n == 1 && b.syncCommit:
			err = q.send(uLockRead1, hashes[0])
		case n == 1:
			err = q.send(uLockRead1Async, hashes[0])
		case b.syncCommit:
			err = q.send(uLockRead, hashes)
		default:
			err = q.send(uLockReadAsync, hashes)
		}
		if err != nil {
			return err
		}
		if err := q.flush(); err != nil {
			return err
		}
		if placeholders {
			var kh []byte
			if _, err := q.rows(func(fields []pgconn.FieldDescription, vals [][]byte) error {
				if err := q.scan(fields, vals, &kh); err != nil {
					return err
				}
				if i := slices.IndexFunc(hashes, func(h []byte) bool { return bytes.Equal(h, kh) }); i >= 0 {
					placeholder[i] = true
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if n == 1 {
			return b.readLocked1(q, &now, &entries[0], &hasRow[0])
		}
		var (
			khs, vals [][]byte
			fps       []string
			exps      []time.Time
			dest      = []any{&now, &khs, &fps, &vals, &exps}
		)
		if !b.syncCommit {
			dest = slices.Insert(dest, 1, nil) // set_config's result
		}
		if err := q.row(dest...); err != nil {
			return err
		}
		for j, kh := range khs {
			i := slices.IndexFunc(hashes, func(h []byte) bool { return bytes.Equal(h, kh) })
			if i < 0 {
				continue
			}
			hasRow[i] = true
			if fps[j] == b.fp && exps[j].After(now) {
				entries[i] = store.Entry{Value: vals[j], ExpiresAt: time.UnixMilli(exps[j].UnixMilli())}
			}
		}
		now = time.UnixMilli(now.UnixMilli())
		return nil
	}()
	if err != nil {
		// Sync ends the failed transaction, which rolls back; Close then
		// reads up to it.
		_ = q.sync()
		return false, fmt.Errorf("postgres: update: lock and read: %w", err)
	}
	before := make([]store.Entry, n)
	for i, e := range entries {
		before[i] = store.Entry{Value: bytes.Clone(e.Value), ExpiresAt: e.ExpiresAt}
	}

	if err := apply(now, entries); err != nil {
		// Nothing is written but the placeholders this try inserted: they
		// are deleted, and the transaction commits having changed nothing
		// (or, should the delete fail, rolls back, which removes them
		// too). Close reads up to the Sync.
		var mine []int
		for i, p := range placeholder {
			if p {
				mine = append(mine, i)
			}
		}
		if len(mine) == 0 || q.sendDelete(hashes, mine) == nil {
			_ = q.sync()
		}
		return false, err
	}

	// Round trip 2: write what changed (rows this transaction holds are
	// updated, keys without one inserted), remove rows left empty, commit.
	// up, ins and del hold indexes of keys.
	var up, ins, del []int
	added, removed := 0, 0
	for i, e := range entries {
		old := before[i]
		switch {
		case e.Value == nil && old.Value == nil:
			if placeholder[i] {
				del = append(del, i)
			}
		case e.Value == nil:
			del = append(del, i)
			removed++
		case old.Value != nil && bytes.Equal(e.Value, old.Value) && e.ExpiresAt.Equal(old.ExpiresAt):
		default:
			if old.Value == nil {
				added++
			}
			if hasRow[i] {
				up = append(up, i)
			} else {
				ins = append(ins, i)
			}
		}
	}
	if len(ins) > 0 && (len(ins) > 1 || slices.Contains(hasRow, true)) {
		// Nothing is written yet (a try with placeholders has a row for
		// every key): the transaction commits empty.
		if err := q.end(); err != nil {
			return false, fmt.Errorf("postgres: update: end the optimistic try: %w", err)
		}
		return true, nil
	}
	exact := added > 0 && b.near(added)
	err = func() error {
		if exact {
			if err := q.send(uAdmit, b.fp, int32(added), int64(b.bound.Max()), now, b.boundLock); err != nil {
				return err
			}
		}
		if err := q.sendWrite(uWrite1, uWrite, hashes, entries, up, b.fp); err != nil {
			return err
		}
		if err := q.sendWrite(uInsert1, uInsert, hashes, entries, ins, b.fp); err != nil {
			return err
		}
		if err := q.sendDelete(hashes, del); err != nil {
			return err
		}
		return q.sync()
	}()
	var live int64 = -1
	if err == nil {
		err = func() error {
			if exact {
				if err := q.row(&live); err != nil {
					return err
				}
			}
			if len(up) > 0 {
				if _, err := q.exec(); err != nil {
					return err
				}
			}
			if len(ins) > 0 {
				tag, err := q.exec()
				if err != nil {
					return err
				}
				// Only a lone key is inserted optimistically, with nothing
				// else written: if another transaction inserted it first,
				// this one commits empty and the update starts again.
				retry = tag.RowsAffected() < int64(len(ins))
			}
			if len(del) > 0 {
				if _, err := q.exec(); err != nil {
					return err
				}
			}
			return q.synced()
		}()
	}
	if err == nil && retry {
		return true, nil
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == errFullCode {
			var n int
			fmt.Sscan(pgErr.Detail, &n)
			b.estimate.Store(int64(n))
			b.countedAt.Store(b.processNow().UnixNano())
			return false, b.bound.Admit(n+added-1, prefix)
		}
		return false, fmt.Errorf("postgres: update: write and commit: %w", err)
	}
	if exact {
		_ = b.bound.Admit(int(live)+added-1, prefix) // logs when filling
		b.estimate.Store(live + int64(added))
		b.countedAt.Store(b.processNow().UnixNano())
	} else if d := added - removed; d != 0 {
		b.addEstimate(int64(d))
	}
	return false, nil
}

// readLocked1 reads the result of uLockRead1 or uLockRead1Async: the clock,
// then the key's row if it has one, live for this secret or not.
func (b *Backend) readLocked1(q *runner, now *time.Time, e *store.Entry, hasRow *bool) error {
	return q.first(func(fields []pgconn.FieldDescription, vals [][]byte) error {
		var fp *string
		var val []byte
		var exp *time.Time
		if err := q.scan(fields[:4], vals[:4], now, &fp, &val, &exp); err != nil {
			return err
		}
		*now = time.UnixMilli(now.UnixMilli())
		if fp == nil {
			return nil
		}
		*hasRow = true
		if *fp == b.fp && exp != nil && exp.After(*now) {
			*e = store.Entry{Value: val, ExpiresAt: time.UnixMilli(exp.UnixMilli())}
		}
		return nil
	})
}

// sendWrite sends the write of the keys at indexes idx of hashes, whose
// entries are to be written: by the single-key statement one when there is
// one key, by the array statement many when there are several, by none
// when there are none.
func (q *runner) sendWrite(one, many int, hashes [][]byte, entries []store.Entry, idx []int, fp string) error {
	switch len(idx) {
	case 0:
		return nil
	case 1:
		i := idx[0]
		return q.send(one, hashes[i], fp, string(entries[i].Value), entries[i].ExpiresAt)
	}
	keys := make([][]byte, len(idx))
	vals := make([]string, len(idx))
	exps := make([]time.Time, len(idx))
	for j, i := range idx {
		keys[j], vals[j], exps[j] = hashes[i], string(entries[i].Value), entries[i].ExpiresAt
	}
	return q.send(many, keys, fp, vals, exps)
}

// sendDelete sends the delete of the rows of the keys at indexes idx of
// hashes, if any.
func (q *runner) sendDelete(hashes [][]byte, idx []int) error {
	switch len(idx) {
	case 0:
		return nil
	case 1:
		return q.send(uDelete1, hashes[idx[0]])
	}
	keys := make([][]byte, len(idx))
	for j, i := range idx {
		keys[j] = hashes[i]
	}
	return q.send(uDelete, keys)
}

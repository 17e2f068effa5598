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
	"github.com/gatecount/gatecount/store/storekit"
)

// Update implements [store.Backend] in one transaction of its own, on a
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
		return storekit.WaitedOut("the keys' turn", err)
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
	defer func() { err = release(conn, q.overrun(err)) }()
	// close, before release, reads what is left up to the end of the
	// transaction; a runner closed with its transaction open closes the
	// connection, which rolls the transaction back, and which the pool
	// then drops: a failure never hands an open transaction to the pool.
	defer q.close()

	t := newUpdateTry(hashes)
	if err := b.lockRead(q, t, placeholders); err != nil {
		// Sync ends the failed transaction, which rolls back; Close then
		// reads up to it.
		_ = q.sync()
		return false, fmt.Errorf("postgres: update: lock and read: %w", err)
	}
	for i, e := range t.entries {
		t.before[i] = store.Entry{Value: bytes.Clone(e.Value), ExpiresAt: e.ExpiresAt}
	}
	if err := apply(t.now, t.entries); err != nil {
		t.abandon(q)
		return false, err
	}
	w := t.plan()
	if len(w.ins) > 0 && (len(w.ins) > 1 || slices.Contains(t.hasRow, true)) {
		// Nothing is written yet (a try with placeholders has a row for
		// every key): the transaction commits empty.
		if err := q.end(); err != nil {
			return false, fmt.Errorf("postgres: update: end the optimistic try: %w", err)
		}
		return true, nil
	}
	exact := w.added > 0 && !b.hold(w.added)
	if w.added > 0 && !exact {
		defer b.release(w.added)
	}
	if exact {
		if live, full := b.knownFull(w.added); full {
			// Refused as the bound's lock would refuse it, without taking it.
			t.abandon(q)
			return false, b.bound.Admit(int(live)+w.added-1, prefix)
		}
	}
	live, retry, err := b.write(q, t, w, exact)
	if err == nil && retry {
		return true, nil
	}
	if err == nil {
		for _, is := range [][]int{w.ins, w.up} {
			for _, i := range is {
				if e := t.entries[i].ExpiresAt; !e.IsZero() {
					b.wroteExpiry(e.UnixMilli())
				}
			}
		}
	}
	return false, b.wrote(prefix, w, live, err)
}

// updateTry is what one try of Update knows of its keys. It holds the
// entries apply sees and copies of them as read. It holds which keys have a
// row, which rows are placeholders this try inserted, and the database's
// time. The arrays hold a lone key, the common case, so that it takes one
// allocation.
type updateTry struct {
	hashes      [][]byte
	entries     []store.Entry
	before      []store.Entry
	hasRow      []bool
	placeholder []bool
	now         time.Time

	entries1 [2]store.Entry
	flags1   [2]bool
}

func newUpdateTry(hashes [][]byte) *updateTry {
	n := len(hashes)
	t := &updateTry{hashes: hashes}
	entries, flags := t.entries1[:], t.flags1[:]
	if n > 1 {
		entries, flags = make([]store.Entry, 2*n), make([]bool, 2*n)
	}
	t.entries, t.before = entries[:n:n], entries[n:2*n:2*n]
	t.hasRow, t.placeholder = flags[:n:n], flags[n:2*n:2*n]
	return t
}

// index returns the index of the key whose keyhash is kh, or -1.
func (t *updateTry) index(kh []byte) int {
	return slices.IndexFunc(t.hashes, func(h []byte) bool { return bytes.Equal(h, kh) })
}

// lockRead is round trip 1: it locks the keys' rows in ascending order
// (with placeholders for keys without one, when asked), reads them and the
// clock into t.
func (b *Backend) lockRead(q *runner, t *updateTry, placeholders bool) error {
	hashes, n := t.hashes, len(t.hashes)
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
			if i := t.index(kh); i >= 0 {
				t.placeholder[i] = true
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if n == 1 {
		return b.readLocked1(q, &t.now, &t.entries[0], &t.hasRow[0])
	}
	var (
		khs, vals [][]byte
		fps       []string
		exps      []time.Time
		dest      = []any{&t.now, &khs, &fps, &vals, &exps}
	)
	if !b.syncCommit {
		dest = slices.Insert(dest, 1, nil) // set_config's result
	}
	if err := q.row(dest...); err != nil {
		return err
	}
	for j, kh := range khs {
		i := t.index(kh)
		if i < 0 {
			continue
		}
		t.hasRow[i] = true
		if fps[j] == b.fp && exps[j].After(t.now) {
			t.entries[i] = store.Entry{Value: vals[j], ExpiresAt: time.UnixMilli(exps[j].UnixMilli())}
		}
	}
	t.now = time.UnixMilli(t.now.UnixMilli())
	return nil
}

// abandon ends a try whose apply failed. Nothing is written but the
// placeholders this try inserted: they are deleted, and the transaction
// commits having changed nothing (or, should the delete fail, rolls back,
// which removes them too). Close reads up to the Sync.
func (t *updateTry) abandon(q *runner) {
	var mine []int
	for i, p := range t.placeholder {
		if p {
			mine = append(mine, i)
		}
	}
	if len(mine) == 0 || q.sendDelete(t.hashes, mine) == nil {
		_ = q.sync()
	}
}

// writes is what round trip 2 writes: rows this transaction holds are
// updated (up), keys without one inserted (ins), rows left empty removed
// (del); each holds indexes of keys. added and removed count the entries
// made and ended.
type writes struct {
	up, ins, del   []int
	added, removed int
}

// plan compares what apply left in t.entries with what it was given.
func (t *updateTry) plan() writes {
	var w writes
	for i, e := range t.entries {
		old := t.before[i]
		switch {
		case e.Value == nil && old.Value == nil:
			if t.placeholder[i] {
				w.del = append(w.del, i)
			}
		case e.Value == nil:
			w.del = append(w.del, i)
			w.removed++
		case old.Value != nil && bytes.Equal(e.Value, old.Value) && e.ExpiresAt.Equal(old.ExpiresAt):
		default:
			if old.Value == nil {
				w.added++
			}
			if t.hasRow[i] {
				w.up = append(w.up, i)
			} else {
				w.ins = append(w.ins, i)
			}
		}
	}
	return w
}

// write is round trip 2: it writes w, admitting new entries by the exact
// count when exact, and commits. It returns the live entries the exact
// count found (-1 when not exact), and retry when a key it inserted had
// been inserted first by another transaction.
func (b *Backend) write(q *runner, t *updateTry, w writes, exact bool) (live int64, retry bool, err error) {
	live = -1
	// The rows inserted come before the bound's lock, which the exact
	// count takes: a Count takes its keys' rows (inserting placeholders)
	// before that lock, and an Update of a new key that took them the
	// other way round could deadlock with a Count of it. The count then
	// finds the inserted rows live, and is asked to admit the other
	// entries added.
	err = func() error {
		if err := q.sendWrite(uInsert1, uInsert, t.hashes, t.entries, w.ins, b.fp); err != nil {
			return err
		}
		if exact {
			if err := q.send(uAdmit, b.fp, int32(w.added-len(w.ins)), int64(b.bound.Max()), t.now, b.boundLock); err != nil {
				return err
			}
		}
		if err := q.sendWrite(uWrite1, uWrite, t.hashes, t.entries, w.up, b.fp); err != nil {
			return err
		}
		if err := q.sendDelete(t.hashes, w.del); err != nil {
			return err
		}
		return q.sync()
	}()
	if err != nil {
		return live, false, err
	}
	if len(w.ins) > 0 {
		tag, err := q.exec()
		if err != nil {
			return live, false, err
		}
		// Only a lone key is inserted optimistically, with nothing else
		// written: if another transaction inserted it first, this one
		// commits empty and the update starts again.
		retry = tag.RowsAffected() < int64(len(w.ins))
	}
	if exact {
		if err := q.row(&live); err != nil {
			return live, false, err
		}
		live -= int64(len(w.ins)) // as it was before this write
	}
	if len(w.up) > 0 {
		if _, err := q.exec(); err != nil {
			return live, false, err
		}
	}
	if len(w.del) > 0 {
		if _, err := q.exec(); err != nil {
			return live, false, err
		}
	}
	return live, retry, q.synced()
}

// wrote accounts for a write that ended with err. A full table is answered
// by the bound. Otherwise the estimate of live entries follows the write.
// It is set from live when the write counted them exactly (live is -1 when
// not).
func (b *Backend) wrote(prefix string, w writes, live int64, err error) error {
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == errFullCode {
			var n int
			fmt.Sscan(pgErr.Detail, &n)
			n -= len(w.ins) // the count found the rows this write inserted, rolled back since
			b.setEstimate(int64(n), 0)
			b.foundFull(int64(n))
			return b.bound.Admit(n+w.added-1, prefix)
		}
		return fmt.Errorf("postgres: update: write and commit: %w", err)
	}
	if w.removed > 0 {
		b.removedAt.Store(b.processNow().UnixNano())
	}
	if live >= 0 {
		_ = b.bound.Admit(int(live)+w.added-1, prefix) // logs when filling
		b.setEstimate(live+int64(w.added), int64(w.added))
	} else if d := w.added - w.removed; d != 0 {
		b.addEstimate(int64(d))
	}
	return nil
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
// entries are to be written. It uses the single-key statement one for one
// key, and the array statement many for several. It sends nothing for none.
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

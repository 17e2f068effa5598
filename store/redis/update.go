package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// Update implements [store.Backend].
//
// Updates of one key from this process take turns, under a local lock, so
// that they never conflict with each other; only other processes' updates
// can. When no key of the update is known here to be live, Update first
// guesses that none is. It calls apply with no entries and an estimate of
// the server's time (see serverClock), and sends its result to the write
// script. The script checks the guess as it checks a read: every key
// absent, and the estimate not after the server's time. A right guess saves
// the read's round trip. A wrong one writes nothing and is answered with
// what the keys hold, as a read would be. The Update goes on from that
// read, so it costs no more round trips than reading first.
func (b *Backend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) (err error) {
	defer poolWait(&err)
	sp := b.space(prefix)
	n := len(keys)
	u := newUpdateCall(n)
	ks := &u.ks
	sp, err = b.nameKeys(ks, sp, prefix, keys)
	if err != nil {
		return err
	}
	if err := b.turns.Take(ctx, &ks.locks); err != nil {
		return storekit.WaitedOut("the keys' turn", err)
	}
	defer b.turns.Give(&ks.locks)
	u.setHead(&b.max)
	var now int64
	read := false // raws and present hold a read at now
	if est, ok := b.clock.now(); ok && b.noneKnown(ks, est) {
		var done bool
		var err error
		if done, read, now, err = b.guess(ctx, sp, prefix, u, est, apply); done {
			return err
		}
	}
	swept := false
	for conflicts := 0; ; {
		if !read {
			var err error
			if now, err = b.read(ctx, ks.names[:n], u.raws, u.present); err != nil {
				return err
			}
		}
		read = false
		if err := b.entriesRead(u, now); err != nil {
			return err
		}
		if err := apply(time.UnixMilli(now), u.entries); err != nil {
			return err
		}
		changed, fresh := u.plan(now)
		if !changed {
			return nil // a read: it happened at the read's instant
		}
		u.others, u.at = b.elsewhere(sp), now
		res, _, err := b.write(ctx, ks, u.args, nil, nil)
		if err != nil {
			return err
		}
		switch res[0] {
		case 1:
			b.wrote(ctx, sp, prefix, ks, u.entries, res[1], res[2], u.others)
			return nil
		case 2:
			b.setLive(sp.live, res[1])
			if swept || !b.sweepFull(ctx) {
				return b.refuse(prefix, res[1]+b.elsewhere(sp)+fresh-1)
			}
			swept = true
		default:
			conflicts++
			if conflicts > b.maxRetries {
				return &store.UnavailableError{Reason: store.ReasonOverloaded, Err: fmt.Errorf("%w: %d attempts", ErrContention, conflicts)}
			}
			b.retries.Add(1)
			if err := backoff(ctx, conflicts); err != nil {
				return err
			}
		}
	}
}

// updateCall is the scratch of one Update: its keys, the entries apply sees
// and the write script's arguments. The arguments point into it rather than
// hold copies: each copy of a string or a large number in an interface
// would be an allocation of its own. The arrays hold a lone key, the common
// case, so that it takes one allocation.
type updateCall struct {
	ks      keySet
	entries []store.Entry
	args    []any    // see writeScript
	values  []string // each key's new raw value
	expires []int64  // each key's new expiry
	others  int64    // live entries under other tags
	at      int64    // the time apply was given
	raws    []string // each key's raw value as read
	present []bool   // whether each key had a raw value
	exps    []int64  // the expiry of each key's live entry as read, else 0
	bodies  []string // the value of each key's live entry as read

	entries1 [1]store.Entry
	args1    [writeHead + writePer]any
	values1  [1]string
	expires1 [1]int64
	raws1    [1]string
	present1 [1]bool
	exps1    [1]int64
	bodies1  [1]string
}

// newUpdateCall returns the scratch of an Update of n keys.
func newUpdateCall(n int) *updateCall {
	u := new(updateCall)
	if n == 1 {
		u.entries, u.args, u.values, u.expires = u.entries1[:], u.args1[:], u.values1[:], u.expires1[:]
		u.raws, u.present, u.exps, u.bodies = u.raws1[:], u.present1[:], u.exps1[:], u.bodies1[:]
		return u
	}
	u.entries = make([]store.Entry, n)
	u.args = make([]any, writeHead+writePer*n)
	u.values = make([]string, n)
	u.expires = make([]int64, n)
	u.raws = make([]string, n)
	u.present = make([]bool, n)
	u.exps = make([]int64, n)
	u.bodies = make([]string, n)
	return u
}

// guess runs apply on the guess that no key has an entry, at the estimated
// server time est, and writes its result if the guess was right. It reports
// done when the Update is answered. Otherwise the Update goes on from the
// read a wrong guess was answered with, or with a read of its own. With
// read, u.raws and u.present hold that answer, at the server's time now.
func (b *Backend) guess(ctx context.Context, sp *space, prefix string, u *updateCall, est int64, apply store.ApplyFunc) (done, read bool, now int64, err error) {
	ks, entries := &u.ks, u.entries
	clear(entries)
	if apply(time.UnixMilli(est), entries) != nil {
		return false, false, 0, nil // an error on a guess is not the Update's answer
	}
	writes := false
	for i := range entries {
		e := &entries[i]
		u.setRead(i, modeAbsent, "")
		if exp := e.ExpiresAt.UnixMilli(); e.Value != nil && exp > est {
			u.setValue(i, exp, e.Value)
			writes = true
		} else {
			u.keep(i)
		}
	}
	if !writes {
		return false, false, 0, nil // a read must see the store to be right
	}
	u.others, u.at = b.elsewhere(sp), est
	res, read, err := b.write(ctx, ks, u.args, u.raws, u.present)
	if err != nil {
		return true, false, 0, err
	}
	if res[0] == 1 {
		b.wrote(ctx, sp, prefix, ks, entries, res[1], res[2], u.others)
		return true, false, 0, nil
	}
	// A conflict, or no room for a new entry (the Update's own read and
	// checks of the bound take that from here).
	b.misses.Add(1)
	return false, read, res[2], nil
}

// write runs writeScript and notes the server's time it answers.
//
// On a conflict, when raws is not nil, raws and present get what the
// conflict answered the keys hold, as read does. That is at the server's
// time the answer carries; read reports that they did.
func (b *Backend) write(ctx context.Context, ks *keySet, args []any, raws []string, present []bool) (res [3]int64, read bool, err error) {
	ans, err := b.eval(ctx, writeScript, ks.names, args...).Slice()
	if err != nil {
		return res, false, err
	}
	n := len(ks.names) - indexKeys
	ok := len(ans) == 3 || len(ans) == 3+n
	for i := 0; ok && i < 3; i++ {
		res[i], ok = ans[i].(int64)
	}
	if !ok || len(ans) > 3 && res[0] != 0 {
		return res, false, fmt.Errorf("redis: write answered %v", ans)
	}
	b.clock.observe(res[2])
	if len(ans) == 3 || raws == nil {
		return res, false, nil
	}
	rawsFrom(ans[3:3+n], raws, present)
	return res, true, nil
}

// wrote records a successful write of entries, at the server's time now,
// that left live entries under sp's tag (-1: not counted), with others
// elsewhere. The caller holds the keys' stripes.
func (b *Backend) wrote(ctx context.Context, sp *space, prefix string, ks *keySet, entries []store.Entry, live, now, others int64) {
	for i := range entries {
		exp := int64(0)
		if e := entries[i]; e.Value != nil && e.ExpiresAt.UnixMilli() > now {
			exp = e.ExpiresAt.UnixMilli()
		}
		b.know(ks, i, exp)
	}
	b.counted(ctx, sp, prefix, live, others)
}

// counted records that a write left live entries under sp's tag (-1: not
// counted), with others elsewhere, and logs when the store is filling.
func (b *Backend) counted(ctx context.Context, sp *space, prefix string, live, others int64) {
	if live < 0 {
		return
	}
	b.setLive(sp.live, live)
	b.register(ctx, sp)
	if total := live + others; total >= int64(b.warnAt) && total <= int64(b.max) {
		_ = b.bound.Admit(int(total)-1, prefix) // logs that the store is filling
	}
}

// refuse answers a new key the bound has no room for.
func (b *Backend) refuse(prefix string, live int64) error {
	if err := b.bound.Admit(int(max(live, int64(b.max))), prefix); err != nil {
		return err
	}
	return store.ErrFull
}

// backoff waits a random while, growing with the number of conflicts, for
// the update that won to finish.
func backoff(ctx context.Context, conflicts int) error {
	limit := min(20*time.Microsecond<<min(conflicts, 10), 2*time.Millisecond)
	d := rand.N(limit) + time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

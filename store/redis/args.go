package redis

import (
	"strconv"
	"strings"

	"github.com/gatecount/gatecount/store"
)

// The scripts' ARGV layouts, the one place they are written (the scripts
// get them through writeLayout and countLayout).
//
// The write script's: writeHead values (max entries, live entries
// elsewhere, the time apply was given), then writePer per key (mode, raw
// value as read, new raw value, new expiry).
//
// The count script's: countHead values (amount, room: max entries less the
// live entries elsewhere), then countPer per key (cap, window ms). Every
// argument costs the script a little, so there are few.
const (
	writeHead = 3
	writePer  = 4
	countHead = 2
	countPer  = 2
)

// A key's mode in the write script: what its read found.
const (
	modeAbsent  = "a" // no raw value: the key must still have none
	modeLive    = "l" // a live entry: the key must hold it still, live
	modeExpired = "d" // an expired entry: the key must hold it or nothing
)

// A key's new raw value in the write script, besides "<exp>:<value>".
const (
	rawKeep   = "=" // leave the key as it is
	rawDelete = ""  // delete the key
)

// writeLayout puts the layout above into the write script's source.
var writeLayout = strings.NewReplacer(
	"$HEAD", strconv.Itoa(writeHead),
	"$PER", strconv.Itoa(writePer),
	"$ABSENT", modeAbsent,
	"$LIVE", modeLive,
	"$KEEP", rawKeep,
)

// countLayout puts the layout above into the count script's source.
var countLayout = strings.NewReplacer("$HEAD", strconv.Itoa(countHead), "$PER", strconv.Itoa(countPer))

// The algorithm script's arguments: algoHead values (amount, room, as
// the count script's), then algoPer per key (algorithm, capacity, span: a
// token bucket's interval in µs, else the window in ms).
const (
	algoHead = 2
	algoPer  = 3
)

// algoLayout puts the layout above into the algorithm script's source.
var algoLayout = strings.NewReplacer("$HEAD", strconv.Itoa(algoHead), "$PER", strconv.Itoa(algoPer),
	"$SLIDING", strconv.Itoa(int(store.SlidingWindow)), "$BUCKET", strconv.Itoa(int(store.TokenBucket)))

// setArgs lays out the count script's command in c, for an amount n on
// the keys c.ks names, with caps, and returns it (see cmdArgs). The room
// points to c.room, which the caller sets before each run (setOthers).
func (c *countCall) setArgs(n int64, caps []store.Budget) []any {
	ks := &c.ks
	c.n = n
	a := c.cmd[:cmdArgs(c.cmd[:], ks.names)]
	a = append(a, &c.n, &c.room)
	for i := range caps {
		c.limits[i], c.spans[i] = int64(caps[i].Limit), caps[i].Window.Milliseconds()
		a = append(a, &c.limits[i], &c.spans[i])
	}
	return a
}

// setAlgoArgs lays out algoScript's command in c, as setArgs does
// countScript's, with each key's algorithm, capacity and span.
func (c *countCall) setAlgoArgs(n int64, caps []store.Budget) []any {
	ks := &c.ks
	c.n = n
	a := c.cmd[:cmdArgs(c.cmd[:], ks.names)]
	a = append(a, &c.n, &c.room)
	for i := range caps {
		cp := caps[i]
		c.algs[i], c.limits[i] = int64(cp.Algorithm), cp.Capacity()
		c.spans[i] = cp.Window.Milliseconds()
		if cp.Algorithm == store.TokenBucket {
			c.spans[i] = cp.Interval().Microseconds()
		}
		a = append(a, &c.algs[i], &c.limits[i], &c.spans[i])
	}
	return a
}

// setOthers sets the live entries under other tags, and the room the
// scripts are given: max entries less them.
func (c *countCall) setOthers(b *Backend, others int64) {
	c.others, c.room = others, int64(b.max)-others
}

// setHead sets the arguments before the keys'; maxEntries is the backend's.
func (u *updateCall) setHead(maxEntries *int) {
	u.args[0], u.args[1], u.args[2] = maxEntries, &u.others, &u.at
}

// setRead sets key i's mode and its raw value as read.
func (u *updateCall) setRead(i int, mode string, read any) {
	o := writeHead + writePer*i
	u.args[o], u.args[o+1] = mode, read
}

// keep makes the write leave key i as it is.
func (u *updateCall) keep(i int) {
	o := writeHead + writePer*i
	u.args[o+2], u.args[o+3] = rawKeep, 0
}

// remove makes the write delete key i.
func (u *updateCall) remove(i int) {
	o := writeHead + writePer*i
	u.args[o+2], u.args[o+3] = rawDelete, 0
}

// setValue makes key i's new raw value "<exp>:<v>", expiring at exp, the
// write script's new raw value and expiry.
func (u *updateCall) setValue(i int, exp int64, v []byte) {
	var buf [64]byte
	raw := strconv.AppendInt(buf[:0], exp, 10)
	raw = append(raw, ':')
	u.values[i] = string(append(raw, v...))
	u.expires[i] = exp
	o := writeHead + writePer*i
	u.args[o+2], u.args[o+3] = &u.values[i], &u.expires[i]
}

// entriesRead decodes the raw values u.raws and u.present hold, read at the
// server's time now, into the entries apply sees, and notes which keys are
// live. u.exps and u.bodies get each live entry's expiry and value.
func (b *Backend) entriesRead(u *updateCall, now int64) error {
	for i := range u.entries {
		u.exps[i], u.bodies[i], u.entries[i] = 0, "", store.Entry{}
		if u.present[i] {
			var err error
			if u.entries[i], u.exps[i], u.bodies[i], err = liveEntry(u.raws[i], now); err != nil {
				return err
			}
		}
		b.know(&u.ks, i, u.exps[i])
	}
	return nil
}

// plan sets the write script's arguments for what apply left in u.entries,
// against what was read at now. It reports whether anything changes, and
// how many keys without a live entry get one.
func (u *updateCall) plan(now int64) (changed bool, fresh int64) {
	for i := range u.entries {
		e := &u.entries[i]
		switch {
		case !u.present[i]:
			u.setRead(i, modeAbsent, &u.raws[i])
		case u.exps[i] > 0:
			u.setRead(i, modeLive, &u.raws[i])
		default:
			u.setRead(i, modeExpired, &u.raws[i])
		}
		exp := e.ExpiresAt.UnixMilli()
		live := e.Value != nil && exp > now
		switch {
		case !live && u.exps[i] == 0:
			u.keep(i)
		case live && u.exps[i] == exp && string(e.Value) == u.bodies[i]:
			u.keep(i)
		case live:
			if u.exps[i] == 0 {
				fresh++
			}
			u.setValue(i, exp, e.Value)
			changed = true
		default:
			u.remove(i)
			changed = true
		}
	}
	return changed, fresh
}

package middleware

import (
	"net/http"
	"strconv"

	"github.com/gatecount/gatecount/limiter"
)

// shownKey returns the key of d that the RateLimit fields of an answer
// describe. A refusal names the refusing key whose window ends last, so
// that a client that waits its Retry-After is not refused again by the same
// attempt. An allowed attempt names the key with the least room left among
// own (every key when own is nil), the first on a tie. It returns -1 when d
// has no keys.
func shownKey(d *limiter.Decision, own []int) int {
	n := len(d.Keys())
	at := -1
	if !d.Allowed {
		for i := range n {
			if d.RemainingOf(i) == 0 && (at < 0 || d.ResetOf(i).After(d.ResetOf(at))) {
				at = i
			}
		}
		if at < 0 && n > 0 {
			at = min(max(d.KeyIndex, 0), n-1)
		}
		return at
	}
	consider := func(i int) {
		if i >= 0 && i < n && (at < 0 || d.RemainingOf(i) < d.RemainingOf(at)) {
			at = i
		}
	}
	if own == nil {
		for i := range n {
			consider(i)
		}
	} else {
		for _, i := range own {
			consider(i)
		}
	}
	return at
}

// show writes the RateLimit fields of d, and Retry-After when it refused,
// for the key shownKey picks. entries maps each key of the attempt to its
// budget among the guard's fields; nil entries name the deciding key.
// Fields f, when not nil, replace the guard's: those of the budget that
// applied.
func (g *guard) show(h http.Header, d *limiter.Decision, f *fields, entries, own []int) {
	if unnamed(d) {
		h["Retry-After"] = fieldValue(strconv.AppendInt(nil, max(secondsUntil(d.Reset, d.Now), 1), 10))
		return
	}
	k := -1
	if entries != nil {
		k = shownKey(d, own)
	}
	if f == nil {
		f = g.fields
	}
	if k < 0 || k >= len(entries) {
		f.set(h, d)
		return
	}
	remaining := 0
	if d.Allowed {
		remaining = d.RemainingOf(k)
	}
	f.write(h, entries[k], remaining, d.ResetOf(k), d.Now, d.Allowed)
}

// unnamed reports whether d is a refusal that no budget made: its limiting
// key holds no count. Neither the store nor process memory had room to
// count the attempt, as when a flood of others' new keys fills both, or
// memory forgot the key's count. The answer names no budget, since none of
// the client's is spent, and its Retry-After is the window the key would
// open.
func unnamed(d *limiter.Decision) bool {
	return !d.Allowed && d.Limiting >= 0 && d.RemainingOf(d.Limiting) >= d.Limit
}

package redis

import (
	"sync/atomic"
	"time"
)

// serverClock estimates the server's time from the times it answers, so
// that an Update that guesses its keys are absent need not read the time
// first. Each answer carrying the server's time S, arriving at local time
// L, bounds the offset of the server's clock from below. S was read before
// L, so the server's clock reads at least S - L + l at any later local time
// l. The estimate is that bound, less a millisecond for rounding. It is
// never after the server's time, unless a clock jumps, which the write
// script catches. It is behind it by at most the round trip of the answer
// it came from. The bound is kept at its highest, or renewed once a second,
// so that clock drift does not build up.
//
// Every Count observes, so the clock takes no lock. Any answer's bound is a
// true bound, so two observations racing can only leave a lower one than
// the highest, as a renewal does; at only says when to renew.
type serverClock struct {
	base   time.Time    // the local origin, on the monotonic clock
	offset atomic.Int64 // server ms less local ms, from below
	at     atomic.Int64 // local ms when offset was set; 0: never (set after offset)
}

// local returns the local time in ms since base, at least 1.
func (c *serverClock) local() int64 { return time.Since(c.base).Milliseconds() + 1 }

// observe notes that the server's time was server (Unix ms) a moment ago.
func (c *serverClock) observe(server int64) {
	l := c.local()
	o := server - l - 1
	if at := c.at.Load(); at == 0 || o > c.offset.Load() || l-at > 1000 {
		c.offset.Store(o)
		c.at.Store(l)
	}
}

// now returns the estimate of the server's time in Unix ms, and whether
// there is one.
func (c *serverClock) now() (int64, bool) {
	if c.at.Load() == 0 {
		return 0, false
	}
	return c.local() + c.offset.Load(), true
}

package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Coarse is the process clock at millisecond precision, read from memory
// instead of the system. A goroutine of its own advances it every
// millisecond while it is being read. The goroutine goes to sleep after a
// second in which nobody read it. A read while it sleeps takes the system
// clock and wakes it.
//
// A read costs an atomic load, where time.Now costs one or two reads of the
// system clock. The price is that a read may lag the system clock by the
// goroutine's scheduling latency. That is a millisecond or two on an idle
// machine, and tens of milliseconds on one whose cores are all busy. It
// never runs ahead of the system clock, and never back: a read never
// returns less than a read that returned before it. Make one with
// NewCoarse and stop its goroutine with Close.
type Coarse struct {
	ms     atomic.Int64 // unix milliseconds while awake; 0 while asleep
	read   atomic.Bool  // read since the last tick
	closed atomic.Bool
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	tick time.Duration
	idle int // ticks without a read before it sleeps
}

// NewCoarse returns a Coarse clock, asleep until its first read.
func NewCoarse() *Coarse { return newCoarse(time.Millisecond, 1000) }

func newCoarse(tick time.Duration, idle int) *Coarse {
	c := &Coarse{
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		tick: tick,
		idle: idle,
	}
	go c.run()
	return c
}

// Now returns the current time, truncated to the millisecond, with no
// monotonic reading.
func (c *Coarse) Now() time.Time { return time.UnixMilli(c.UnixMilli()) }

// UnixMilli returns the current time in milliseconds since the Unix epoch.
func (c *Coarse) UnixMilli() int64 {
	if ms := c.ms.Load(); ms != 0 {
		if !c.read.Load() {
			c.read.Store(true)
		}
		return ms
	}
	now := time.Now().UnixMilli()
	if c.closed.Load() {
		return now
	}
	c.advance(now) // the goroutine may store an earlier reading after this
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is already on its way
	}
	return now
}

// advance moves the clock to now, unless it already reads later.
func (c *Coarse) advance(now int64) {
	for {
		old := c.ms.Load()
		if old >= now || c.ms.CompareAndSwap(old, now) {
			return
		}
	}
}

// Close stops the clock's goroutine and waits for it. Reads after Close
// take the system clock. It is idempotent.
func (c *Coarse) Close() {
	c.closed.Store(true)
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

func (c *Coarse) run() {
	defer close(c.done)
	defer c.ms.Store(0)
	t := time.NewTicker(c.tick)
	defer t.Stop()
	for {
		t.Stop()
		select { // asleep
		case <-c.stop:
			return
		case <-c.wake:
		}
		c.advance(time.Now().UnixMilli())
		t.Reset(c.tick)
		for idle := 0; idle < c.idle; {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.advance(time.Now().UnixMilli())
				if c.read.Swap(false) {
					idle = 0
				} else {
					idle++
				}
			}
		}
		c.ms.Store(0)
	}
}

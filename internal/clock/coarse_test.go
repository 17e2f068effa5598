package clock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A Coarse clock reads the system clock's millisecond, never ahead of it,
// both asleep and awake, and its goroutine stops on Close.
func TestCoarse(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := newCoarse(time.Millisecond, 5)
	prev := int64(0)
	check := func() {
		t.Helper()
		got := c.UnixMilli()
		after := time.Now().UnixMilli()
		if got > after {
			t.Fatalf("read %d, ahead of the system clock's %d", got, after)
		}
		if got < prev-1000 {
			t.Fatalf("read %d, far behind an earlier read %d", got, prev)
		}
		prev = max(prev, got)
	}
	for range 200 {
		check()
	}
	// Let it fall asleep (five idle ticks), then read again: the read
	// takes the system clock and wakes it.
	for c.ms.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
	check()
	for c.ms.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	check()
	if n := c.Now(); n.UnixMilli()*int64(time.Millisecond) != n.UnixNano() {
		t.Fatalf("Now %v is not truncated to the millisecond", n)
	}
	c.Close()
	c.Close() // idempotent
	if got, now := c.UnixMilli(), time.Now().UnixMilli(); got > now || got < now-1000 {
		t.Fatalf("after Close read %d, system clock %d", got, now)
	}
}

// The clock advances while it is read.
func TestCoarseAdvances(t *testing.T) {
	defer goleak.VerifyNone(t)
	c := NewCoarse()
	defer c.Close()
	first := c.UnixMilli()
	for c.UnixMilli() <= first {
		time.Sleep(100 * time.Microsecond)
	}
}

func BenchmarkCoarse(b *testing.B) {
	c := NewCoarse()
	defer c.Close()
	for b.Loop() {
		c.UnixMilli()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		time.Now()
	}
}

// TestCoarseNeverBack: no read returns less than a read that returned
// before it began, while the clock falls asleep and wakes again.
func TestCoarseNeverBack(t *testing.T) {
	c := newCoarse(time.Millisecond, 2)
	defer c.Close()
	var latest atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				before := latest.Load()
				v := c.UnixMilli()
				if v < before {
					t.Errorf("a read returned %d after a read had returned %d", v, before)
					return
				}
				for old := latest.Load(); v > old && !latest.CompareAndSwap(old, v); old = latest.Load() {
				}
				if (i+g)%500 == 0 {
					time.Sleep(5 * time.Millisecond) // long enough for the clock to fall asleep
				}
			}
		})
	}
	wg.Wait()
}

// TestCoarseStaleTick: a reading the goroutine took before a read that
// found the clock asleep, and stores after it, does not move the clock
// back.
func TestCoarseStaleTick(t *testing.T) {
	c := newCoarse(time.Hour, 1) // its goroutine never ticks during the test
	defer c.Close()
	v := c.UnixMilli() // asleep: the system clock
	c.advance(v - 5)   // the goroutine's reading, taken a moment before
	if got := c.UnixMilli(); got < v {
		t.Fatalf("after a read of %d, a stale tick made the clock read %d", v, got)
	}
}

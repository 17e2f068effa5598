package clock

import (
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

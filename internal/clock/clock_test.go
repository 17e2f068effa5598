package clock

import (
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := NewFake(t0)
	if !f.Now().Equal(t0) {
		t.Fatal(f.Now())
	}
	if got := f.Advance(time.Minute); !got.Equal(t0.Add(time.Minute)) || !f.Now().Equal(got) {
		t.Fatal(got)
	}
	f.Set(t0)
	if !f.Now().Equal(t0) {
		t.Fatal(f.Now())
	}
	if o := (Offset{Base: f, Shift: -time.Hour}); !o.Now().Equal(t0.Add(-time.Hour)) {
		t.Fatal(o.Now())
	}
}

// Monotonic reads the same wall clock as time.Now, never going backwards
// between two reads.
func TestMonotonic(t *testing.T) {
	var m Monotonic
	prev := m.Now()
	for range 1000 {
		before := time.Now()
		got := m.Now()
		after := time.Now()
		if got.Before(prev) {
			t.Fatalf("went backwards: %v after %v", got, prev)
		}
		// The anchor is re-read within a second; allow for it being taken
		// just before a step of the wall clock.
		if got.Before(before.Add(-time.Second)) || got.After(after.Add(time.Second)) {
			t.Fatalf("%v is not between %v and %v", got, before, after)
		}
		prev = got
	}
}

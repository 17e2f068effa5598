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

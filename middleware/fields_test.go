package middleware

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// secondsUntil rounds as ceilSeconds(reset.Sub(now)) does, reset zero aside.
func TestSecondsUntil(t *testing.T) {
	now := time.Unix(1_800_000_000, 500_000_000)
	for _, c := range []struct {
		reset time.Time
		want  int64
	}{
		{time.Time{}, 0},
		{now, 0},
		{now.Add(-time.Nanosecond), 0},
		{now.Add(-999 * time.Millisecond), 0},
		{now.Add(-1500 * time.Millisecond), 0},
		{now.Add(-time.Hour), 0},
		{now.Add(time.Nanosecond), 1},
		{now.Add(499 * time.Millisecond), 1},
		{now.Add(500 * time.Millisecond), 1},
		{now.Add(501 * time.Millisecond), 1},
		{now.Add(time.Second), 1},
		{now.Add(time.Second + time.Nanosecond), 2},
		{now.Add(time.Hour - time.Millisecond), 3600},
		{now.Add(366 * 24 * time.Hour), 366 * 24 * 3600},
		{time.UnixMilli(now.UnixMilli() + 42_001), 43},
	} {
		got := secondsUntil(c.reset, now)
		if got != c.want {
			t.Errorf("secondsUntil(now%+v) = %d, want %d", c.reset.Sub(now), got, c.want)
		}
		if !c.reset.IsZero() && got != ceilSeconds(c.reset.Sub(now)) {
			t.Errorf("secondsUntil(now%+v) = %d, ceilSeconds(Sub) = %d", c.reset.Sub(now), got, ceilSeconds(c.reset.Sub(now)))
		}
	}
}

// Each value fieldValue hands out is its own: it keeps its text while more
// are cut from the same slab, a write to it changes no other, and an append
// to it copies it.
func TestFieldValue(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int // values of one goroutine
		size int // bytes of each, at least 8
	}{
		{"one", 1, 30},
		{"across slabs", 5 * slabSlots, 30},
		{"text fills first", 3 * slabSlots, slabBytes / 4},
		{"over a quarter slab", 4, slabBytes/4 + 1},
		{"long", 2, 4 * slabBytes},
	} {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() { checkFieldValues(t, g, c.n, c.size) })
			}
			wg.Wait()
		})
	}
}

// checkFieldValues cuts n values of size bytes, unique to goroutine g, and
// checks them as TestFieldValue says.
func checkFieldValues(t *testing.T, g, n, size int) {
	text := func(i int) string {
		s := fmt.Sprintf("%d;%d;", g, i)
		return s + strings.Repeat("x", size-len(s))
	}
	vals := make([][]string, n)
	for i := range vals {
		vals[i] = fieldValue([]byte(text(i)))
		if len(vals[i]) != 1 || cap(vals[i]) != 1 {
			t.Errorf("value %d: len %d, cap %d; want 1, 1", i, len(vals[i]), cap(vals[i]))
			return
		}
	}
	if n > 1 {
		vals[0][0] = "changed"
		if grown := append(vals[1], "more"); &grown[0] == &vals[1][0] {
			t.Errorf("an append to a value does not copy it")
		}
	}
	for i := 1; i < n; i++ {
		if vals[i][0] != text(i) {
			t.Errorf("value %d = %q, want %q", i, vals[i][0], text(i))
		}
	}
}

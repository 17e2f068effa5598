package middleware

import (
	"strings"
	"testing"
)

// field keeps every byte of values short and long, each in one allocation.
func TestField(t *testing.T) {
	for _, n := range []int{0, 1, 47, 48, 49, 127, 128} {
		want := strings.Repeat("x", n)
		var got []string
		allocs := testing.AllocsPerRun(10, func() { got = field([]byte(want)) })
		if len(got) != 1 || got[0] != want {
			t.Errorf("field of %d bytes = %q", n, got)
		}
		if allocs > 1 {
			t.Errorf("field of %d bytes: %v allocations, want 1", n, allocs)
		}
	}
}

package store

import (
	"errors"
	"testing"

	"github.com/gatecount/gatecount/store/value"
)

// FuzzParseCount feeds ParseCount values as a store might hand them back,
// corrupted or not.
func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"0", "7", "-1", "1e3", "01", "+5", "-0", " 5", "9223372036854775807", "9223372036854775808", `"5"`, "null", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		n, err := ParseCount(v)
		if err != nil {
			if !errors.Is(err, ErrNotCounter) {
				t.Fatalf("error %v does not match ErrNotCounter", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("negative count %d from %q", n, v)
		}
		back, err := ParseCount(value.AppendCount(nil, n))
		if err != nil || back != n {
			t.Fatalf("%d does not round-trip: %d, %v", n, back, err)
		}
		if !validJSON(v) {
			t.Fatalf("accepted %q, which is not JSON", v)
		}
	})
}

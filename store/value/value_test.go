package value_test

import (
	"testing"

	"github.com/gatecount/gatecount/store/value"
)

// Values written by AppendCount and AppendBucket read back as written;
// anything else is no count and no bucket.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 42, 1<<63 - 1} {
		if got, ok := value.CountOf(value.AppendCount(nil, n)); !ok || got != n {
			t.Errorf("CountOf(AppendCount(%d)) = %d, %v", n, got, ok)
		}
		if got, ok := value.BucketOf(value.AppendBucket(nil, n)); !ok || got != n {
			t.Errorf("BucketOf(AppendBucket(%d)) = %d, %v", n, got, ok)
		}
	}
	for _, v := range []string{"", "01", "-1", "1.5", `"1"`, "9223372036854775808", `{"tat":}`, `{"tat":1`, `[1]`} {
		if _, ok := value.CountOf([]byte(v)); ok {
			t.Errorf("CountOf(%q) reads a count", v)
		}
		if _, ok := value.BucketOf([]byte(v)); ok {
			t.Errorf("BucketOf(%q) reads a bucket", v)
		}
	}
	if got := value.BucketExpiry(1_000_001); got != 1001 {
		t.Errorf("BucketExpiry(1000001) = %d, want 1001 (rounded up)", got)
	}
}

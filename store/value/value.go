// Package value reads and writes the values package store's counting rule
// keeps, without allocating. A store author needs it only to count natively
// in process; stores that count in their server (SQL, Lua) follow the same
// format, described here.
//
// A key's value under each algorithm:
//
//   - Fixed window: the count, a JSON integer of digits only, no leading
//     zero ([AppendCount], [CountOf]). The entry expires at the window's
//     end.
//   - Sliding window: the Unix millisecond of each unit admitted,
//     ascending, a JSON array of such integers. The entry expires a window
//     after the newest.
//   - Token bucket: {"tat":µs}, the theoretical arrival time in Unix
//     microseconds ([AppendBucket], [BucketOf]). The entry expires then,
//     rounded up to the millisecond ([BucketExpiry]): when the bucket is
//     full again.
package value

import "strconv"

// CountOf reads v as a counter's value and reports whether it is one. A
// count is a JSON integer of at least zero, in the one form [AppendCount]
// writes (digits only, no leading zero).
func CountOf(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 19 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n < 0 { // past int64
			return 0, false
		}
	}
	return n, true
}

// AppendCount appends a counter's value for n to dst.
func AppendCount(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// BucketOf reads v as a token bucket's value, as [AppendBucket] writes it,
// and reports whether it is one. tat is in Unix microseconds.
func BucketOf(v []byte) (tat int64, ok bool) {
	const head, tail = `{"tat":`, `}`
	if len(v) <= len(head)+len(tail) || string(v[:len(head)]) != head || v[len(v)-1] != '}' {
		return 0, false
	}
	return CountOf(v[len(head) : len(v)-1])
}

// AppendBucket appends the value of a token bucket whose TAT is tat (Unix
// microseconds) to dst.
func AppendBucket(dst []byte, tat int64) []byte {
	dst = append(dst, `{"tat":`...)
	return append(AppendCount(dst, tat), '}')
}

// BucketExpiry is when the entry of a token bucket whose TAT is tat (Unix
// microseconds) expires, in Unix milliseconds: when the bucket is full.
func BucketExpiry(tat int64) int64 { return (tat + 999) / 1000 }

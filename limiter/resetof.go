package limiter

import "time"

// ResetOf returns when the window of key i of the attempt ends, on the
// store's clock, whether or not that key decided. It returns the zero time
// when that is unknown (no window, or i out of range). A guard that names
// one of several budgets in its answer, or the refusing budget whose window
// ends last, reads it.
func (d *Decision) ResetOf(i int) time.Time {
	if i < 0 || i >= int(d.n) || d.expires[i] <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(d.expires[i])
}

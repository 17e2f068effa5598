package loadtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// burstSendBound bounds how long a burst may take to send its requests:
// every one is sent at once, so it is only a bound, never reached.
const burstSendBound = time.Minute

// ErrBurst is matched by CheckBurst's errors: a burst answered other than
// exactly what its budget admits.
var ErrBurst = errors.New("loadtest: burst answered wrongly")

// Burst sends n concurrent POST /execute as caller, every one in flight at
// once on a connection of its own, request i to targets[i mod
// len(targets)], and returns what it saw: one round of the load tool's
// burst mode. Give each round a caller of its own, so that it starts with
// the whole budget.
func Burst(ctx context.Context, targets []string, caller Caller, n int) (*Result, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a burst of %d requests", ErrUsage, n)
	}
	return Run(ctx, LoadConfig{
		Targets:  targets,
		Callers:  []Caller{caller},
		Clients:  n,
		Requests: n,
		Duration: burstSendBound,
	})
}

// BurstWant returns how many of a burst of n requests from one caller e
// admits: the budget across all servers on a shared store; otherwise the
// budget on each server, or what it was sent when fewer.
func (r *Result) BurstWant(e Expect, n int) int {
	if e.Shared {
		return min(e.Budget, n)
	}
	want, nt := 0, len(r.Targets)
	for t := range nt {
		sent := n / nt
		if t < n%nt {
			sent++
		}
		want += min(e.Budget, sent)
	}
	return want
}

// CheckBurst returns nil when a burst of n requests (see Burst) was
// answered exactly as e admits: BurstWant × 200 and the rest 429, with no
// other status and no failed request. Otherwise it returns an error, matching
// ErrBurst, that gives the counts.
func (r *Result) CheckBurst(e Expect, n int) error {
	want := r.BurstWant(e, n)
	if r.Requests == n && r.Status[http.StatusOK] == want && r.Status[http.StatusTooManyRequests] == n-want && len(r.Errors) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; want exactly %d × 200 and %d × 429 of %d, nothing else", ErrBurst, r.BurstSummary(), want, n-want, n)
}

// BurstSummary formats what a burst was answered, in one line: the
// requests answered or failed, each status's count and each kind of
// error's, such as "500 answered: 200: 30  429: 440  503: 30  (errors: 5xx
// 503 Service Unavailable 30)".
func (r *Result) BurstSummary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d answered:", r.Requests)
	for _, s := range slices.Sorted(maps.Keys(r.Status)) {
		fmt.Fprintf(&b, "  %d: %d", s, r.Status[s])
	}
	if len(r.Errors) > 0 {
		var es []string
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			es = append(es, fmt.Sprintf("%s %d", k, r.Errors[k]))
		}
		fmt.Fprintf(&b, "  (errors: %s)", strings.Join(es, ", "))
	}
	return b.String()
}

package loadtest

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Percentile returns the p-th quantile (0 < p ≤ 1) of the run's latencies
// by nearest rank, or 0 when there are none.
func (r *Result) Percentile(p float64) time.Duration {
	n := len(r.Latencies)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(n))) - 1
	return r.Latencies[min(max(i, 0), n-1)]
}

// Throughput returns the requests per second of the run.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Expect is what a run should have admitted.
type Expect struct {
	// Budget is each caller's budget per window on one store.
	Budget int
	// Shared says the servers share one store, so that each caller's
	// budget holds across all of them; otherwise it holds on each.
	Shared bool
}

// Violation is a budget window in which a caller was admitted other than
// its budget.
type Violation struct {
	Caller string
	// Target is the server's index, or -1 for a window shared by all.
	Target int
	End    time.Time
	// Admitted and Refused are the window's answers 200 and 429.
	Admitted, Refused int
	Want              int
}

func (v Violation) String() string {
	where := "all servers"
	if v.Target >= 0 {
		where = fmt.Sprintf("server-%d", v.Target+1)
	}
	return fmt.Sprintf("%s on %s, window ending about %s: %d admitted and %d refused, want exactly %d admitted",
		v.Caller, where, v.End.Format("15:04:05"), v.Admitted, v.Refused, v.Want)
}

// Check returns the budget windows in which a caller was admitted more than
// e.Budget, or was answered at least e.Budget times (200 or 429) and
// admitted fewer. On a shared store, the windows are those every server
// reported together; otherwise each server's own.
func (r *Result) Check(e Expect) []Violation {
	var out []Violation
	for _, c := range r.Callers {
		for _, w := range r.windows(c, e.Shared) {
			if w.Admitted > e.Budget || (w.Admitted+w.Refused >= e.Budget && w.Admitted != e.Budget) {
				t := w.Target
				if e.Shared {
					t = -1
				}
				out = append(out, Violation{Caller: c.Caller.Name, Target: t, End: w.End, Admitted: w.Admitted, Refused: w.Refused, Want: e.Budget})
			}
		}
	}
	return out
}

// windows returns a caller's windows: each server's, or when shared, those
// of all servers merged by their end.
func (r *Result) windows(c CallerResult, shared bool) []Window {
	if !shared {
		return c.Windows
	}
	var out []Window
	for _, w := range c.Windows { // in the order they end
		if n := len(out); n > 0 && w.End.Sub(out[n-1].End) < w.Length/2 {
			out[n-1].Admitted += w.Admitted
			out[n-1].Refused += w.Refused
			continue
		}
		out = append(out, w)
	}
	return out
}

// Write prints the report of the run: throughput, latency percentiles,
// statuses, each caller's admissions against what e expects, and every
// error by kind.
func (r *Result) Write(w io.Writer, e Expect) {
	fmt.Fprintf(w, "requests    %d in %.2fs: %.0f req/s", r.Requests, r.Elapsed.Seconds(), r.Throughput())
	if r.Interrupted {
		fmt.Fprint(w, " (interrupted)")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency     p50 %v  p99 %v  p999 %v  max %v\n",
		round(r.Percentile(0.50)), round(r.Percentile(0.99)), round(r.Percentile(0.999)), round(r.Percentile(1)))
	var st []string
	for _, s := range slices.Sorted(maps.Keys(r.Status)) {
		st = append(st, fmt.Sprintf("%d: %d", s, r.Status[s]))
	}
	fmt.Fprintf(w, "statuses    %s\n", strings.Join(st, "  "))

	n := len(r.Targets)
	if e.Shared {
		fmt.Fprintf(w, "admitted    per caller, expected exactly %d per window across all %d servers (shared store)\n", e.Budget, n)
	} else {
		fmt.Fprintf(w, "admitted    per caller, expected %d per window = budget %d × %d servers: the memory store is not shared, each server counts alone\n",
			e.Budget*n, e.Budget, n)
	}
	bad := map[string]bool{}
	violations := r.Check(e)
	for _, v := range violations {
		bad[v.Caller] = true
	}
	for _, c := range r.Callers {
		var per []string
		for i, a := range c.Admitted {
			per = append(per, fmt.Sprintf("server-%d %d", i+1, a))
		}
		verdict := "ok"
		switch {
		case bad[c.Caller.Name]:
			verdict = "WRONG"
		case len(r.windows(c, e.Shared)) == 0:
			verdict = "no answers"
		}
		fmt.Fprintf(w, "  %-12s admitted %4d (%s)  refused %5d  errors %d  windows %d  %s\n",
			c.Caller.Name, c.TotalAdmitted(), strings.Join(per, ", "), sum(c.Refused), c.Errors, len(r.windows(c, e.Shared)), verdict)
	}
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors      none")
	} else {
		fmt.Fprintln(w, "errors")
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			fmt.Fprintf(w, "  %-40s %d\n", k, r.Errors[k])
		}
	}
	if len(violations) == 0 {
		fmt.Fprintln(w, "budgets     exact: every caller answered at least the budget in a window was admitted exactly the budget")
		return
	}
	fmt.Fprintf(w, "budgets     %d WRONG windows:\n", len(violations))
	for _, v := range violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// round shortens a latency for printing.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

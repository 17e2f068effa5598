package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatecount/gatecount/internal/option"
)

// Defaults of LoadConfig.
const (
	DefaultClients  = 64
	DefaultDuration = 10 * time.Second
	DefaultRequests = 20000
	DefaultTimeout  = 10 * time.Second
)

// LoadConfig describes the traffic Run sends: POST /execute, request i as
// caller i mod len(Callers) to target (i div len(Callers)) mod len(Targets),
// so that every caller reaches every target in turn.
type LoadConfig struct {
	// Targets are the servers' base URLs, on loopback addresses only.
	// Required.
	Targets []string
	// Callers send the requests with their tokens. Required.
	Callers []Caller
	// Clients is how many requests are in flight at once; 0 means
	// DefaultClients.
	Clients int
	// Duration bounds the run: no request is sent after it; 0 means
	// DefaultDuration.
	Duration time.Duration
	// Requests bounds the requests sent; 0 means DefaultRequests.
	Requests int
	// Timeout bounds one request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Progress, if not nil, is called every ProgressEvery while the run
	// lasts, on a goroutine of Run's.
	Progress func(Progress)
	// ProgressEvery is how often Progress is called; 0 means a second.
	ProgressEvery time.Duration
	// Request, if not nil, builds request i, for caller to target, in
	// place of POST /execute with the caller's bearer token: a run of
	// another route (GET /health, POST /login) from chosen addresses. Its
	// answers are counted as any: 200 admitted, 429 refused, every other
	// status in Status and, by kind, in Errors.
	Request func(ctx context.Context, target string, caller Caller, i int) (*http.Request, error)
}

// Progress is a snapshot of a run under way.
type Progress struct {
	Elapsed  time.Duration
	Requests int64 // answered or failed so far
	Admitted int64 // answered 200
	Refused  int64 // answered 429
	Errors   int64 // everything else
	// Rate is requests per second since the previous snapshot.
	Rate float64
}

// String formats the snapshot as one progress line.
func (p Progress) String() string {
	return fmt.Sprintf("%5.1fs  requests %7d  rate %8.0f/s  admitted %6d  refused %7d  errors %d",
		p.Elapsed.Seconds(), p.Requests, p.Rate, p.Admitted, p.Refused, p.Errors)
}

// Result is what a run saw.
type Result struct {
	// Elapsed is the run's length, from the first request sent to the
	// last answer.
	Elapsed time.Duration
	// Requests is how many requests were sent and answered or failed.
	// Requests cut short by the caller's context are not counted.
	Requests int
	// Latencies are every request's, answered or failed, in ascending
	// order.
	Latencies []time.Duration
	// Status counts the answers by HTTP status.
	Status map[int]int
	// Errors counts every request that was not answered 200 or 429, by
	// kind: "connection refused", "5xx 503", "unexpected status 401", ….
	Errors map[string]int
	// Targets are the servers the run sent to, in order.
	Targets []string
	// Callers is what each caller saw, in the order of LoadConfig.Callers.
	Callers []CallerResult
	// Interrupted reports that the caller's context ended the run early.
	Interrupted bool
}

// CallerResult is what one caller saw.
type CallerResult struct {
	Caller Caller
	// Admitted and Refused count the answers 200 and 429 from each target.
	Admitted, Refused []int
	// Errors counts the caller's requests that got neither.
	Errors int
	// Windows are the caller's budget windows on each target, in the
	// order they ended.
	Windows []Window
}

// TotalAdmitted returns the caller's 200s from every target.
func (c CallerResult) TotalAdmitted() int {
	n := 0
	for _, a := range c.Admitted {
		n += a
	}
	return n
}

// Window is one budget window a target reported for a caller: the answers
// 200 and 429 whose RateLimit field placed the window's end at about End.
type Window struct {
	Target   int
	End      time.Time
	Length   time.Duration // the window's length, from RateLimit-Policy
	Admitted int
	Refused  int
}

// Run sends the traffic c describes until Duration has passed or Requests
// were sent, whichever comes first, or ctx ends, and returns what it saw.
// Requests in flight when a bound is reached are waited for.
func Run(ctx context.Context, c LoadConfig) (*Result, error) {
	if len(c.Targets) == 0 || len(c.Callers) == 0 {
		return nil, fmt.Errorf("%w: Targets and Callers are required", ErrUsage)
	}
	for _, t := range c.Targets {
		if err := checkLoopback(t); err != nil {
			return nil, err
		}
	}
	c = c.withDefaults()
	tr := &http.Transport{
		Proxy:               nil, // never through a proxy the environment names
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        2 * c.Clients,
		MaxIdleConnsPerHost: c.Clients,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	r := &run{
		c:      c,
		client: &http.Client{Transport: tr, Timeout: c.Timeout},
		stats:  make([]callerStats, len(c.Callers)),
		status: map[int]int{},
		errs:   map[string]int{},
	}
	for i := range r.stats {
		r.stats[i].admitted = make([]int, len(c.Targets))
		r.stats[i].refused = make([]int, len(c.Targets))
	}
	start := time.Now()
	deadline := start.Add(c.Duration)
	stopProgress := make(chan struct{})
	var progress sync.WaitGroup
	if c.Progress != nil {
		progress.Go(func() { r.report(start, stopProgress) })
	}
	lat := make([][]time.Duration, c.Clients)
	var wg sync.WaitGroup
	for w := range c.Clients {
		wg.Go(func() { lat[w] = r.client1(ctx, deadline) })
	}
	wg.Wait()
	close(stopProgress)
	progress.Wait()

	return r.result(start, lat, ctx.Err() != nil), nil
}

// withDefaults returns c with every zero setting given its default.
func (c LoadConfig) withDefaults() LoadConfig {
	option.Default(&c.Clients, DefaultClients)
	option.Default(&c.Duration, DefaultDuration)
	option.Default(&c.Requests, DefaultRequests)
	option.Default(&c.Timeout, DefaultTimeout)
	option.Default(&c.ProgressEvery, time.Second)
	return c
}

// result gathers the run begun at start, whose clients measured lat, and
// which was interrupted or not.
func (r *run) result(start time.Time, lat [][]time.Duration, interrupted bool) *Result {
	c := r.c
	res := &Result{
		Elapsed:     time.Since(start),
		Status:      r.status,
		Errors:      r.errs,
		Targets:     c.Targets,
		Interrupted: interrupted,
	}
	for _, l := range lat {
		res.Latencies = append(res.Latencies, l...)
	}
	slices.Sort(res.Latencies)
	res.Requests = len(res.Latencies)
	for i, s := range r.stats {
		res.Callers = append(res.Callers, CallerResult{
			Caller:   c.Callers[i],
			Admitted: s.admitted,
			Refused:  s.refused,
			Errors:   s.errors,
			Windows:  s.windows,
		})
	}
	return res
}

func checkLoopback(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("%w: target %q: %w", ErrUsage, target, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: target %q is not a loopback address: load is only ever sent to this machine", ErrUsage, target)
	}
	return nil
}

type run struct {
	c      LoadConfig
	client *http.Client
	next   atomic.Int64 // index of the next request

	done, admitted, refused, failed atomic.Int64

	mu     sync.Mutex
	status map[int]int
	errs   map[string]int
	stats  []callerStats
}

type callerStats struct {
	admitted, refused []int
	errors            int
	windows           []Window
}

// client1 is one client: it sends requests until a bound is reached and
// returns their latencies.
func (r *run) client1(ctx context.Context, deadline time.Time) []time.Duration {
	var lat []time.Duration
	nc, nt := int64(len(r.c.Callers)), int64(len(r.c.Targets))
	for ctx.Err() == nil && time.Now().Before(deadline) {
		i := r.next.Add(1) - 1
		if i >= int64(r.c.Requests) {
			break
		}
		caller, target := int(i%nc), int((i/nc)%nt)
		t0 := time.Now()
		status, hdr, err := r.do(ctx, r.c.Targets[target], r.c.Callers[caller], int(i))
		t1 := time.Now()
		if err != nil && ctx.Err() != nil {
			break // cut short by the caller: neither answered nor failed
		}
		lat = append(lat, t1.Sub(t0))
		r.record(caller, target, status, hdr, err, t1)
	}
	return lat
}

func (r *run) do(ctx context.Context, target string, caller Caller, i int) (int, http.Header, error) {
	req, err := r.request(ctx, target, caller, i)
	if err != nil {
		return 0, nil, err
	}
	res, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, res.Header, nil
}

// request builds request i: LoadConfig.Request's, or POST /execute with
// the caller's bearer token.
func (r *run) request(ctx context.Context, target string, caller Caller, i int) (*http.Request, error) {
	if r.c.Request != nil {
		return r.c.Request(ctx, target, caller, i)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/execute", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+caller.Token)
	return req, nil
}

func (r *run) record(caller, target, status int, hdr http.Header, err error, at time.Time) {
	r.done.Add(1)
	kind := ""
	switch {
	case err != nil:
		kind = ErrorKind(err)
	case status == http.StatusOK:
		r.admitted.Add(1)
	case status == http.StatusTooManyRequests:
		r.refused.Add(1)
	case status >= 500:
		kind = fmt.Sprintf("5xx %d %s", status, http.StatusText(status))
	default:
		kind = fmt.Sprintf("unexpected status %d %s", status, http.StatusText(status))
	}
	if kind != "" {
		r.failed.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.status[status]++
	}
	s := &r.stats[caller]
	if kind != "" {
		r.errs[kind]++
		s.errors++
		return
	}
	if status == http.StatusOK {
		s.admitted[target]++
	} else {
		s.refused[target]++
	}
	end, window, ok := windowEnd(hdr, at)
	if !ok {
		r.errs["answer without a RateLimit field"]++
		return
	}
	s.addToWindow(target, end, window, status == http.StatusOK)
}

// addToWindow counts an answer in the window of target that ends at about
// end. Windows of one key end at least a window apart, and the end an
// answer tells is off by at most a second and its latency, so answers
// whose ends are within half a window belong to one window.
func (s *callerStats) addToWindow(target int, end time.Time, window time.Duration, admitted bool) {
	for i := len(s.windows) - 1; i >= 0; i-- {
		w := &s.windows[i]
		if w.Target != target {
			continue
		}
		if d := w.End.Sub(end); d < window/2 && d > -window/2 {
			if admitted {
				w.Admitted++
			} else {
				w.Refused++
			}
			return
		}
	}
	w := Window{Target: target, End: end, Length: window}
	if admitted {
		w.Admitted = 1
	} else {
		w.Refused = 1
	}
	s.windows = append(s.windows, w)
	slices.SortStableFunc(s.windows, func(a, b Window) int { return a.End.Compare(b.End) })
}

// windowEnd reads when the window of an answer ends, from its RateLimit
// field's t (seconds left) and the window's length from RateLimit-Policy's
// w (60 s when absent).
func windowEnd(h http.Header, at time.Time) (end time.Time, window time.Duration, ok bool) {
	t, ok := param(h.Get("RateLimit"), "t")
	if !ok {
		return time.Time{}, 0, false
	}
	window = time.Minute
	if w, ok := param(h.Get("RateLimit-Policy"), "w"); ok && w > 0 {
		window = time.Duration(w) * time.Second
	}
	return at.Add(time.Duration(t) * time.Second), window, true
}

// param reads the integer parameter name of the first item of a structured
// field such as `"execute";r=12;t=42`.
func param(field, name string) (int64, bool) {
	item, _, _ := strings.Cut(field, ",")
	for _, p := range strings.Split(item, ";")[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if k == name {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// ErrorKind names the kind of a request's failure for the report.
func ErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// net/http's own word for a kept-alive connection the server
		// closed as a request went out on it; it has no sentinel.
		strings.Contains(err.Error(), "server closed idle connection"):
		return "connection closed before an answer"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "connection error"
}

// report calls Progress every ProgressEvery until stop is closed.
func (r *run) report(start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(r.c.ProgressEvery)
	defer t.Stop()
	last, lastAt := int64(0), start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := r.done.Load()
			r.c.Progress(Progress{
				Elapsed:  now.Sub(start),
				Requests: n,
				Admitted: r.admitted.Load(),
				Refused:  r.refused.Load(),
				Errors:   r.failed.Load(),
				Rate:     float64(n-last) / now.Sub(lastAt).Seconds(),
			})
			last, lastAt = n, now
		}
	}
}

// Package middleware limits HTTP handlers: func(http.Handler) http.Handler
// wrappers, usable with http.ServeMux, chi and gorilla/mux, that count each
// request against a limiter and refuse the ones over budget. (For one line
// per route, see the module root: gatecount.LimitByIP and gatecount.Limits.)
//
// The constructors, each counting in a store handle of its own:
//
//   - PerIP limits each client address (keyfunc.IP, forwarding headers only
//     from trusted proxies). Default name "ip"; when the store is down,
//     requests go through (limiter.Allow).
//   - PerCaller limits each authenticated caller, by the ID the app's
//     authentication put in the context (keyfunc.WithCallerID); a request
//     without one is answered 401. Default name "caller"; when the store
//     is down, it counts in process memory (limiter.Local).
//   - New limits by any key function (Options.Key). Default name "limit";
//     when the store is down, requests are refused 503 (limiter.Deny).
//   - SignIn guards a sign-in form: failures per account and address,
//     failures per account, attempts per address, and known devices, in one
//     atomic store update per attempt; the handler reads the counted
//     account with Account and tells the outcome with ReportSuccess or
//     ReportFailure. Default name "login" (budgets login-account-ip,
//     login-account, login-device, login-ip).
//   - Send guards a route that sends mail or codes: per destination and per
//     address, answering a throttled request like an accepted one unless
//     SendOptions.Reveal. Default name "send" (budgets send-destination,
//     send-ip).
//
// Each Middleware owns its limiter, which claims its own store handle:
// building two middlewares on one handle is refused with an error matching
// store.ErrStoreReuse, since both would count each other's requests, and two
// limiters of one store with the same name are refused with an error
// matching store.ErrDuplicateName.
//
//	s := memory.New(memory.Options{})
//	execH, err := s.Handle("execute:")
//	…
//	perCaller, err := middleware.PerCaller(execH, limiter.Budget{Limit: 30, Window: time.Minute}, middleware.Options{Name: "execute"})
//	if err != nil {
//		return err
//	}
//	mux.Handle("POST /execute", auth(perCaller.Wrap(execute)))
//
// # Responses
//
// A request over budget is answered 429 Too Many Requests, and never reaches
// the wrapped handler. The answer carries Retry-After, in whole seconds
// rounded up from the end of the limiting window on the store's clock (at
// least 1), and an application/problem+json body (RFC 9457); Options.OnLimit
// replaces it.
//
// Every counted response carries the fields of the IETF RateLimit header
// draft (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: "execute";q=30;w=60
//	RateLimit: "execute";r=12;t=42
//
// q is the budget, w its window in seconds, r the requests left and t the
// seconds until the window resets; on a 429, Retry-After is never earlier
// than t. Options.LegacyHeaders adds X-RateLimit-Limit, -Remaining and
// -Reset; Options.HideRemaining leaves out r and X-RateLimit-Remaining.
//
// Limiters stacked on one route (10 a minute and 100 a day, say) each add
// their members to the two lists, so that a client sees every budget:
//
//	RateLimit-Policy: "minute";q=10;w=60, "day";q=100;w=86400
//	RateLimit: "minute";r=9;t=60, "day";r=99;t=86400
//
// A store that cannot answer is handled by the limiter's limiter.Policy
// (Options.Unavailable). Under limiter.Deny the request is answered 503 Service Unavailable with
// Retry-After, never 429, so that a client can tell an outage from its own
// excess.
//
// # Counting only failures
//
// For sign-in and similar forms, Options.CountFailures counts the attempt
// before the handler runs, so that concurrent attempts cannot all slip
// through, and refunds it when the handler succeeds: by the status it writes
// (Options.Success, by default a status below 400), or as it says with
// ReportSuccess and ReportFailure.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Log kinds of the middleware.
const (
	KindNoKey   = "ratelimit-no-key"
	KindLimited = "ratelimit-limited"
)

// DefaultUnavailableRetryAfter is the Retry-After of a 503 answered while the
// store is unavailable.
const DefaultUnavailableRetryAfter = 5 * time.Second

// Options configure a Middleware. The zero value gives the defaults.
type Options struct {
	// Name names the limiter in logs and in the RateLimit fields; the
	// constructor gives a default. It must be a token: letters, digits and
	// "-_.".
	Name string
	// Unavailable is what to answer when the store is unavailable; the zero
	// value, limiter.Default, is the constructor's choice: Local for
	// PerCaller, Allow for PerIP, Deny for New.
	Unavailable limiter.Policy
	// Key replaces the constructor's key function.
	Key keyfunc.Func
	// IP configures the client address of PerIP (trusted proxies, IPv6
	// prefix).
	IP keyfunc.IPOptions
	// OnLimit replaces the 429 answer. The RateLimit fields and Retry-After
	// are already set when it runs.
	OnLimit func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	// OnNoKey answers a request the key function finds no key in; nil
	// answers it with KeyErrorStatus. The request never reaches the
	// handler uncounted.
	OnNoKey func(w http.ResponseWriter, r *http.Request, err error)
	// KeyErrorStatus is the status of the default OnNoKey; 0 means the
	// constructor's (401 for PerCaller, 400 otherwise).
	KeyErrorStatus int
	// Skip, when it returns true, lets a request through uncounted: a
	// platform's health checker, say.
	Skip func(r *http.Request) bool
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until reset).
	LegacyHeaders bool
	// HideRemaining leaves out how many requests are left, which tells a
	// guesser how to pace; Retry-After is still sent on a 429.
	HideRemaining bool
	// CountFailures refunds the attempt of every request the handler
	// succeeds with (see the package doc).
	CountFailures bool
	// Success tells a successful response by its status under
	// CountFailures; nil means status < 400.
	Success func(status int) bool
	// UnavailableRetryAfter is the Retry-After of a 503 answered under
	// the Deny policy; 0 means DefaultUnavailableRetryAfter.
	UnavailableRetryAfter time.Duration
	// Observer, when set, is told of every decision (see limiter.Observer).
	Observer limiter.Observer
	// Logger receives the middleware's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Middleware limits the handlers it wraps with one limiter. It is safe for
// concurrent use.
type Middleware struct {
	l        *limiter.Limiter
	key      keyfunc.Func
	o        Options
	fields   *fields
	retry503 []string
	log      *slog.Logger
	noKeyLog rate.Sometimes
	fwd      *forwardedWarning // PerIP's own key only
}

// PerCaller returns a Middleware that limits each authenticated caller to
// budget, keyed by the caller ID the app's authentication middleware put in
// the request context (keyfunc.WithCallerID). A request without one is
// answered 401 and never reaches the handler. When the store is unavailable
// it counts in process memory by default (Local): the endpoint it guards
// does real work, so it should stay limited, but an outage of the store
// should not stop every caller. Its default name is "caller".
func PerCaller(h *store.Handle, budget limiter.Budget, o Options) (*Middleware, error) {
	if o.Name == "" {
		o.Name = "caller"
	}
	if o.KeyErrorStatus == 0 {
		o.KeyErrorStatus = http.StatusUnauthorized
	}
	if o.Key == nil {
		o.Key = keyfunc.CallerID
	}
	return build(h, budget, o, limiter.Local)
}

// PerIP returns a Middleware that limits each client address to budget,
// keyed by keyfunc.IP under o.IP (forwarding headers only from trusted
// proxies). When the store is unavailable it lets requests through by
// default (Allow): the cheap routes it is meant for, such as health checks
// polled by a platform, must keep answering. Its default name is "ip".
//
// With no trusted proxies, the first request carrying X-Forwarded-For or
// Forwarded logs a warning of kind KindForwardedUntrusted: behind a proxy
// that nobody told it of, the limiter keys every client by the proxy's
// address.
func PerIP(h *store.Handle, budget limiter.Budget, o Options) (*Middleware, error) {
	if o.Name == "" {
		o.Name = "ip"
	}
	own := o.Key == nil
	if own {
		k, err := keyfunc.NewIP(o.IP)
		if err != nil {
			return nil, fmt.Errorf("middleware %q: %w", o.Name, err)
		}
		o.Key = k.Key
	}
	m, err := build(h, budget, o, limiter.Allow)
	if err == nil && own {
		m.fwd = newForwardedWarning(o.IP, m.log)
	}
	return m, err
}

// New returns a Middleware that limits each key o.Key finds to budget. When
// the store is unavailable it refuses requests by default (Deny), the safe
// choice when nothing is known of the endpoint. Its default name is
// "limit".
func New(h *store.Handle, budget limiter.Budget, o Options) (*Middleware, error) {
	if o.Key == nil {
		return nil, errors.New("middleware: Options.Key is required")
	}
	if o.Name == "" {
		o.Name = "limit"
	}
	return build(h, budget, o, limiter.Deny)
}

func build(h *store.Handle, budget limiter.Budget, o Options, def limiter.Policy) (*Middleware, error) {
	if !isToken(o.Name) {
		return nil, fmt.Errorf("middleware: name %q must be a token of letters, digits, '-', '_' and '.'", o.Name)
	}
	policy := o.Unavailable.Or(def)
	if o.KeyErrorStatus == 0 {
		o.KeyErrorStatus = http.StatusBadRequest
	}
	if o.KeyErrorStatus < 400 || o.KeyErrorStatus > 599 {
		return nil, fmt.Errorf("middleware %q: KeyErrorStatus %d is not an error status", o.Name, o.KeyErrorStatus)
	}
	if o.Success == nil {
		o.Success = defaultSuccess
	}
	if o.UnavailableRetryAfter <= 0 {
		o.UnavailableRetryAfter = DefaultUnavailableRetryAfter
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	l, err := limiter.New(h, limiter.Options{Name: o.Name, Budget: budget, Unavailable: policy, Logger: o.Logger, Observer: o.Observer})
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	m := &Middleware{
		l:        l,
		key:      o.Key,
		o:        o,
		fields:   newFields([]string{o.Name}, []limiter.Budget{budget}, o.HideRemaining, o.LegacyHeaders),
		retry503: []string{strconv.FormatInt(ceilSeconds(o.UnavailableRetryAfter), 10)},
		log:      o.Logger.With("limiter", o.Name),
		noKeyLog: rate.Sometimes{Interval: time.Second},
	}
	return m, nil
}

func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Limiter returns the middleware's limiter.
func (m *Middleware) Limiter() *limiter.Limiter { return m.l }

// Close releases what the middleware's limiter holds of its own (see
// limiter.Limiter.Close). The store is the caller's to close.
func (m *Middleware) Close() error { return m.l.Close() }

// Wrap returns next limited by m.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.o.Skip != nil && m.o.Skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	if m.fwd != nil {
		m.fwd.check(r)
	}
	key, err := m.key(r)
	if err != nil {
		m.noKey(w, r, err)
		return
	}
	ctx := r.Context()
	if m.o.CountFailures {
		// A client that hangs up after sending is still counted.
		ctx = context.WithoutCancel(ctx)
	}
	d, err := m.l.Attempt(ctx, key)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		m.noKey(w, r, err)
		return
	}
	if d.Unavailable && !d.Local {
		if !d.Allowed {
			m.unavailable(w, r)
			return
		}
		next.ServeHTTP(w, r) // fail open: nothing was counted
		return
	}
	m.fields.set(w.Header(), &d)
	if !d.Allowed {
		m.limited(w, r, d)
		return
	}
	if !m.o.CountFailures {
		next.ServeHTTP(w, r)
		return
	}
	m.serveCounted(w, r, next, d)
}

// serveCounted runs next and refunds the attempt if it succeeded.
func (m *Middleware) serveCounted(w http.ResponseWriter, r *http.Request, next http.Handler, d limiter.Decision) {
	out := &outcome{}
	rw := &responseWriter{ResponseWriter: w}
	next.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), outcomeKey{}, out)))
	success := out.said == saidSuccess || (out.said == saidNothing && m.o.Success(rw.Status()))
	if !success {
		return
	}
	if err := m.l.Refund(context.WithoutCancel(r.Context()), d); err != nil {
		m.log.Warn("refund of a successful request failed", "kind", "ratelimit-refund-failed", "err", err)
	}
}

// fields writes the RateLimit header fields of decisions on one or more
// budgets, each named.
type fields struct {
	policy        []string // RateLimit-Policy, shared by every response
	names         []string // `"name";` of each key of an attempt
	limits        [][]string
	hideRemaining bool
	legacy        bool
}

func newFields(names []string, budgets []limiter.Budget, hideRemaining, legacy bool) *fields {
	f := &fields{hideRemaining: hideRemaining, legacy: legacy}
	var policy []string
	for i, name := range names {
		w := max(int64(budgets[i].Window/time.Second), 1)
		policy = append(policy, fmt.Sprintf("%q;q=%d;w=%d", name, budgets[i].Limit, w))
		f.names = append(f.names, strconv.Quote(name)+";")
		f.limits = append(f.limits, []string{strconv.Itoa(budgets[i].Limit)})
	}
	f.policy = []string{strings.Join(policy, ", ")}
	return f
}

// set writes the fields of d, naming the key that decided it.
func (f *fields) set(h http.Header, d *limiter.Decision) {
	f.write(h, d.KeyIndex, d.Remaining, d.Reset, d.Now, d.Allowed)
}

// write writes the fields of budget at (an index of the names newFields
// was given) with remaining attempts left until reset, as of now, and
// Retry-After when the attempt was refused.
func (f *fields) write(h http.Header, at, remaining int, reset, now time.Time, allowed bool) {
	t := ceilSeconds(reset.Sub(now))
	if reset.IsZero() {
		t = 0
	}
	at = min(max(at, 0), len(f.names)-1)
	stacked := len(h["Ratelimit-Policy"]) > 0 || len(h["Ratelimit"]) > 0
	if stacked {
		h["Ratelimit-Policy"] = []string{f.merge(h["Ratelimit-Policy"], f.policy[0])}
	} else {
		h["Ratelimit-Policy"] = f.policy
	}
	var buf [128]byte
	b := append(buf[:0], f.names[at]...)
	if !f.hideRemaining {
		b = append(b, "r="...)
		b = strconv.AppendInt(b, int64(remaining), 10)
		b = append(b, ';')
	}
	b = append(b, "t="...)
	b = strconv.AppendInt(b, t, 10)
	if stacked {
		h["Ratelimit"] = []string{f.merge(h["Ratelimit"], string(b))}
	} else {
		h["Ratelimit"] = field(b)
	}
	if f.legacy {
		h["X-Ratelimit-Limit"] = f.limits[at]
		if !f.hideRemaining {
			h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(remaining)}
		}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(t, 10)}
	}
	if !allowed {
		h["Retry-After"] = []string{strconv.FormatInt(max(t, 1), 10)}
	}
}

// merge returns the list members of field values vals, less those naming
// one of f's budgets, followed by mine: the value of a field that an outer
// limiter of the same request has already set, so that stacked limiters
// each keep their members (the draft's fields are lists).
func (f *fields) merge(vals []string, mine string) string {
	var b strings.Builder
	for _, v := range vals {
		for m := range strings.SplitSeq(v, ",") {
			m = strings.TrimSpace(m)
			if m == "" || f.ownMember(m) {
				continue
			}
			b.WriteString(m)
			b.WriteString(", ")
		}
	}
	b.WriteString(mine)
	return b.String()
}

// ownMember reports whether list member m names one of f's budgets.
func (f *fields) ownMember(m string) bool {
	for _, n := range f.names { // each is `"name";`
		if strings.HasPrefix(m, n) {
			return true
		}
	}
	return false
}

// oneField holds a header field's value and the one-element slice a Header
// keeps it in, so that both cost one allocation. shortField is the same for
// the common short value, in a smaller allocation.
type (
	oneField struct {
		vals [1]string
		buf  [128]byte
	}
	shortField struct {
		vals [1]string
		buf  [48]byte
	}
)

// field returns b as a header field's values in one allocation. b must be
// at most 128 bytes, as a name of at most 64 bytes and two numbers keep it.
func field(b []byte) []string {
	if len(b) <= len(shortField{}.buf) {
		f := new(shortField)
		n := copy(f.buf[:], b)
		f.vals[0] = unsafe.String(&f.buf[0], n) // f.buf is never written again
		return f.vals[:]
	}
	f := new(oneField)
	n := copy(f.buf[:], b)
	f.vals[0] = unsafe.String(&f.buf[0], n)
	return f.vals[:]
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

var (
	problem429 = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Too many requests: retry after the time in the Retry-After header."}` + "\n")
	problem503 = []byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limit store is unavailable: retry after the time in the Retry-After header."}` + "\n")
)

func (m *Middleware) limited(w http.ResponseWriter, r *http.Request, d limiter.Decision) {
	if m.o.OnLimit != nil {
		m.o.OnLimit(w, r, d)
		return
	}
	writeProblem(w, http.StatusTooManyRequests, problem429)
}

func (m *Middleware) unavailable(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Retry-After"] = m.retry503
	writeProblem(w, http.StatusServiceUnavailable, problem503)
}

func (m *Middleware) noKey(w http.ResponseWriter, r *http.Request, err error) {
	m.noKeyLog.Do(func() {
		m.log.Warn("request refused: no rate-limit key", "kind", KindNoKey, "err", err)
	})
	if m.o.OnNoKey != nil {
		m.o.OnNoKey(w, r, err)
		return
	}
	status := m.o.KeyErrorStatus
	body := fmt.Appendf(nil, `{"type":"about:blank","title":%q,"status":%d}`+"\n", http.StatusText(status), status)
	writeProblem(w, status, body)
}

func writeProblem(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	w.Write(body)
}

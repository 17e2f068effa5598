package middleware

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/limiter"
)

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
		q, w := policyOf(budgets[i])
		policy = append(policy, fmt.Sprintf("%q;q=%d;w=%d", name, q, w))
		f.names = append(f.names, strconv.Quote(name)+";")
		f.limits = append(f.limits, []string{strconv.FormatInt(q, 10)})
	}
	f.policy = []string{strings.Join(policy, ", ")}
	return f
}

// policyOf is the quota and window, in seconds, of a budget's policy item
// (the draft's q and w). That is Limit per Window, or for a token bucket
// its capacity per the time it takes to refill, which says both its burst
// and its rate. A window is whole seconds, at least 1; a bucket's is
// rounded up, so that a client pacing by it is never early.
func policyOf(b limiter.Budget) (q, w int64) {
	if b.Algorithm == limiter.TokenBucket {
		return b.Capacity(), max(ceilSeconds(b.Span()), 1)
	}
	return int64(b.Limit), max(int64(b.Window/time.Second), 1)
}

// set writes the fields of d, naming the key that decided it.
func (f *fields) set(h http.Header, d *limiter.Decision) {
	f.write(h, d.KeyIndex, d.Remaining, d.Reset, d.Now, d.Allowed)
}

// write writes the fields of budget at (an index of the names newFields
// was given) with remaining attempts left until reset, as of now, and
// Retry-After when the attempt was refused.
func (f *fields) write(h http.Header, at, remaining int, reset, now time.Time, allowed bool) {
	t := secondsUntil(reset, now)
	at = min(max(at, 0), len(f.names)-1)
	stacked := len(h) > 0 && (len(h["Ratelimit-Policy"]) > 0 || len(h["Ratelimit"]) > 0)
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
		h["Ratelimit"] = fieldValue(b)
	}
	if f.legacy {
		h["X-Ratelimit-Limit"] = f.limits[at]
		if !f.hideRemaining {
			h["X-Ratelimit-Remaining"] = fieldValue(strconv.AppendInt(buf[:0], int64(remaining), 10))
		}
		h["X-Ratelimit-Reset"] = fieldValue(strconv.AppendInt(buf[:0], t, 10))
	}
	if !allowed {
		h["Retry-After"] = fieldValue(strconv.AppendInt(buf[:0], max(t, 1), 10))
	}
}

// A slab is where fieldValue cuts values from: text that only grows, and
// slots of one value each.
type slab struct {
	text  strings.Builder
	slots [slabSlots]string
	n     int // slots handed out
}

// Sizes of a slab: a RateLimit value is some 20 to 40 bytes, and a slab of
// 32 such costs the garbage collector no more than 32 allocations of them.
const (
	slabSlots = 32
	slabBytes = 768
)

// slabs holds slabs between requests, one at most per P while in use.
var slabs sync.Pool

// fieldValue returns a header field value of one line, b, at no allocation
// of its own most of the time. The text and the slice are cut from a slab,
// shared by a few responses and by nothing else. Each response gets its own
// slot, capped so that an append copies it, and text that is never written
// again: a strings.Builder only appends to the bytes behind the strings it
// returned.
func fieldValue(b []byte) []string {
	if len(b) > slabBytes/4 {
		return []string{string(b)}
	}
	s, _ := slabs.Get().(*slab)
	if s == nil || s.n == len(s.slots) || s.text.Cap()-s.text.Len() < len(b) {
		s = new(slab)
		s.text.Grow(slabBytes)
	}
	start := s.text.Len()
	s.text.Write(b)
	v := s.slots[s.n : s.n+1 : s.n+1]
	v[0] = s.text.String()[start:]
	s.n++
	slabs.Put(s)
	return v
}

// merge returns the list members of field values vals, less those naming
// one of f's budgets, followed by mine. vals is the value of a field that
// an outer limiter of the same request has already set. Stacked limiters so
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

// secondsUntil returns the time from now to reset in whole seconds, rounded
// up, and 0 for the zero reset, which is unknown.
func secondsUntil(reset, now time.Time) int64 {
	if reset.IsZero() {
		return 0
	}
	return ceilSeconds(reset.Sub(now))
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// maxBudgetFields bounds the budgets whose fields a budgetFields keeps:
// plans are few, and a BudgetFor that makes up budgets must not grow memory.
const maxBudgetFields = 64

// budgetFields holds the fields of each budget an Options.BudgetFor chose
// for one limiter, built once per budget; past maxBudgetFields budgets, a
// request's fields are built for it alone.
type budgetFields struct {
	name          string
	hideRemaining bool
	legacy        bool
	m             sync.Map // limiter.Budget → *fields
	n             atomic.Int32
}

// newBudgetFields returns the fields of limiter name's budgets, with f
// those of its own budget b.
func newBudgetFields(name string, b limiter.Budget, f *fields, hideRemaining, legacy bool) *budgetFields {
	bf := &budgetFields{name: name, hideRemaining: hideRemaining, legacy: legacy}
	bf.m.Store(b, f)
	bf.n.Store(1)
	return bf
}

// of returns the fields of budget b.
func (bf *budgetFields) of(b limiter.Budget) *fields {
	if f, ok := bf.m.Load(b); ok {
		return f.(*fields)
	}
	f := newFields([]string{bf.name}, []limiter.Budget{b}, bf.hideRemaining, bf.legacy)
	if bf.n.Add(1) <= maxBudgetFields {
		if old, loaded := bf.m.LoadOrStore(b, f); loaded {
			bf.n.Add(-1)
			return old.(*fields)
		}
	} else {
		bf.n.Add(-1)
	}
	return f
}

// Remaining says whether the RateLimit fields tell how many requests are
// left (r, and X-RateLimit-Remaining). The count tells a guesser how to
// pace; Retry-After is sent on a refusal either way.
type Remaining int

const (
	// RemainingUnset, the zero value, is the kind's choice: shown by [New],
	// hidden by the guards of an account ([SignIn]).
	RemainingUnset Remaining = iota
	// RemainingShown sends the requests left.
	RemainingShown
	// RemainingHidden leaves them out.
	RemainingHidden
)

// hidden reports whether r hides the count; unset, it is hide.
func (r Remaining) hidden(hide bool) bool {
	if r == RemainingUnset {
		return hide
	}
	return r == RemainingHidden
}

// Package metrics counts what limiters decide and how their stores answer,
// and publishes the counts through expvar. It never records a key or an
// address: its labels are limiter names, handle prefixes, call names and
// reasons, all chosen by the app.
//
// An Expvar is both a [limiter.Observer] and a [store.Observer]:
//
//	m := metrics.NewExpvar("gatecount")
//	s := memory.New(memory.Options{Store: store.Options{Observer: m}})
//	m.Watch("memory", s)
//	mw, _ := middleware.New(h, budget, middleware.Options{Observer: m})
//
// and /debug/vars (expvar.Handler) then shows, under "gatecount", names in
// lower case with underscores throughout:
//
//	decisions.<limiter>.<outcome>   decisions by outcome (limiter.Outcome)
//	calls.<op>                      store calls by kind
//	unavailable.<reason>            calls answered unavailable, by reason
//	latency_us.le_<bound>           store calls by answer time, cumulative
//	                                buckets; bounds in microseconds, seven
//	                                digits (le_0000100 … le_2000000, le_inf),
//	                                so that they sort as numbers do
//	stores.<name>.<stat>            each watched store's Stats: in_flight,
//	                                queued, waited, max_in_flight,
//	                                breaker_open, entries, max_entries
//
// # Prometheus
//
// The core takes no dependency on Prometheus. Module
// github.com/gatecount/gatecount/metrics/prometheus, of its own, has a
// Collector that is a limiter.Observer, a store.Observer and a
// prometheus.Collector.
//
// # OpenTelemetry
//
// Module github.com/gatecount/gatecount/metrics/otel, of its own too, has
// an Observer that publishes the same figures through the OpenTelemetry
// metrics API.
package metrics

import (
	"expvar"
	"strconv"
	"sync"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// LatencyBounds are the upper bounds, in microseconds, of the latency
// buckets.
var LatencyBounds = []int64{100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 2_000_000}

// BucketName is the name of the latency bucket of bound us (microseconds).
// It is "le_" and the bound in seven digits, so that the buckets sort as
// their bounds do; "le_inf" sorts last.
func BucketName(us int64) string {
	d := strconv.FormatInt(us, 10)
	for len(d) < 7 {
		d = "0" + d
	}
	return "le_" + d
}

// Expvar publishes counts under one expvar.Map. It is safe for concurrent
// use.
type Expvar struct {
	root        *expvar.Map
	decisions   *expvar.Map
	calls       *expvar.Map
	unavailable *expvar.Map
	latency     *expvar.Map
	stores      *expvar.Map
	buckets     []string

	mu      sync.Mutex
	perName map[string]*expvar.Map
}

// NewExpvar publishes a new Expvar under name. Like expvar.Publish, it
// panics if name is already published: it is called once, at start-up, with
// a name the app chooses.
func NewExpvar(name string) *Expvar {
	m := newMaps()
	expvar.Publish(name, m.root)
	return m
}

func newMaps() *Expvar {
	m := &Expvar{
		root:        new(expvar.Map).Init(),
		decisions:   new(expvar.Map).Init(),
		calls:       new(expvar.Map).Init(),
		unavailable: new(expvar.Map).Init(),
		latency:     new(expvar.Map).Init(),
		stores:      new(expvar.Map).Init(),
		perName:     map[string]*expvar.Map{},
	}
	m.root.Set("decisions", m.decisions)
	m.root.Set("calls", m.calls)
	m.root.Set("unavailable", m.unavailable)
	m.root.Set("latency_us", m.latency)
	m.root.Set("stores", m.stores)
	for _, b := range LatencyBounds {
		m.buckets = append(m.buckets, BucketName(b))
	}
	m.buckets = append(m.buckets, "le_inf")
	return m
}

// ObserveDecision counts a decision of the named limiter.
func (m *Expvar) ObserveDecision(name string, o limiter.Outcome) {
	m.mu.Lock()
	per, ok := m.perName[name]
	if !ok {
		per = new(expvar.Map).Init()
		m.perName[name] = per
		m.decisions.Set(name, per)
	}
	m.mu.Unlock()
	per.Add(o.String(), 1)
}

// ObserveCall counts a store call, its answer time and, when the store was
// unavailable, why.
func (m *Expvar) ObserveCall(e store.CallEvent) {
	m.calls.Add(e.Op, 1)
	if e.Reason != 0 {
		m.unavailable.Add(e.Reason.String(), 1)
	}
	us := e.Duration / time.Microsecond
	for i, b := range LatencyBounds {
		if int64(us) <= b {
			m.latency.Add(m.buckets[i], 1)
		}
	}
	m.latency.Add(m.buckets[len(LatencyBounds)], 1)
}

// Watch publishes s's Stats under stores.<name>, read when the variables
// are, each under its name in lower case with underscores.
func (m *Expvar) Watch(name string, s *store.Store) {
	m.stores.Set(name, expvar.Func(func() any { return StatsMap(s.Stats()) }))
}

// StatsMap returns st by the names Watch publishes it under.
func StatsMap(st store.Stats) map[string]any {
	return map[string]any{
		"in_flight":     st.InFlight,
		"queued":        st.Queued,
		"waited":        st.Waited,
		"max_in_flight": st.MaxInFlight,
		"breaker_open":  st.BreakerOpen,
		"entries":       st.Entries,
		"max_entries":   st.MaxEntries,
		"members":       st.Members,
	}
}

// Map returns the expvar.Map the counts are published under.
func (m *Expvar) Map() *expvar.Map { return m.root }

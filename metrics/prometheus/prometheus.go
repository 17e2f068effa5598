// Package prometheus publishes what gatecount's limiters decide and how
// their stores answer as Prometheus metrics. It is a module of its own, so
// that gatecount's core never depends on the Prometheus client.
//
// A Collector is a limiter.Observer, a store.Observer and a
// prometheus.Collector:
//
//	c := prometheus.New("gatecount")
//	reg.MustRegister(c) // or client_golang's prometheus.MustRegister(c)
//	s := memory.New(memory.Options{Store: store.Options{Observer: c}})
//	c.Watch("memory", s)
//	mw, err := middleware.New(h, budget, middleware.Options{Observer: c})
//
// The metrics, under the namespace given to New:
//
//	<ns>_decisions_total{limiter,outcome}              counter: decisions by outcome (limiter.Outcome)
//	<ns>_store_call_duration_seconds{op,result}        histogram: store calls by kind; result is ok or why the store was unavailable
//	<ns>_store_in_flight{store}                        gauge: calls running in the store
//	<ns>_store_queued{store}                           gauge: calls waiting for a slot
//	<ns>_store_waited_total{store}                     counter: calls that have waited for a slot
//	<ns>_store_max_in_flight{store}                    gauge: the in-flight bound
//	<ns>_store_breaker_open{store}                     gauge: 1 while a breaker is open
//	<ns>_store_entries{store}, <ns>_store_max_entries{store}   gauges: live entries against the bound, when the store tells them
//
// Labels are limiter names, handle kinds, reasons and store names the app
// chooses: never a key or an address.
package prometheus

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Buckets are the upper bounds, in seconds, of the store call histogram.
var Buckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2}

// Collector counts decisions and store calls, and reads the Stats of the
// stores it watches when scraped. It is safe for concurrent use.
type Collector struct {
	decisions *prometheus.CounterVec
	calls     *prometheus.HistogramVec

	inFlight, queued, waited, maxInFlight, breaker, entries, maxEntries, members *prometheus.Desc

	mu     sync.Mutex
	stores map[string]*store.Store
}

// New returns a Collector whose metrics are named under namespace
// ("gatecount", say).
func New(namespace string) *Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "store", name), help, []string{"store"}, nil)
	}
	return &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "decisions_total",
			Help: "Decisions of each limiter, by outcome.",
		}, []string{"limiter", "outcome"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "store", Name: "call_duration_seconds",
			Help:    "Store calls by kind and result (ok, or why the store was unavailable), by how long the caller waited.",
			Buckets: Buckets,
		}, []string{"op", "result"}),
		inFlight:    desc("in_flight", "Calls running in the store now."),
		queued:      desc("queued", "Calls waiting for a slot under the in-flight bound now."),
		waited:      desc("waited_total", "Calls that have waited for a slot since the store opened."),
		maxInFlight: desc("max_in_flight", "The store's bound on calls in flight."),
		members:     desc("members", "The instances sharing the store, as this one last counted them."),
		breaker:     desc("breaker_open", "1 while a breaker of the store is open."),
		entries:     desc("entries", "Live entries the store holds."),
		maxEntries:  desc("max_entries", "The store's bound on live entries."),
		stores:      map[string]*store.Store{},
	}
}

// ObserveDecision counts a decision of the named limiter.
func (c *Collector) ObserveDecision(name string, o limiter.Outcome) {
	c.decisions.WithLabelValues(name, o.String()).Inc()
}

// ObserveCall counts a store call by its kind, result and answer time.
func (c *Collector) ObserveCall(e store.CallEvent) {
	result := "ok"
	if e.Reason != 0 {
		result = e.Reason.String()
	}
	c.calls.WithLabelValues(e.Op, result).Observe(e.Duration.Seconds())
}

// Watch reads s's Stats, as the store named name, at every scrape.
func (c *Collector) Watch(name string, s *store.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stores[name] = s
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.calls.Describe(ch)
	for _, d := range []*prometheus.Desc{c.inFlight, c.queued, c.waited, c.maxInFlight, c.breaker, c.entries, c.maxEntries, c.members} {
		ch <- d
	}
}

// Collect sends the current value of every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.calls.Collect(ch)
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, s := range c.stores {
		st := s.Stats()
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		gauge(c.inFlight, float64(st.InFlight))
		gauge(c.queued, float64(st.Queued))
		ch <- prometheus.MustNewConstMetric(c.waited, prometheus.CounterValue, float64(st.Waited), name)
		gauge(c.maxInFlight, float64(st.MaxInFlight))
		gauge(c.members, float64(st.Members))
		open := 0.0
		if st.BreakerOpen {
			open = 1
		}
		gauge(c.breaker, open)
		if st.Entries >= 0 {
			gauge(c.entries, float64(st.Entries))
		}
		if st.MaxEntries >= 0 {
			gauge(c.maxEntries, float64(st.MaxEntries))
		}
	}
}

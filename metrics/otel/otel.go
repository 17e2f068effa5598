// Package otel publishes what gatecount's limiters decide and how their
// stores answer through the OpenTelemetry metrics API. It is a module of its
// own, so that gatecount's core never depends on OpenTelemetry.
//
// An Observer is a limiter.Observer and a store.Observer:
//
//	o, err := otel.New(meterProvider, "gatecount")
//	s := memory.New(memory.Options{Store: store.Options{Observer: o}})
//	o.Watch("memory", s)
//	mw, err := middleware.New(h, budget, middleware.Options{Observer: o})
//
// The instruments, under the namespace given to New:
//
//	<ns>.decisions{limiter,outcome}           counter, {decision}: decisions by outcome (limiter.Outcome)
//	<ns>.store.call.duration{op,result}       histogram, s: store calls by kind; result is ok or why the store was unavailable
//	<ns>.store.in_flight{store}               updowncounter, {call}: calls running in the store
//	<ns>.store.in_flight.limit{store}         gauge, {call}: the in-flight bound
//	<ns>.store.queued{store}                  updowncounter, {call}: calls waiting for a slot
//	<ns>.store.waited{store}                  counter, {call}: calls that have waited for a slot
//	<ns>.store.breaker.open{store}            gauge, 1: 1 while a breaker is open
//	<ns>.store.entries{store}                 updowncounter, {entry}: live entries, when the store tells them
//	<ns>.store.entries.limit{store}           gauge, {entry}: the bound on live entries, when the store tells it
//	<ns>.store.members{store}                 gauge, {instance}: instances sharing the store
//
// The store figures are observable instruments, read from Store.Stats at
// each collection. Attributes are limiter names, handle kinds, reasons and
// store names the app chooses: never a key or an address.
package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/metrics"
	"github.com/gatecount/gatecount/store"
)

// ScopeName is the instrumentation scope of the Observer's meter.
const ScopeName = "github.com/gatecount/gatecount/metrics/otel"

// Buckets are the upper bounds, in seconds, of the store call histogram:
// metrics.LatencyBounds.
var Buckets = bucketsOf(metrics.LatencyBounds)

func bucketsOf(us []int64) []float64 {
	b := make([]float64, len(us))
	for i, v := range us {
		b[i] = float64(v) / 1e6
	}
	return b
}

// Observer counts decisions and store calls, and reads the Stats of the
// stores it watches at each collection. It is safe for concurrent use.
type Observer struct {
	decisions metric.Int64Counter
	calls     metric.Float64Histogram

	inFlight, queued, entries                 metric.Int64ObservableUpDownCounter
	waited                                    metric.Int64ObservableCounter
	maxInFlight, breaker, maxEntries, members metric.Int64ObservableGauge

	reg       metric.Registration
	closeOnce sync.Once
	closeErr  error

	attrsMu       sync.RWMutex
	decisionAttrs map[decisionKey][]metric.AddOption
	callAttrs     map[callKey][]metric.RecordOption

	mu     sync.Mutex
	stores map[string]*store.Store
}

type decisionKey struct {
	limiter string
	outcome limiter.Outcome
}

type callKey struct {
	op     string
	reason store.Reason
}

// New returns an Observer whose instruments come from a meter of mp (the
// global MeterProvider when mp is nil), named under namespace ("gatecount",
// say). It fails when an instrument cannot be made, a bad namespace say.
func New(mp metric.MeterProvider, namespace string) (*Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	name := func(n string) string {
		if namespace == "" {
			return n
		}
		return namespace + "." + n
	}
	o := &Observer{
		stores:        map[string]*store.Store{},
		decisionAttrs: map[decisionKey][]metric.AddOption{},
		callAttrs:     map[callKey][]metric.RecordOption{},
	}
	var errs []error
	check := func(n string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("metrics/otel: instrument %s: %w", name(n), err))
		}
	}
	var err error
	o.decisions, err = m.Int64Counter(name("decisions"), metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of each limiter, by outcome."))
	check("decisions", err)
	o.calls, err = m.Float64Histogram(name("store.call.duration"), metric.WithUnit("s"),
		metric.WithDescription("Store calls by kind and result (ok, or why the store was unavailable), by how long the caller waited."),
		metric.WithExplicitBucketBoundaries(Buckets...))
	check("store.call.duration", err)
	upDown := func(n, unit, desc string) metric.Int64ObservableUpDownCounter {
		i, err := m.Int64ObservableUpDownCounter(name(n), metric.WithUnit(unit), metric.WithDescription(desc))
		check(n, err)
		return i
	}
	gauge := func(n, unit, desc string) metric.Int64ObservableGauge {
		i, err := m.Int64ObservableGauge(name(n), metric.WithUnit(unit), metric.WithDescription(desc))
		check(n, err)
		return i
	}
	o.inFlight = upDown("store.in_flight", "{call}", "Calls running in the store now.")
	o.queued = upDown("store.queued", "{call}", "Calls waiting for a slot under the in-flight bound now.")
	o.entries = upDown("store.entries", "{entry}", "Live entries the store holds.")
	o.waited, err = m.Int64ObservableCounter(name("store.waited"), metric.WithUnit("{call}"),
		metric.WithDescription("Calls that have waited for a slot since the store opened."))
	check("store.waited", err)
	o.maxInFlight = gauge("store.in_flight.limit", "{call}", "The store's bound on calls in flight.")
	o.breaker = gauge("store.breaker.open", "1", "1 while a breaker of the store is open.")
	o.maxEntries = gauge("store.entries.limit", "{entry}", "The store's bound on live entries.")
	o.members = gauge("store.members", "{instance}", "The instances sharing the store, as this one last counted them.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o.reg, err = m.RegisterCallback(o.observe,
		o.inFlight, o.queued, o.entries, o.waited, o.maxInFlight, o.breaker, o.maxEntries, o.members)
	if err != nil {
		return nil, fmt.Errorf("metrics/otel: registering the store callback: %w", err)
	}
	return o, nil
}

// ObserveDecision counts a decision of the named limiter.
func (o *Observer) ObserveDecision(name string, out limiter.Outcome) {
	attrs := cached(o, o.decisionAttrs, decisionKey{name, out}, func() []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("limiter", name), attribute.String("outcome", out.String())))}
	})
	o.decisions.Add(context.Background(), 1, attrs...)
}

// ObserveCall records a store call by its kind, result and answer time.
func (o *Observer) ObserveCall(e store.CallEvent) {
	attrs := cached(o, o.callAttrs, callKey{e.Op, e.Reason}, func() []metric.RecordOption {
		result := "ok"
		if e.Reason != 0 {
			result = e.Reason.String()
		}
		return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("op", e.Op), attribute.String("result", result)))}
	})
	o.calls.Record(context.Background(), e.Duration.Seconds(), attrs...)
}

// cached returns the measurement options of k in m, made by mk the first
// time.
func cached[K comparable, V any](o *Observer, m map[K]V, k K, mk func() V) V {
	o.attrsMu.RLock()
	attrs, ok := m[k]
	o.attrsMu.RUnlock()
	if ok {
		return attrs
	}
	o.attrsMu.Lock()
	defer o.attrsMu.Unlock()
	if attrs, ok = m[k]; !ok {
		attrs = mk()
		m[k] = attrs
	}
	return attrs
}

// Watch reads s's Stats, as the store named name, at every collection. A
// second Watch with the same name replaces the first.
func (o *Observer) Watch(name string, s *store.Store) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stores[name] = s
}

// Close stops reading the watched stores; decisions and calls are still
// counted. It is safe to call more than once.
func (o *Observer) Close() error {
	o.closeOnce.Do(func() {
		if err := o.reg.Unregister(); err != nil {
			o.closeErr = fmt.Errorf("metrics/otel: unregistering the store callback: %w", err)
		}
	})
	return o.closeErr
}

func (o *Observer) observe(_ context.Context, ob metric.Observer) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, s := range o.stores {
		st := s.Stats()
		attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("store", name)))
		ob.ObserveInt64(o.inFlight, int64(st.InFlight), attrs)
		ob.ObserveInt64(o.queued, int64(st.Queued), attrs)
		ob.ObserveInt64(o.waited, st.Waited, attrs)
		ob.ObserveInt64(o.maxInFlight, int64(st.MaxInFlight), attrs)
		ob.ObserveInt64(o.members, int64(st.Members), attrs)
		open := int64(0)
		if st.BreakerOpen {
			open = 1
		}
		ob.ObserveInt64(o.breaker, open, attrs)
		if st.Entries >= 0 {
			ob.ObserveInt64(o.entries, int64(st.Entries), attrs)
		}
		if st.MaxEntries >= 0 {
			ob.ObserveInt64(o.maxEntries, int64(st.MaxEntries), attrs)
		}
	}
	return nil
}

// Package benchload runs a benchmark's operation from several goroutines at
// once and reports what a store's benchmarks compare: throughput and the
// latency of one call.
package benchload

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run calls op b.N times in all from conc goroutines, each with a random
// source of its own, and reports ops/s and the p50 and p99 of one call in
// microseconds (p50-µs, p99-µs), with allocations. The first error op
// returns fails the benchmark.
func Run(b *testing.B, conc int, op func(r *rand.Rand) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Bool
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range conc {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for !failed.Load() && next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(r); err != nil {
					errs[g] = err
					failed.Store(true)
					return
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

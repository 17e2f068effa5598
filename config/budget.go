package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// budgetWant says what a budget variable takes, for its errors.
var budgetWant = fmt.Sprintf("a whole number from 1 to %d, the limit, optionally followed by the algorithm: "+
	"5 (a fixed window), 5,sliding (a sliding window, limit at most %d), 5,bucket (a token bucket) or 5,bucket:20 (a token bucket of burst 20)",
	limiter.MaxLimit, store.MaxSlidingLimit)

// parseBudget reads a budget variable's value into def's window: LIMIT,
// then optionally a comma and the algorithm, "fixed", "sliding", "bucket"
// or "bucket:BURST" (case aside, spaces around each part allowed). The
// budget it returns passes limiter.Budget.Validate; anything else is an
// error saying why.
func parseBudget(v string, def limiter.Budget) (limiter.Budget, error) {
	limit, alg, hasAlg := strings.Cut(v, ",")
	n, err := strconv.Atoi(strings.TrimSpace(limit))
	if err != nil || n < 1 || n > limiter.MaxLimit {
		return def, fmt.Errorf("%s", budgetWant)
	}
	b := limiter.Budget{Limit: n, Window: def.Window}
	if hasAlg {
		name, burst, hasBurst := strings.Cut(strings.TrimSpace(alg), ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "fixed":
			b.Algorithm = limiter.FixedWindow
		case "sliding":
			b.Algorithm = limiter.SlidingWindow
		case "bucket":
			b.Algorithm = limiter.TokenBucket
		default:
			return def, fmt.Errorf("%s", budgetWant)
		}
		if hasBurst {
			m, err := strconv.Atoi(strings.TrimSpace(burst))
			if err != nil || m < 1 || m > limiter.MaxLimit || b.Algorithm != limiter.TokenBucket {
				return def, fmt.Errorf("%s", budgetWant)
			}
			b.Burst = m
		}
	}
	if err := b.Validate(); err != nil {
		return def, fmt.Errorf("%s (%v)", budgetWant, err)
	}
	return b, nil
}

// formatBudget is the value of a budget variable that parseBudget reads as
// b, in b's window.
func formatBudget(b limiter.Budget) string {
	s := strconv.Itoa(b.Limit)
	switch {
	case b.Algorithm == limiter.TokenBucket && b.Burst > 0:
		return s + ",bucket:" + strconv.Itoa(b.Burst)
	case b.Algorithm != limiter.FixedWindow:
		return s + "," + b.Algorithm.String()
	}
	return s
}

package store

// Log kinds: the stable "kind" attribute of the logs a store writes. Every
// kind of gatecount reads limit-AREA-EVENT; a store's area is "store". The
// backends log these, and kinds of their own in their kinds.go.
const (
	// KindFilling is logged when a store reaches 80% of its [Bound], at
	// most once a minute.
	KindFilling = "limit-store-filling"
	// KindFull is logged when a full store answers a new key unavailable,
	// at most once a minute.
	KindFull = "limit-store-full"
	// KindDown is logged when a handle's breaker opens: its calls are
	// answered unavailable at once until a probe succeeds.
	KindDown = "limit-store-down"
	// KindRecovered is logged when an open breaker closes again: the store
	// answers that handle's calls once more.
	KindRecovered = "limit-store-recovered"
	// KindSweepFailed is logged when a backend's background sweep fails.
	// Expired entries stay until the next sweep, which tries again.
	KindSweepFailed = "limit-store-sweep-failed"
)

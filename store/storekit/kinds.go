package storekit

// Log kinds: the stable "kind" attribute of the logs the module's stores
// write. Every kind of gatecount reads limit-AREA-EVENT; a store's area is
// "store". The guard's own kinds are in package store's kinds.go, and each
// backend's in its kinds.go.
const (
	// KindFilling is logged when a store reaches 80% of its [Bound], at
	// most once a minute.
	KindFilling = "limit-store-filling"
	// KindFull is logged when a full store answers a new key unavailable,
	// at most once a minute.
	KindFull = "limit-store-full"
	// KindSweepFailed is logged when a backend's background sweep fails.
	// Expired entries stay until the next sweep, which tries again.
	KindSweepFailed = "limit-store-sweep-failed"
)

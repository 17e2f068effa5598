package store

// Log kinds: the stable "kind" attribute of the logs the guard writes.
// Every kind of gatecount reads limit-AREA-EVENT; a store's area is
// "store". The kinds the module's stores share are in package
// store/storekit, and each backend's in its kinds.go.
const (
	// kindDown is logged when a handle's breaker opens: its calls are
	// answered unavailable at once until a probe succeeds.
	kindDown = "limit-store-down"
	// kindRecovered is logged when an open breaker closes again: the store
	// answers that handle's calls once more.
	kindRecovered = "limit-store-recovered"
)

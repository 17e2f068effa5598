package postgres

// Log kinds: the stable "kind" attribute of the logs this store writes,
// besides those every store of the module logs (limit-store-sweep-failed
// among them).
const (
	// KindCountFailed is logged when the background count of live rows
	// fails. New keys are counted exactly until it succeeds.
	KindCountFailed = "limit-store-count-failed"
)

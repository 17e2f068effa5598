package demo

// Log kinds of the demo application's own lines. They follow gatecount's
// AREA-EVENT shape, without its "limit-" prefix: they are the app's.
const (
	// KindResetSent is logged when a password reset code is sent (here,
	// logged with its account instead of mailed).
	KindResetSent = "password-reset-sent"
	// KindRecoveryFailed is logged when a completed password reset could
	// not be reported to the sign-in guard.
	KindRecoveryFailed = "password-reset-recovery-failed"
	// KindListening is logged when the server listens, with its address.
	KindListening = "server-listening"
	// KindStopped is logged when the server has shut down.
	KindStopped = "server-stopped"
)

package middleware

import "net/http"

type outcomeKey struct{}

type said int

const (
	saidNothing said = iota
	saidSuccess
	saidFailure
)

// outcome is what a guard and the handler it wraps tell each other: the
// handler's report, and the account the guard counted.
type outcome struct {
	said    said
	account string
}

// ReportSuccess tells a Middleware with CountFailures that the request it
// wrapped succeeded, so that its attempt is refunded whatever the status. It
// reports whether such a middleware wraps r; the last report wins.
func ReportSuccess(r *http.Request) bool { return report(r, saidSuccess) }

// ReportFailure tells a Middleware with CountFailures that the request it
// wrapped failed, so that its attempt stays counted whatever the status. It
// reports whether such a middleware wraps r; the last report wins.
func ReportFailure(r *http.Request) bool { return report(r, saidFailure) }

func report(r *http.Request, s said) bool {
	o, ok := r.Context().Value(outcomeKey{}).(*outcome)
	if ok {
		o.said = s
	}
	return ok
}

// Account returns the account the guard wrapping r counted the request
// under: the normalised account name of [SignIn], the normalised destination
// of Send. It reports false when no such guard wraps r. A handler must use
// it rather than read the account from the body again: then the account it
// checks, or sends to, is always the one that was counted.
func Account(r *http.Request) (string, bool) {
	o, ok := r.Context().Value(outcomeKey{}).(*outcome)
	if !ok || o.account == "" {
		return "", false
	}
	return o.account, true
}

// defaultSuccess is the default Success: a status below 400.
func defaultSuccess(status int) bool { return status < 400 }

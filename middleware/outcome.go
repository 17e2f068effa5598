package middleware

import "net/http"

type outcomeKey struct{}

type said int

const (
	saidNothing said = iota
	saidSuccess
	saidFailure
)

type outcome struct{ said said }

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

// defaultSuccess is the default Success: a status below 400.
func defaultSuccess(status int) bool { return status < 400 }

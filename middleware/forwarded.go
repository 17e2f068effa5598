package middleware

import (
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/gatecount/gatecount/keyfunc"
)

// forwardedWarning warns, once, of a forwarding header reaching a per-IP
// limiter that trusts no proxy. The zero value, or one built for a limiter
// that trusts a proxy, never warns.
type forwardedWarning struct {
	on   bool
	done atomic.Bool
	log  *slog.Logger
}

func newForwardedWarning(o keyfunc.IPOptions, log *slog.Logger) *forwardedWarning {
	return &forwardedWarning{on: len(o.TrustedProxies) == 0, log: log}
}

// check warns if r carries a forwarding header and no warning was logged
// yet.
func (f *forwardedWarning) check(r *http.Request) {
	if !f.on || f.done.Load() {
		return
	}
	header := ""
	switch {
	case len(r.Header["X-Forwarded-For"]) > 0:
		header = "X-Forwarded-For"
	case len(r.Header["Forwarded"]) > 0:
		header = "Forwarded"
	default:
		return
	}
	if f.done.Swap(true) {
		return
	}
	f.log.Warn("a request with a "+header+" header reached a per-IP limiter that trusts no proxy: "+
		"it is keyed by the address it came from, and behind a proxy every client shares the proxy's budget. "+
		"List your proxies' networks in IPOptions.TrustedProxies (TRUSTED_PROXIES); "+
		"this is logged once",
		"kind", KindForwardedUntrusted, "header", header)
}

package demo

import (
	"crypto/subtle"
	"net/http"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
)

// codeFailed is the answer to a wrong code, whatever the cause; the guard
// gives it to attempts whose address it cannot read.
func codeFailed(w http.ResponseWriter) {
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid code"})
}

// unknownCode is compared against for an address with no code, so that it
// takes the same work as one with a code.
const unknownCode = "no code was sent"

// VerifyHandler checks the code POST /password-reset logged for an address.
// It answers 200 once, and then the code is spent: a reset can no longer
// complete with it. It answers 401 for a wrong or expired code, an unknown
// address or one with no code, alike. The address is the one the code guard
// counted.
func (a *App) VerifyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := credentials(r, "email", "code")
		email, ok := account(r, c, "email", keyfunc.NormalizeEmail)
		a.mu.Lock()
		a.codeChecks++
		code, sent := a.codes[email]
		sent = sent && ok && time.Now().Before(code.expires)
		want := code.code
		if !sent {
			want = unknownCode
		}
		right := subtle.ConstantTimeCompare([]byte(c["code"]), []byte(want)) == 1 && sent
		if right {
			delete(a.codes, email) // single use
		}
		a.mu.Unlock()
		if !right {
			middleware.ReportFailure(r)
			codeFailed(w)
			return
		}
		middleware.ReportSuccess(r)
		writeJSON(w, http.StatusOK, map[string]string{"status": "verified"})
	})
}

// CodeChecks returns how many attempts reached POST /verify's code check.
func (a *App) CodeChecks() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.codeChecks
}

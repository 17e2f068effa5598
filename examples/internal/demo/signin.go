package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/middleware"
)

// DefaultDemoUsers are the demo's accounts when DEMO_USERS is unset. Each
// user name doubles as the address NAME@example.com for password resets.
const DefaultDemoUsers = "alice:correct-horse,bob:battery-staple"

type user struct {
	name   string
	digest [sha256.Size]byte
}

// parseUsers reads "name:password,name:password".
func parseUsers(s string) (map[string]user, error) {
	out := map[string]user{}
	for _, pair := range strings.Split(s, ",") {
		name, password, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || name == "" || password == "" {
			return nil, fmt.Errorf("DEMO_USERS: want name:password pairs separated by commas, got %q", pair)
		}
		canon, err := keyfunc.NormalizeUsername(name)
		if err != nil {
			return nil, fmt.Errorf("DEMO_USERS: user name %q: %w", name, err)
		}
		out[canon] = user{name: canon, digest: sha256.Sum256([]byte(password))}
	}
	return out, nil
}

// unknownDigest is compared against for unknown users, so that they take the
// same work as known ones.
var unknownDigest = sha256.Sum256([]byte("no such user"))

// credentials reads fields from a form, multipart or JSON body, with the
// reader the guards use, so that a field means the same to both.
func credentials(r *http.Request, fields ...string) map[string]string {
	out := map[string]string{}
	if vs, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, fields...); err == nil {
		for i, f := range fields {
			out[f] = vs[i]
		}
	}
	return out
}

// account returns the account a request names: the one the guard counted
// it under (middleware.Account), or, unguarded, the normalised username
// field.
func account(r *http.Request, c map[string]string, field string, normalize func(string) (string, error)) (string, bool) {
	if a, ok := middleware.Account(r); ok {
		return a, true
	}
	a, err := normalize(c[field])
	return a, err == nil && a != ""
}

// signInFailed is the answer to a failed sign-in, whatever the cause; the
// guard gives it to attempts whose account it cannot read.
func signInFailed(w http.ResponseWriter) {
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid username or password"})
}

// LoginHandler signs a demo user in: 200 with a session cookie on success,
// 401 on failure. The account is the one the sign-in guard counted. An
// unknown user is answered exactly like a wrong password, after the same
// work.
func (a *App) LoginHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := credentials(r, "username", "password")
		name, ok := account(r, c, "username", keyfunc.NormalizeUsername)
		a.mu.Lock()
		a.passwordChecks++
		if ok {
			a.checksFor[name]++
		}
		u, known := a.users[name]
		a.mu.Unlock()
		want := unknownDigest
		if ok && known {
			want = u.digest
		}
		got := sha256.Sum256([]byte(c["password"]))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok || !known {
			middleware.ReportFailure(r)
			signInFailed(w)
			return
		}
		middleware.ReportSuccess(r)
		var id [16]byte
		rand.Read(id[:])
		http.SetCookie(w, &http.Cookie{Name: "session", Value: hex.EncodeToString(id[:]), Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
		a.mu.Lock()
		a.signIns[u.name]++
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"status": "signed in"})
	})
}

// PasswordResetHandler "sends" a reset code to a demo user's address
// (NAME@example.com), by logging it with the account's name, and answers
// 202 Accepted whether or not the address is known. The address is the one
// the reset guard counted.
func (a *App) PasswordResetHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		email, ok := account(r, credentials(r, "email"), "email", keyfunc.NormalizeEmail)
		if local, domain, _ := strings.Cut(email, "@"); ok && domain == "example.com" {
			a.mu.Lock()
			_, known := a.users[local]
			var code string
			if known {
				var b [4]byte
				rand.Read(b[:])
				code = hex.EncodeToString(b[:])
				a.codesSent[email]++
				a.codes[email] = resetCode{code: code, expires: time.Now().Add(resetCodeLifetime)}
			}
			a.mu.Unlock()
			if known {
				a.Log.Info("password reset code sent", "kind", KindResetSent, "account", local, "code", code)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(middleware.DefaultAcceptedBody))
	})
}

// resetCodeLifetime is how long a reset code may complete a reset.
const resetCodeLifetime = 15 * time.Minute

// resetCode is a reset code sent, and when it stops working.
type resetCode struct {
	code    string
	expires time.Time
}

// resetCompleteFailed is the answer to a reset completion whose code is
// wrong, used or expired, or whose address is unknown: the same for all.
func resetCompleteFailed(w http.ResponseWriter) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid or expired code"})
}

// PasswordResetCompleteHandler completes a password reset: the fields
// email, code (the code PasswordResetHandler logged) and password set the
// account's new password, use the code up, and tell the sign-in guard of
// the recovery (SignInGuard.Recovered), which lifts its cap on
// consecutive failures. It answers 200, or 400 for any code that does not
// complete a reset. Codes and passwords live in this instance's memory:
// complete a reset on the instance that sent its code.
func (a *App) PasswordResetCompleteHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := credentials(r, "email", "code", "password")
		email, err := keyfunc.NormalizeEmail(c["email"])
		local, domain, _ := strings.Cut(email, "@")
		a.mu.Lock()
		sent, found := a.codes[email]
		match := subtle.ConstantTimeCompare([]byte(sent.code), []byte(c["code"])) == 1
		_, known := a.users[local]
		ok := err == nil && domain == "example.com" && known && found && match && time.Now().Before(sent.expires) && c["password"] != ""
		if ok {
			delete(a.codes, email) // used up
			a.users[local] = user{name: local, digest: sha256.Sum256([]byte(c["password"]))}
		}
		a.mu.Unlock()
		if !ok {
			middleware.ReportFailure(r) // a wrong code is a failure of the code guard
			resetCompleteFailed(w)
			return
		}
		middleware.ReportSuccess(r)
		var addrs []netip.Addr
		if addr, err := a.ip.ClientAddr(r); err == nil {
			addrs = append(addrs, addr)
		}
		if err := a.Login.Recovered(context.WithoutCancel(r.Context()), local, addrs...); err != nil {
			a.Log.Error("recovery not recorded", "kind", KindRecoveryFailed, "err", err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "password changed"})
	})
}

// PasswordChecks returns how many sign-in attempts reached the password
// check.
func (a *App) PasswordChecks() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.passwordChecks
}

// PasswordChecksFor returns how many sign-in attempts naming account (as
// normalised) reached the password check.
func (a *App) PasswordChecksFor(account string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checksFor[account]
}

// SignIns returns how many times user signed in.
func (a *App) SignIns(user string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.signIns[user]
}

// CodesSent returns how many reset codes went to email.
func (a *App) CodesSent(email string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.codesSent[email]
}

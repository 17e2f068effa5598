package demo

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

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
		a.mu.Unlock()
		u, known := a.users[name]
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
			if _, known := a.users[local]; known {
				var code [4]byte
				rand.Read(code[:])
				a.mu.Lock()
				a.codesSent[email]++
				a.codes[email] = hex.EncodeToString(code[:])
				a.mu.Unlock()
				a.Log.Info("password reset code sent", "kind", "password-reset-sent", "account", local, "code", hex.EncodeToString(code[:]))
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(middleware.DefaultAcceptedBody))
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

package middleware

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/keyfunc"
)

// The media types of a body, as a browser or a script sends them.
const (
	ctForm      = "application/x-www-form-urlencoded"
	ctJSON      = "application/json"
	ctMultipart = "multipart/form-data; boundary=B"
)

func bodyRequest(method, contentType, body string) *http.Request {
	r := httptest.NewRequest(method, "/signin", strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

// bodyFields reads an account and a secret in one reading; the secret may be
// longer than an account, is "" when absent, and is never in an error.
func TestBodyFieldsSecret(t *testing.T) {
	long := strings.Repeat("s", 4*keyfunc.DefaultMaxValueBytes)
	read := bodyFields("username", "password", keyfunc.BodyOptions{})
	for _, tc := range []struct {
		name, ct, body   string
		account, secret  string
		wantErr          error
		mustNotMentionPw string
	}{
		{name: "form", ct: ctForm, body: "username=alice&password=" + long, account: "alice", secret: long},
		{name: "json", ct: ctJSON, body: `{"username":"alice","password":"x y"}`, account: "alice", secret: "x y"},
		{name: "absent secret", ct: ctForm, body: "username=alice", account: "alice"},
		{name: "empty secret", ct: ctForm, body: "username=alice&password=", account: "alice"},
		{name: "secret twice", ct: ctForm, body: "username=alice&password=hunter2&PassWord=hunter3", wantErr: keyfunc.ErrMalformedBody, mustNotMentionPw: "hunter"},
		{name: "secret not a string", ct: ctJSON, body: `{"username":"alice","password":12345678}`, wantErr: keyfunc.ErrMalformedBody, mustNotMentionPw: "12345678"},
		{name: "no account", ct: ctForm, body: "password=hunter2", wantErr: keyfunc.ErrNoKey, mustNotMentionPw: "hunter2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bodyRequest(http.MethodPost, tc.ct, tc.body)
			account, secret, err := read(r)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, keyfunc.ErrNoKey) || account != "" || secret != "" {
					t.Fatalf("= %q, %q, %v; want %v", account, secret, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), tc.mustNotMentionPw) {
					t.Fatalf("error %q holds the secret", err)
				}
				return
			}
			if err != nil || account != tc.account || secret != tc.secret {
				t.Fatalf("= %q, %.20q, %v; want %q, %.20q", account, secret, err, tc.account, tc.secret)
			}
			if rest, _ := io.ReadAll(r.Body); string(rest) != tc.body {
				t.Fatal("body not restored")
			}
		})
	}
}

// FuzzBodyFieldsSecret checks the one reading of an account and a password
// against the readers of each: whenever it names both, bodyField names the
// same account and keyfunc.BodyFields the same two values; whenever both of
// those read the body, so does it.
func FuzzBodyFieldsSecret(f *testing.F) {
	f.Add(uint8(0), "username=alice&password=x")
	f.Add(uint8(0), "username=alice&password=x&PASSWORD=y")
	f.Add(uint8(0), "username=alice&password=")
	f.Add(uint8(1), `{"username":"alice","password":"x"}`)
	f.Add(uint8(1), `{"username":"alice","password":1}`)
	f.Add(uint8(2), "--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nalice\r\n--B\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nx\r\n--B--\r\n")
	opts := keyfunc.BodyOptions{MaxBytes: 512}
	read := bodyFields("username", "password", opts)
	f.Fuzz(func(t *testing.T, kind uint8, body string) {
		ct := [...]string{ctForm, ctJSON, ctMultipart}[kind%3]
		r := bodyRequest(http.MethodPost, ct, body)
		account, password, err := read(r)
		rest, rerr := io.ReadAll(r.Body)
		if rerr != nil || string(rest) != body {
			t.Fatalf("body not restored: %q, %v", rest, rerr)
		}
		if err != nil && (!errors.Is(err, keyfunc.ErrNoKey) || account != "" || password != "") {
			t.Fatalf("bodyFields = %q, %q, %v", account, password, err)
		}
		one, oneErr := bodyField("username", opts)(bodyRequest(http.MethodPost, ct, body))
		both, bothErr := keyfunc.BodyFields(bodyRequest(http.MethodPost, ct, body), keyfunc.BodyOptions{MaxBytes: 512, MaxValueBytes: 512}, "username", "password")
		switch {
		case err == nil && (oneErr != nil || one != account):
			t.Fatalf("account %q, bodyField %q, %v", account, one, oneErr)
		case err == nil && (bothErr != nil || both[0] != account || both[1] != password):
			t.Fatalf("account %q and password %q, BodyFields %q, %v", account, password, both, bothErr)
		case err != nil && oneErr == nil && bothErr == nil:
			t.Fatalf("bodyFields failed (%v) where bodyField and keyfunc.BodyFields read the body", err)
		}
	})
}

package middleware

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-device")

func newTestDevices(t *testing.T, o DeviceOptions, now *time.Time) *devices {
	t.Helper()
	v, err := newDevices(o)
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return *now }
	return v
}

func TestDeviceTokenSignVerify(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := newTestDevices(t, DeviceOptions{Secret: testSecret, Lifetime: time.Hour}, &now)
	token, exp := v.sign("alice")
	if !exp.Equal(now.Add(time.Hour)) {
		t.Errorf("expiry %v, want %v", exp, now.Add(time.Hour))
	}
	id, ok := v.verify(token, "alice")
	if !ok || len(id.id) != 2*deviceNonce || !id.issued.Equal(now) {
		t.Fatalf("verify(own token) = %+v, %v; want a device issued %v", id, ok, now)
	}
	if id2, _ := v.verify(token, "alice"); id2 != id {
		t.Errorf("one token, two device IDs: %+v %+v", id, id2)
	}
	other, _ := v.sign("alice")
	if id3, ok := v.verify(other, "alice"); !ok || id3.id == id.id {
		t.Errorf("a second token has device %+v (ok %v), the first %+v: want a device of its own", id3, ok, id)
	}
	// A version 1 token, of earlier releases, holds its expiry: it verifies
	// until then, issued at the zero Time, before any recovery.
	b := make([]byte, deviceBytes)
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:9], uint64(now.Add(time.Minute).Unix()))
	copy(b[9+deviceNonce:], v.mac(b[:9+deviceNonce], "alice"))
	v1 := base64.RawURLEncoding.EncodeToString(b)
	if d, ok := v.verify(v1, "alice"); !ok || !d.issued.IsZero() {
		t.Errorf("version 1 token: %+v, %v; want a device issued at the zero Time", d, ok)
	}
	later := now.Add(time.Minute)
	if _, ok := newTestDevices(t, DeviceOptions{Secret: testSecret, Lifetime: time.Hour}, &later).verify(v1, "alice"); ok {
		t.Error("version 1 token accepted at its expiry")
	}
	if strings.Contains(token, "alice") {
		t.Errorf("token %q holds the account in clear", token)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(token)
	if bytes.Contains(raw, []byte("alice")) {
		t.Errorf("decoded token holds the account in clear")
	}
}

func TestDeviceTokenRejected(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := newTestDevices(t, DeviceOptions{Secret: testSecret, Lifetime: time.Hour}, &now)
	token, _ := v.sign("alice")
	t.Run("other account", func(t *testing.T) {
		for _, account := range []string{"bob", "Alice", "alice ", "alic", ""} {
			if _, ok := v.verify(token, account); ok {
				t.Errorf("alice's token verifies for %q", account)
			}
		}
	})
	t.Run("expired", func(t *testing.T) {
		later := now.Add(time.Hour - time.Second)
		w := newTestDevices(t, DeviceOptions{Secret: testSecret, Lifetime: time.Hour}, &later)
		if _, ok := w.verify(token, "alice"); !ok {
			t.Error("token refused a second before it expires")
		}
		later = now.Add(time.Hour)
		if _, ok := w.verify(token, "alice"); ok {
			t.Error("token accepted when it expires")
		}
		later = now.Add(1000 * time.Hour)
		if _, ok := w.verify(token, "alice"); ok {
			t.Error("token accepted long after it expired")
		}
	})
	t.Run("forged", func(t *testing.T) {
		// Every one-character change of the token, every truncation and
		// extension, is refused.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		for i := range token {
			for _, c := range []byte{alphabet[(strings.IndexByte(alphabet, token[i])+1)%64], '.', '='} {
				forged := token[:i] + string(c) + token[i+1:]
				if _, ok := v.verify(forged, "alice"); ok {
					t.Fatalf("token with char %d changed to %q accepted", i, c)
				}
			}
			if _, ok := v.verify(token[:i], "alice"); ok {
				t.Fatalf("token cut to %d chars accepted", i)
			}
		}
		if _, ok := v.verify(token+"A", "alice"); ok {
			t.Error("extended token accepted")
		}
		// A later expiry written into a genuine token breaks its MAC.
		raw, _ := base64.RawURLEncoding.DecodeString(token)
		raw[1] ^= 0x01
		if _, ok := v.verify(base64.RawURLEncoding.EncodeToString(raw), "alice"); ok {
			t.Error("token with its expiry changed accepted")
		}
		raw[1] ^= 0x01
		raw[0] = 3
		if _, ok := v.verify(base64.RawURLEncoding.EncodeToString(raw), "alice"); ok {
			t.Error("token of another version accepted")
		}
		for _, junk := range []string{"", "x", strings.Repeat("A", 76), strings.Repeat("A", 10000), "alice"} {
			if _, ok := v.verify(junk, "alice"); ok {
				t.Errorf("junk %.20q accepted", junk)
			}
		}
	})
	t.Run("secret rotation", func(t *testing.T) {
		rotated := newTestDevices(t, DeviceOptions{Secret: []byte("another secret of at least 32 bytes!"), Lifetime: time.Hour}, &now)
		if _, ok := rotated.verify(token, "alice"); ok {
			t.Error("token signed under the old secret accepted under the new one")
		}
		fresh, _ := rotated.sign("alice")
		if _, ok := rotated.verify(fresh, "alice"); !ok {
			t.Error("token signed under the new secret refused")
		}
		if _, ok := v.verify(fresh, "alice"); ok {
			t.Error("token signed under the new secret accepted under the old one")
		}
		same := newTestDevices(t, DeviceOptions{Secret: testSecret, Lifetime: time.Hour}, &now)
		if _, ok := same.verify(token, "alice"); !ok {
			t.Error("another instance with the same secret refuses the token")
		}
	})
	t.Run("per-process key", func(t *testing.T) {
		a := newTestDevices(t, DeviceOptions{}, &now)
		b := newTestDevices(t, DeviceOptions{}, &now)
		tok, _ := a.sign("alice")
		if _, ok := a.verify(tok, "alice"); !ok {
			t.Error("per-process key refuses its own token")
		}
		if _, ok := b.verify(tok, "alice"); ok {
			t.Error("two processes without a secret share a key")
		}
	})
}

func TestDeviceCookie(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, insecure := range []bool{false, true} {
		v := newTestDevices(t, DeviceOptions{Secret: testSecret, Insecure: insecure}, &now)
		h := http.Header{}
		v.issue(h, "alice")
		res := http.Response{Header: h}
		cs := res.Cookies()
		if len(cs) != 1 {
			t.Fatalf("Set-Cookie %q", h["Set-Cookie"])
		}
		c := cs[0]
		name := map[bool]string{false: DefaultDeviceCookie, true: PlainDeviceCookie}[insecure]
		if c.Name != name || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure == insecure || c.Domain != "" ||
			c.Path != "/" || c.MaxAge != int(defaultDeviceLifetime/time.Second) || !c.Expires.Equal(now.Add(defaultDeviceLifetime)) {
			t.Errorf("insecure %v: cookie %q", insecure, h["Set-Cookie"])
		}
		if strings.Contains(h.Get("Set-Cookie"), "alice") {
			t.Errorf("cookie names the account: %q", h.Get("Set-Cookie"))
		}
		r := httptest.NewRequest("POST", "/login", nil)
		r.AddCookie(&http.Cookie{Name: "other", Value: c.Value})
		if _, ok := v.known(r, "alice"); ok {
			t.Error("token under another cookie name accepted")
		}
		r.AddCookie(&http.Cookie{Name: name, Value: "forged"})
		r.AddCookie(c)
		if _, ok := v.known(r, "alice"); !ok {
			t.Error("valid token after a forged one refused")
		}
	}
}

// The name a guard issues and the one it reads follow its options: the
// __Host- name when Secure with Path "/", never the plain name; the plain
// name otherwise; a name set in the options, as written.
func TestDeviceCookieNames(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	host := []string{DefaultDeviceCookie}
	tests := []struct {
		name   string
		o      DeviceOptions
		cookie string // the name issued
		secure bool
		path   string
		read   []string // the names read
	}{
		{"default", DeviceOptions{}, DefaultDeviceCookie, true, "/", host},
		{"path /", DeviceOptions{Path: "/"}, DefaultDeviceCookie, true, "/", host},
		{"insecure", DeviceOptions{Insecure: true}, PlainDeviceCookie, false, "/", []string{PlainDeviceCookie}},
		{"other path", DeviceOptions{Path: "/login"}, PlainDeviceCookie, true, "/login", []string{PlainDeviceCookie}},
		{"insecure, other path", DeviceOptions{Insecure: true, Path: "/login"}, PlainDeviceCookie, false, "/login", []string{PlainDeviceCookie}},
		{"name set", DeviceOptions{Cookie: "dev"}, "dev", true, "/", []string{"dev"}},
		{"name set, insecure, other path", DeviceOptions{Cookie: "dev", Insecure: true, Path: "/a"}, "dev", false, "/a", []string{"dev"}},
		{"name set to the default", DeviceOptions{Cookie: DefaultDeviceCookie}, DefaultDeviceCookie, true, "/", []string{DefaultDeviceCookie}},
		{"name set to the old name", DeviceOptions{Cookie: PlainDeviceCookie}, PlainDeviceCookie, true, "/", []string{PlainDeviceCookie}},
		{"__Host- name set", DeviceOptions{Cookie: "__Host-dev", Path: "/"}, "__Host-dev", true, "/", []string{"__Host-dev"}},
		{"__Secure- name, other path", DeviceOptions{Cookie: "__Secure-dev", Path: "/login"}, "__Secure-dev", true, "/login", []string{"__Secure-dev"}},
	}
	probes := []string{DefaultDeviceCookie, PlainDeviceCookie, "dev", "__Host-dev", "__Secure-dev"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Secret = testSecret
			v := newTestDevices(t, tt.o, &now)
			h := http.Header{}
			v.issue(h, "alice")
			cs := (&http.Response{Header: h}).Cookies()
			if len(cs) != 1 {
				t.Fatalf("Set-Cookie %q", h["Set-Cookie"])
			}
			c := cs[0]
			if c.Name != tt.cookie || c.Secure != tt.secure || c.Path != tt.path || c.Domain != "" || !c.HttpOnly {
				t.Fatalf("Set-Cookie %q, want %s, Secure %v, Path %s", h["Set-Cookie"], tt.cookie, tt.secure, tt.path)
			}
			if v.o.Cookie != tt.cookie {
				t.Errorf("options name the cookie %q, want %q", v.o.Cookie, tt.cookie)
			}
			for _, name := range probes {
				r := httptest.NewRequest("POST", "/login", nil)
				r.AddCookie(&http.Cookie{Name: name, Value: c.Value})
				if _, ok := v.known(r, "alice"); ok != slices.Contains(tt.read, name) {
					t.Errorf("token under %q read: %v, want %v", name, ok, !ok)
				}
			}
		})
	}
}

// plantedTokens returns n tokens that are not alice's, as an attacker
// plants them: junk, well-formed tokens under another key, and tokens this
// guard signed for another account, in turn.
func plantedTokens(t *testing.T, v *devices, n int) []string {
	t.Helper()
	now := v.now()
	other := newTestDevices(t, DeviceOptions{Secret: []byte("an attacker's own secret, 32 bytes or more")}, &now)
	out := make([]string, n)
	for i := range out {
		switch i % 3 {
		case 0:
			out[i] = "forged"
		case 1:
			out[i], _ = other.sign("alice")
		case 2:
			out[i], _ = v.sign("mallory")
		}
	}
	return out
}

// Every device cookie of a request is tried, up to MaxDeviceCookies:
// planted cookies before or after the owner's never hide it, and cookies of
// the plain name are not counted. Past the bound the request has no device
// cookie at all, not the first MaxDeviceCookies: the owner's is not tried
// even when it comes first.
func TestDeviceCookiesPlanted(t *testing.T) {
	const max = MaxDeviceCookies
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := newTestDevices(t, DeviceOptions{Secret: testSecret}, &now)
	owner, _ := v.sign("alice")
	want, _ := v.verify(owner, "alice")
	tests := []struct {
		name    string
		before  int    // planted cookies before the owner's
		after   int    // planted cookies after it
		planted string // the planted cookies' name
		own     string // the owner's cookie's name
		ok      bool
	}{
		{"alone", 0, 0, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"5 before", 5, 0, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"5 after", 0, 5, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"10 before", 10, 0, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"10 after", 0, 10, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"10 around", 5, 5, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"up to the bound, owner last", max - 1, 0, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"up to the bound, owner first", 0, max - 1, DefaultDeviceCookie, DefaultDeviceCookie, true},
		{"5 of the plain name before", 5, 0, PlainDeviceCookie, DefaultDeviceCookie, true},
		{"past the bound of the plain name", max, max, PlainDeviceCookie, DefaultDeviceCookie, true},
		{"owner's under the plain name", 0, 0, DefaultDeviceCookie, PlainDeviceCookie, false},
		{"one over, owner last", max, 0, DefaultDeviceCookie, DefaultDeviceCookie, false},
		{"one over, owner first", 0, max, DefaultDeviceCookie, DefaultDeviceCookie, false},
		{"one over, owner between", max / 2, max - max/2, DefaultDeviceCookie, DefaultDeviceCookie, false},
		{"far over", 0, 3 * max, DefaultDeviceCookie, DefaultDeviceCookie, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			planted := plantedTokens(t, v, tt.before+tt.after)
			r := httptest.NewRequest("POST", "/login", nil)
			r.AddCookie(&http.Cookie{Name: "session", Value: "s"}) // never counted
			for _, p := range planted[:tt.before] {
				r.AddCookie(&http.Cookie{Name: tt.planted, Value: p})
			}
			r.AddCookie(&http.Cookie{Name: tt.own, Value: owner})
			for _, p := range planted[tt.before:] {
				r.AddCookie(&http.Cookie{Name: tt.planted, Value: p})
			}
			id, ok := v.known(r, "alice")
			if ok != tt.ok || (ok && id.id != want.id) {
				t.Errorf("known = %+v, %v; want the owner's device: %v", id, ok, tt.ok)
			}
		})
	}
}

func TestDeviceOptionsValidated(t *testing.T) {
	for _, tt := range []struct {
		o    DeviceOptions
		want string // in the error
	}{
		{DeviceOptions{Secret: []byte("short")}, "secret of 5 bytes"},
		{DeviceOptions{Cookie: "bad name"}, "not a cookie name"},
		{DeviceOptions{Cookie: "a;b"}, "not a cookie name"},
		{DeviceOptions{Lifetime: time.Second}, "lifetime"},
		{DeviceOptions{Lifetime: MaxDeviceLifetime + time.Hour}, "lifetime"},
		{DeviceOptions{Cookie: "__Host-device", Path: "/login"}, `"__Host-device": its __Host- prefix needs Path "/", not "/login"`},
		{DeviceOptions{Cookie: "__host-device", Path: "/login"}, `needs Path "/"`},
		{DeviceOptions{Cookie: "__Host-device", Insecure: true}, `"__Host-device": its __Host- prefix needs Secure`},
		{DeviceOptions{Cookie: "__HOST-device", Insecure: true, Path: "/"}, "prefix needs Secure"},
		{DeviceOptions{Cookie: "__Secure-device", Insecure: true}, `"__Secure-device": its __Secure- prefix needs Secure`},
	} {
		_, err := newDevices(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("newDevices(%+v) = %v, want an error with %q", tt.o, err, tt.want)
		}
	}
	v, err := newDevices(DeviceOptions{Cookie: "device", Lifetime: time.Hour, Path: "/login"})
	if err != nil || v.o.Cookie != "device" || v.o.Lifetime != time.Hour || v.o.Path != "/login" || v.o.Failures != defaultDeviceFailures {
		t.Errorf("newDevices = %+v, %v", v, err)
	}
}

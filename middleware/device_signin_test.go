package middleware_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/gatecount/gatecount/middleware"
)

// Cookies planted from a sibling subdomain, or sent by the attacker with
// the owner's: while strangers have locked alice's account, her own device
// still signs her in. Only __Host- device cookies are read, which no other
// host can set: any number of tossed gatecount-device cookies never hide
// hers, and a token under that name is not read. With more than
// MaxDeviceCookies __Host- ones she is an unknown client, refused like any
// other.
func TestSignInDevicePlantedCookies(t *testing.T) {
	_, p, h := signIn(t, nil, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}})
	w := login(h, "192.0.2.1", "alice", "right")
	alice := deviceCookie(t, w)
	if alice.Name != "__Host-gatecount-device" || !alice.Secure || alice.Path != "/" || alice.Domain != "" {
		t.Fatalf("device cookie %q, want a __Host- cookie", w.Header()["Set-Cookie"])
	}
	bob := deviceCookie(t, login(h, "192.0.2.2", "bob", "battery")) // valid, for bob
	for i := range 20 {
		login(h, fmt.Sprintf("198.51.100.%d", i), "alice", "guess")
	}
	if w := login(h, "203.0.113.7", "alice", "right"); w.Code != 429 {
		t.Fatalf("alice without her cookie after the attack: %d, want 429", w.Code)
	}
	const max = middleware.MaxDeviceCookies
	host, plain := middleware.DefaultDeviceCookie, middleware.PlainDeviceCookie
	tests := []struct {
		name    string
		planted int    // planted cookies, half before alice's, half after
		as      string // the planted cookies' name
		own     string // the name alice's token is sent under
		want    int
	}{
		{"alone", 0, host, host, 200},
		{"under the plain name", 0, host, plain, 429},
		{"5 planted", 5, host, host, 200},
		{"10 planted", 10, host, host, 200},
		{"up to the bound", max - 1, host, host, 200},
		{"one over", max, host, host, 429},
		{"32 tossed plain cookies", max, plain, host, 200},
		{"100 tossed plain cookies", 100, plain, host, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := p.checks.Load()
			var cookies []*http.Cookie
			for i := range tt.planted {
				c := &http.Cookie{Name: tt.as, Value: "planted"}
				if i%2 == 1 {
					c = &http.Cookie{Name: tt.as, Value: bob.Value}
				}
				if i == tt.planted/2 {
					cookies = append(cookies, &http.Cookie{Name: tt.own, Value: alice.Value})
				}
				cookies = append(cookies, c)
			}
			if tt.planted == 0 {
				cookies = append(cookies, &http.Cookie{Name: tt.own, Value: alice.Value})
			}
			w := post(h, "203.0.113.7", ctForm, form("alice", "right"), cookies...)
			if w.Code != tt.want {
				t.Fatalf("alice with %d planted cookies: %d, want %d", tt.planted, w.Code, tt.want)
			}
			if reached := p.checks.Load() - checks; reached != map[bool]int64{true: 1, false: 0}[tt.want == 200] {
				t.Fatalf("%d attempts reached the handler", reached)
			}
		})
	}
}

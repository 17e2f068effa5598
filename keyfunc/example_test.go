package keyfunc_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gatecount/gatecount/keyfunc"
)

func ExampleNewIP() {
	// In production: keyfunc.ParseNetworks(os.Getenv("TRUSTED_PROXIES")).
	proxies, err := keyfunc.ParseNetworks("10.0.0.0/8, 2001:db8:ffff::/48")
	if err != nil {
		log.Fatal(err)
	}
	ip, err := keyfunc.NewIP(keyfunc.IPOptions{TrustedProxies: proxies})
	if err != nil {
		log.Fatal(err)
	}

	// Through a trusted load balancer: the header is walked from the right.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.5:41234"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.9")
	fmt.Println(ip.Key(r))

	// Straight from the Internet: forged headers are ignored.
	r.RemoteAddr = "203.0.113.50:5555"
	fmt.Println(ip.Key(r))

	// IPv6 clients are grouped by /64.
	r.RemoteAddr = "[2001:db8:abcd:12:9a3f::1]:443"
	fmt.Println(ip.Key(r))
	// Output:
	// 198.51.100.7 <nil>
	// 203.0.113.50 <nil>
	// 2001:db8:abcd:12::/64 <nil>
}

// A key function over BodyFields: the account in the body, normalised, and
// the client address, to limit attempts per (account, address) pair.
func ExampleBodyFields() {
	email := func(r *http.Request) (string, error) {
		vs, err := keyfunc.BodyFields(r, keyfunc.BodyOptions{}, "email")
		if err != nil {
			return "", err
		}
		return keyfunc.NormalizeEmail(vs[0])
	}
	ip, err := keyfunc.NewIP(keyfunc.IPOptions{})
	if err != nil {
		log.Fatal(err)
	}
	key := keyfunc.Join(email, ip.Key)

	r := httptest.NewRequest(http.MethodPost, "/signin", strings.NewReader("email=Alice%40Example.COM+&password=hunter2"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.1:1234"
	fmt.Println(key(r))

	// The handler still sees the whole body.
	body, _ := io.ReadAll(r.Body)
	fmt.Println(string(body))
	// Output:
	// 17:alice@example.com9:192.0.2.1 <nil>
	// email=Alice%40Example.COM+&password=hunter2
}

func ExampleCallerID() {
	// The authentication middleware stores who the caller is...
	r := httptest.NewRequest(http.MethodGet, "/api/orders", nil)
	r = r.WithContext(keyfunc.WithCallerID(r.Context(), "user-42"))
	fmt.Println(keyfunc.CallerID(r))

	// ...and a request without one is an error, never unlimited.
	_, err := keyfunc.CallerID(httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(errors.Is(err, keyfunc.ErrNoCallerID), errors.Is(err, keyfunc.ErrNoKey))
	// Output:
	// user-42 <nil>
	// true true
}

func ExampleJoinKeys() {
	fmt.Println(keyfunc.JoinKeys("a|b", "c"))
	fmt.Println(keyfunc.JoinKeys("a", "b|c"))
	// Output:
	// 3:a|b1:c
	// 1:a3:b|c
}

func ExampleNormalizeEmail() {
	for _, s := range []string{"Alice@Example.COM ", "alice@example.com", "not an address"} {
		k, err := keyfunc.NormalizeEmail(s)
		fmt.Printf("%q %v\n", k, errors.Is(err, keyfunc.ErrInvalidAccount))
	}
	// Output:
	// "alice@example.com" false
	// "alice@example.com" false
	// "" true
}

package keyfunc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func mustKeyer(t testing.TB, opts IPOptions) *IPKeyer {
	t.Helper()
	k, err := NewIP(opts)
	if err != nil {
		t.Fatalf("NewIP(%+v): %v", opts, err)
	}
	return k
}

func mustPrefixes(t testing.TB, s string) []netip.Prefix {
	t.Helper()
	ps, err := ParseTrustedProxies(s)
	if err != nil {
		t.Fatalf("ParseTrustedProxies(%q): %v", s, err)
	}
	return ps
}

// request builds a GET request from remoteAddr and header lines given as
// "Name: value" strings; a name may repeat.
func request(remoteAddr string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		r.Header.Add(name, strings.TrimPrefix(value, " "))
	}
	return r
}

const trusted = "10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.1"

func TestIPKey(t *testing.T) {
	tests := []struct {
		name    string
		trusted string
		mode    HeaderMode
		v6      int
		remote  string
		headers []string
		want    string
	}{
		// The immediate peer.
		{name: "ipv4 with port", remote: "203.0.113.9:5678", want: "203.0.113.9"},
		{name: "ipv4 bare", remote: "203.0.113.9", want: "203.0.113.9"},
		{name: "ipv6 with port", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "2001:db8:1:2::/64"},
		{name: "ipv6 bare", remote: "2001:db8:1:2::1", want: "2001:db8:1:2::/64"},
		{name: "ipv6 bracketed no port", remote: "[2001:db8:1:2::1]", want: "2001:db8:1:2::/64"},
		{name: "ipv6 zone and port", remote: "[fe80::1%eth0]:80", want: "fe80::/64"},
		{name: "ipv6 zone bare", remote: "fe80::1:2:3:4%eth0", want: "fe80::/64"},
		{name: "ipv4-mapped", remote: "[::ffff:203.0.113.9]:80", want: "203.0.113.9"},
		{name: "ipv4-mapped hex", remote: "::ffff:cb00:7109", want: "203.0.113.9"},
		{name: "ipv6 upper case long form", remote: "[2001:0DB8:0001:0002:FFFF:0:0:1]:1", want: "2001:db8:1:2::/64"},
		{name: "ipv6 prefix 56", v6: 56, remote: "[2001:db8:1:2ff::1]:1", want: "2001:db8:1:200::/56"},
		{name: "ipv6 prefix 128", v6: 128, remote: "[2001:db8::1]:1", want: "2001:db8::1/128"},
		{name: "loopback v6", remote: "[::1]:80", want: "::/64"},

		// Untrusted peers: forwarding headers are ignored.
		{name: "untrusted peer spoofed xff", trusted: trusted, remote: "203.0.113.9:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1"}, want: "203.0.113.9"},
		{name: "untrusted peer spoofed forwarded", trusted: trusted, remote: "203.0.113.9:1",
			headers: []string{"Forwarded: for=198.51.100.1"}, want: "203.0.113.9"},
		{name: "no trusted proxies", remote: "10.0.0.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1"}, want: "10.0.0.1"},

		// Trusted peers: walk from the right.
		{name: "trusted peer single hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "chain walked from right", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.1, 10.2.2.2, 192.0.2.1"}, want: "198.51.100.1"},
		{name: "spoofed left part ignored", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 10.9.9.9, 1.2.3.4, 198.51.100.1"}, want: "198.51.100.1"},
		{name: "all trusted uses leftmost", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 10.3.3.3, 10.2.2.2"}, want: "10.3.3.3"},
		{name: "multiple xff lines joined in order", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.7", "X-Forwarded-For: 10.2.2.2"}, want: "198.51.100.7"},
		{name: "empty xff elements skipped", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1,, 10.2.2.2 ,"}, want: "198.51.100.1"},
		{name: "xff hop with port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1:4444"}, want: "198.51.100.1"},
		{name: "xff ipv6 hop masked", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 2001:db8:5:6:7::8"}, want: "2001:db8:5:6::/64"},
		{name: "xff ipv6 bracketed hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: [2001:db8:5:6::8]:99"}, want: "2001:db8:5:6::/64"},
		{name: "xff mapped hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: ::ffff:198.51.100.1"}, want: "198.51.100.1"},
		{name: "trusted ipv6 peer", trusted: trusted, remote: "[2001:db8:ffff:1::1]:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "trusted peer via mapped remote", trusted: trusted, remote: "[::ffff:10.1.1.1]:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "trusted peer no header", trusted: trusted, remote: "10.1.1.1:1", want: "10.1.1.1"},
		{name: "trusted peer empty header", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: "}, want: "10.1.1.1"},

		// Malformed hops stop the walk at the last trusted address.
		{name: "garbage hop at right", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, garbage"}, want: "10.1.1.1"},
		{name: "garbage hop after trusted hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, nonsense, 10.2.2.2"}, want: "10.2.2.2"},
		{name: "unknown hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, unknown"}, want: "10.1.1.1"},
		{name: "leading zeros rejected", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.051.100.1"}, want: "10.1.1.1"},
		{name: "bad port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1:99999"}, want: "10.1.1.1"},
		{name: "zoned hop stripped", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: fe80::1%eth0"}, want: "fe80::/64"},
		{name: "oversized header ignored", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat("1.1.1.1, ", 1000) + "198.51.100.1"}, want: "10.1.1.1"},
		{name: "too many trusted hops stops at 64th", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, " + strings.Repeat("10.0.0.1, ", 70) + "10.0.0.2"}, want: "10.0.0.1"},
		{name: "many hops but client within 64", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat("6.6.6.6, ", 100) + "198.51.100.1, 10.0.0.2"}, want: "198.51.100.1"},

		// Forwarded (RFC 7239).
		{name: "forwarded token", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1"}, want: "198.51.100.1"},
		{name: "forwarded quoted ipv6 with port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv4 with port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="198.51.100.1:4711";proto=https`}, want: "198.51.100.1"},
		{name: "forwarded obfuscated port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[2001:db8:cafe::17]:_p1"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded chain from right", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=6.6.6.6, for=198.51.100.1;by=10.2.2.2, For="10.2.2.2"`}, want: "198.51.100.1"},
		{name: "forwarded params with spaces", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: proto=https; for=198.51.100.1 ; host=example.com`}, want: "198.51.100.1"},
		{name: "forwarded multiple lines", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6, for=198.51.100.1", "Forwarded: for=10.2.2.2"}, want: "198.51.100.1"},
		{name: "forwarded quoted-pair", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="\[2001:db8:cafe::17\]"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded unknown", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, for=unknown, for=10.2.2.2"}, want: "10.2.2.2"},
		{name: "forwarded obfuscated node", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, for=_hidden"}, want: "10.1.1.1"},
		{name: "forwarded element without for", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, proto=https"}, want: "10.1.1.1"},
		{name: "forwarded unquoted ipv6 is a syntax error", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=[2001:db8::1]"}, want: "10.1.1.1"},
		{name: "forwarded unterminated quote", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=198.51.100.1, for="10.2.2.2`}, want: "10.1.1.1"},
		{name: "forwarded duplicate for", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=198.51.100.1;for=10.2.2.2`}, want: "10.1.1.1"},
		{name: "forwarded bracketed ipv4", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[198.51.100.1]"`}, want: "10.1.1.1"},

		// Header precedence.
		{name: "auto prefers xff", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6", "X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "auto falls back to forwarded", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1"}, want: "198.51.100.1"},
		{name: "forwarded only mode", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1", "X-Forwarded-For: 6.6.6.6"}, want: "198.51.100.1"},
		{name: "xff only mode ignores forwarded", trusted: trusted, mode: HeaderXForwardedFor, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6"}, want: "10.1.1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []netip.Prefix
			if tt.trusted != "" {
				ps = mustPrefixes(t, tt.trusted)
			}
			k := mustKeyer(t, IPOptions{TrustedProxies: ps, IPv6Prefix: tt.v6, Header: tt.mode})
			got, err := k.Key(request(tt.remote, tt.headers...))
			if err != nil {
				t.Fatalf("Key: %v", err)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIPKeyOneKeyPerAddress(t *testing.T) {
	k := mustKeyer(t, IPOptions{})
	forms := []string{
		"[2001:db8:1:2::1]:1", "2001:0db8:0001:0002:0000:0000:0000:0001",
		"[2001:DB8:1:2:0::1]:65535", "2001:db8:1:2:ffff:ffff:ffff:ffff", "[2001:db8:1:2::1%en0]:8",
	}
	for _, f := range forms {
		got, err := k.Key(request(f))
		if err != nil || got != "2001:db8:1:2::/64" {
			t.Errorf("Key(%q) = %q, %v; want 2001:db8:1:2::/64", f, got, err)
		}
	}
	v4 := []string{"192.0.2.1:1", "192.0.2.1", "[::ffff:192.0.2.1]:2", "::ffff:c000:201"}
	for _, f := range v4 {
		got, err := k.Key(request(f))
		if err != nil || got != "192.0.2.1" {
			t.Errorf("Key(%q) = %q, %v; want 192.0.2.1", f, got, err)
		}
	}
}

func TestIPBadRemoteAddr(t *testing.T) {
	for _, remote := range []string{
		"", "@", "pipe", "example.com:80", "1.2.3.4:", "1.2.3.4:port", "1.2.3.4:70000",
		"[1.2.3.4]:80", "[::1", "[::1]x", "::1:80]", "01.2.3.4:1", "1.2.3.4.5",
	} {
		k := mustKeyer(t, IPOptions{TrustedProxies: mustPrefixes(t, "0.0.0.0/0")})
		r := request(remote, "X-Forwarded-For: 198.51.100.1")
		got, err := k.Key(r)
		if !errors.Is(err, ErrNoKey) {
			t.Errorf("Key(RemoteAddr %q) = %q, %v; want ErrNoKey", remote, got, err)
		}
		if got, err := IP(r); !errors.Is(err, ErrNoKey) {
			t.Errorf("IP(RemoteAddr %q) = %q, %v; want ErrNoKey", remote, got, err)
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string // substring of the error
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "10.0.0.0/8", want: []string{"10.0.0.0/8"}},
		{in: " 10.0.0.0/8 , 192.0.2.7,2001:db8::/32, ::1 ,", want: []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "::1/128"}},
		{in: "10.1.2.3/8", want: []string{"10.0.0.0/8"}},
		{in: "::ffff:10.0.0.0/104", want: []string{"10.0.0.0/8"}},
		{in: "::ffff:10.0.0.1", want: []string{"10.0.0.1/32"}},
		{in: "10.0.0.0/8, bogus", wantErr: `element 2 "bogus"`},
		{in: "10.0.0.0/33", wantErr: `element 1 "10.0.0.0/33"`},
		{in: "fe80::1%eth0", wantErr: `"fe80::1%eth0"`},
		{in: "10.0.0.0/8,,300.0.0.1", wantErr: `element 3 "300.0.0.1"`},
	}
	for _, tt := range tests {
		got, err := ParseTrustedProxies(tt.in)
		if tt.wantErr != "" {
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseTrustedProxies(%q) error = %v; want ErrInvalidOption naming %s", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTrustedProxies(%q): %v", tt.in, err)
			continue
		}
		var gs []string
		for _, p := range got {
			gs = append(gs, p.String())
		}
		if strings.Join(gs, " ") != strings.Join(tt.want, " ") {
			t.Errorf("ParseTrustedProxies(%q) = %v, want %v", tt.in, gs, tt.want)
		}
	}
}

func TestNewIPOptions(t *testing.T) {
	tests := []struct {
		opts IPOptions
		ok   bool
	}{
		{IPOptions{}, true},
		{IPOptions{IPv6Prefix: 32}, true},
		{IPOptions{IPv6Prefix: 56}, true},
		{IPOptions{IPv6Prefix: 128}, true},
		{IPOptions{IPv6Prefix: 31}, false},
		{IPOptions{IPv6Prefix: 129}, false},
		{IPOptions{IPv6Prefix: -1}, false},
		{IPOptions{Header: HeaderMode(7)}, false},
		{IPOptions{TrustedProxies: []netip.Prefix{{}}}, false},
		{IPOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, true},
	}
	for _, tt := range tests {
		_, err := NewIP(tt.opts)
		if tt.ok && err != nil {
			t.Errorf("NewIP(%+v): %v", tt.opts, err)
		}
		if !tt.ok && !errors.Is(err, ErrInvalidOption) {
			t.Errorf("NewIP(%+v) error = %v, want ErrInvalidOption", tt.opts, err)
		}
	}
}

func TestIPKeyerZeroValue(t *testing.T) {
	var k IPKeyer
	got, err := k.Func()(request("[2001:db8:1:2::1]:1"))
	if err != nil || got != "2001:db8:1:2::/64" {
		t.Errorf("zero IPKeyer Key = %q, %v", got, err)
	}
	if s := k.AddrKey(netip.Addr{}); s != "" {
		t.Errorf("AddrKey(zero) = %q, want empty", s)
	}
}

func TestIPKeyAllocs(t *testing.T) {
	// A plain IPv4 peer's key is the host part of RemoteAddr itself.
	for _, c := range []struct {
		remote string
		want   float64
	}{{"203.0.113.9:5678", 0}, {"203.0.113.9", 0}, {"[::ffff:203.0.113.9]:80", 1}, {"[2001:db8::1]:80", 1}} {
		r := request(c.remote)
		if n := testing.AllocsPerRun(100, func() { _, _ = IP(r) }); n > c.want {
			t.Errorf("IP of %q allocates %v times per call, want at most %v", c.remote, n, c.want)
		}
	}
}

// The key taken from RemoteAddr's text is the address's own, never a longer
// address that starts alike.
func TestIPKeyFromRemoteText(t *testing.T) {
	for remote, want := range map[string]string{
		"1.2.3.4:5":        "1.2.3.4",
		"1.2.3.45:6":       "1.2.3.45",
		"1.2.3.4":          "1.2.3.4",
		"[::ffff:1.2.3.4]": "1.2.3.4",
	} {
		got, err := IP(request(remote))
		if err != nil || got != want {
			t.Errorf("IP(%q) = %q, %v; want %q", remote, got, err, want)
		}
	}
	if got, ok := textOf(netip.MustParseAddr("1.2.3.4"), "1.2.3.45:6"); ok {
		t.Errorf("textOf(1.2.3.4, 1.2.3.45:6) = %q, want no match", got)
	}
}

func BenchmarkIP(b *testing.B) {
	b.Run("ipv4-direct", func(b *testing.B) {
		r := request("203.0.113.9:5678")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = IP(r)
		}
	})
	b.Run("ipv6-direct", func(b *testing.B) {
		r := request("[2001:db8:1:2::1]:5678")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = IP(r)
		}
	})
	k := mustKeyer(b, IPOptions{TrustedProxies: mustPrefixes(b, trusted)})
	b.Run("xff-3-hops", func(b *testing.B) {
		r := request("10.1.1.1:5678", "X-Forwarded-For: 6.6.6.6, 198.51.100.1, 10.2.2.2")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = k.Key(r)
		}
	})
	b.Run("forwarded-3-hops", func(b *testing.B) {
		r := request("10.1.1.1:5678", `Forwarded: for=6.6.6.6, for="[2001:db8::1]:80";proto=https, for=10.2.2.2`)
		b.ReportAllocs()
		for b.Loop() {
			_, _ = k.Key(r)
		}
	})
}

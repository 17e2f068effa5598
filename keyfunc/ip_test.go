package keyfunc

import (
	"errors"
	"math/rand/v2"
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
	ps, err := ParseNetworks(s)
	if err != nil {
		t.Fatalf("ParseNetworks(%q): %v", s, err)
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

// bad is the want of a TestIPKey case whose forwarding header is refused.
const bad = "(refused: ErrBadForwarding)"

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
			headers: []string{"X-Forwarded-For: "}, want: bad},
		{name: "trusted peer header of commas", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: , ,"}, want: bad},

		// A hop that is not an address, where the walk reaches it, leaves the
		// client unknown: never the proxy's own address.
		{name: "garbage hop at right", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, garbage"}, want: bad},
		{name: "garbage hop after trusted hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, nonsense, 10.2.2.2"}, want: bad},
		{name: "garbage hop left of the client is never reached", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: nonsense, 198.51.100.1, 10.2.2.2"}, want: "198.51.100.1"},
		{name: "unknown hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, unknown"}, want: bad},
		{name: "leading zeros rejected", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.051.100.1"}, want: bad},
		{name: "bad port", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1:99999"}, want: bad},
		{name: "zoned hop stripped", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: fe80::1%eth0"}, want: "fe80::/64"},
		{name: "oversized header refused", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat("1.1.1.1, ", 1000) + "198.51.100.1"}, want: bad},
		{name: "oversized over several lines refused", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat("1", 4096), "X-Forwarded-For: " + strings.Repeat("2", 4096)}, want: bad},
		{name: "header at the bound read", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat(" ", maxForwardedBytes-len("198.51.100.1")) + "198.51.100.1"}, want: "198.51.100.1"},
		{name: "too many trusted hops stops at 64th", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 198.51.100.1, " + strings.Repeat("10.0.0.1, ", 70) + "10.0.0.2"}, want: "10.0.0.1"},
		{name: "many hops but client within 64", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: " + strings.Repeat("6.6.6.6, ", 100) + "198.51.100.1, 10.0.0.2"}, want: "198.51.100.1"},

		// Forwarded (RFC 7239).
		{name: "forwarded token", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1"}, want: "198.51.100.1"},
		{name: "forwarded quoted ipv6 with port", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv4 with port", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="198.51.100.1:4711";proto=https`}, want: "198.51.100.1"},
		{name: "forwarded obfuscated port", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[2001:db8:cafe::17]:_p1"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded chain from right", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=6.6.6.6, for=198.51.100.1;by=10.2.2.2, For="10.2.2.2"`}, want: "198.51.100.1"},
		{name: "forwarded params with spaces", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: proto=https; for=198.51.100.1 ; host=example.com`}, want: "198.51.100.1"},
		{name: "forwarded multiple lines", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6, for=198.51.100.1", "Forwarded: for=10.2.2.2"}, want: "198.51.100.1"},
		{name: "forwarded quoted-pair", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="\[2001:db8:cafe::17\]"`}, want: "2001:db8:cafe::/64"},
		{name: "forwarded unknown", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, for=unknown, for=10.2.2.2"}, want: bad},
		{name: "forwarded obfuscated node", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, for=_hidden"}, want: bad},
		{name: "forwarded element without for", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1, proto=https"}, want: bad},
		{name: "forwarded unquoted ipv6 is a syntax error", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=[2001:db8::1]"}, want: bad},
		{name: "forwarded unterminated quote", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=198.51.100.1, for="10.2.2.2`}, want: bad},
		{name: "forwarded duplicate for", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for=198.51.100.1;for=10.2.2.2`}, want: bad},
		{name: "forwarded bracketed ipv4", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{`Forwarded: for="[198.51.100.1]"`}, want: bad},
		{name: "forwarded oversized", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: " + strings.Repeat("for=1.1.1.1, ", 1000) + "for=198.51.100.1"}, want: bad},

		// One header, chosen: the other is ignored, whoever sent it.
		{name: "xff by default ignores forwarded", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6", "X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "xff by default never falls back to forwarded", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1"}, want: "10.1.1.1"},
		{name: "xff by default ignores a malformed forwarded", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=[", "X-Forwarded-For: 198.51.100.1"}, want: "198.51.100.1"},
		{name: "forwarded mode ignores a client's xff", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1", "X-Forwarded-For: 6.6.6.6"}, want: "198.51.100.1"},
		{name: "forwarded mode without forwarded is the peer", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 6.6.6.6"}, want: "10.1.1.1"},
		{name: "forwarded mode ignores an oversized xff", trusted: trusted, mode: HeaderForwarded, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=198.51.100.1", "X-Forwarded-For: " + strings.Repeat("1.1.1.1, ", 1000)}, want: "198.51.100.1"},
		{name: "xff mode explicit", trusted: trusted, mode: HeaderXForwardedFor, remote: "10.1.1.1:1",
			headers: []string{"Forwarded: for=6.6.6.6"}, want: "10.1.1.1"},

		// IPv6 transition addresses are keyed by the IPv4 address they carry.
		{name: "6to4 peer", remote: "[2002:c000:0204:1::1]:80", want: "192.0.2.4"},
		{name: "6to4 other subnet same key", remote: "[2002:c000:0204:ffff:1:2:3:4]:80", want: "192.0.2.4"},
		{name: "6to4 other host", remote: "[2002:c000:0205::1]:80", want: "192.0.2.5"},
		{name: "nat64 peer", remote: "[64:ff9b::c000:204]:80", want: "192.0.2.4"},
		{name: "nat64 dotted", remote: "[64:ff9b::198.51.100.7]:80", want: "198.51.100.7"},
		{name: "nat64 hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 64:ff9b::203.0.113.9"}, want: "203.0.113.9"},
		{name: "6to4 hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 2002:cb00:7109::1"}, want: "203.0.113.9"},
		{name: "outside nat64 /96 is ipv6", remote: "[64:ff9b::1:c000:204]:80", want: "64:ff9b::/64"},
		{name: "near 6to4 is ipv6", remote: "[2003:c000:204::1]:80", want: "2003:c000:204::/64"},
		// Teredo: server 65.54.227.120, port 40000 and client 192.0.2.45,
		// the last two inverted (RFC 4380 section 4).
		{name: "teredo peer", remote: "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", want: "192.0.2.45"},
		{name: "teredo other port same key", remote: "[2001:0:4136:e378:8000:1234:3fff:fdd2]:80", want: "192.0.2.45"},
		{name: "teredo other server same key", remote: "[2001:0:cb00:7101::3fff:fdd2]:80", want: "192.0.2.45"},
		{name: "teredo other host", remote: "[2001:0:4136:e378:8000:63bf:3fff:fdd1]:80", want: "192.0.2.46"},
		{name: "teredo hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 2001::34ff:8ef6"}, want: "203.0.113.9"},
		{name: "near teredo is ipv6", remote: "[2001:1:4136:e378:8000:63bf:3fff:fdd2]:80", want: "2001:1:4136:e378::/64"},
		// IPv4-compatible (RFC 4291 section 2.5.5.1): ::/96 but :: and ::1.
		{name: "ipv4-compatible dotted", remote: "[::192.0.2.7]:80", want: "192.0.2.7"},
		{name: "ipv4-compatible hex", remote: "[::c000:208]:80", want: "192.0.2.8"},
		{name: "ipv4-compatible low", remote: "[::2]:80", want: "0.0.0.2"},
		{name: "ipv4-compatible hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: ::203.0.113.9"}, want: "203.0.113.9"},
		{name: "loopback is not ipv4-compatible", remote: "[::1]:80", want: "::/64"},
		{name: "unspecified is not ipv4-compatible", remote: "[::]:80", want: "::/64"},
		{name: "outside ::/96 is ipv6", remote: "[::1:c000:204]:80", want: "::/64"},
		// NAT64 local use (RFC 8215) in the /48's own form (RFC 6052 section
		// 2.2): the IPv4 address in bits 48-63 and 72-87.
		{name: "nat64 local /48 form", remote: "[64:ff9b:1:c000:2:400::]:80", want: "192.0.2.4"},
		{name: "nat64 local /48 form other host", remote: "[64:ff9b:1:c000:2:500::]:80", want: "192.0.2.5"},
		{name: "nat64 local /48 form hop", trusted: trusted, remote: "10.1.1.1:1",
			headers: []string{"X-Forwarded-For: 64:ff9b:1:cb00:71:900::"}, want: "203.0.113.9"},
		// Any other address of the block is of a longer prefix, whose IPv4
		// bits it does not show: keyed whole, one key per host.
		{name: "nat64 local /96 prefix", remote: "[64:ff9b:1::c000:204]:80", want: "64:ff9b:1::c000:204/128"},
		{name: "nat64 local /96 prefix other host", remote: "[64:ff9b:1::c000:205]:80", want: "64:ff9b:1::c000:205/128"},
		{name: "nat64 local /64 prefix", remote: "[64:ff9b:1:1:c0:2:400:0]:80", want: "64:ff9b:1:1:c0:2:400:0/128"},
		{name: "nat64 local u octet set", remote: "[64:ff9b:1:c000:102:400::]:80", want: "64:ff9b:1:c000:102:400::/128"},
		{name: "nat64 local whole under a /56 setting", v6: 56, remote: "[64:ff9b:1::c000:204]:80", want: "64:ff9b:1::c000:204/128"},
		{name: "near nat64 local is ipv6", remote: "[64:ff9b:2::c000:204]:80", want: "64:ff9b:2::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []netip.Prefix
			if tt.trusted != "" {
				ps = mustPrefixes(t, tt.trusted)
			}
			k := mustKeyer(t, IPOptions{TrustedProxies: ps, IPv6Prefix: tt.v6, Header: tt.mode})
			got, err := k.Key(request(tt.remote, tt.headers...))
			if tt.want == bad {
				if !errors.Is(err, ErrBadForwarding) || !errors.Is(err, ErrNoKey) || got != "" {
					t.Fatalf("Key = %q, %v; want an error matching ErrBadForwarding", got, err)
				}
				return
			}
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

// Every transition mechanism keys a client by the IPv4 address it carries,
// whatever the other bits: for many IPv4 hosts, each written as the
// mechanism writes it with the other bits random, the key is that host.
func TestIPTransitionKeys(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(b []byte) {
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
	}
	tests := []struct {
		name  string
		write func(v4 [4]byte) [16]byte
		whole bool // keyed by the whole address, not the IPv4 one
	}{
		{"6to4", func(v4 [4]byte) (b [16]byte) {
			random(b[6:])
			b[0], b[1] = 0x20, 0x02
			copy(b[2:6], v4[:])
			return b
		}, false},
		{"teredo", func(v4 [4]byte) (b [16]byte) {
			random(b[4:12])
			b[0], b[1] = 0x20, 0x01
			for i, c := range v4 {
				b[12+i] = c ^ 0xff
			}
			return b
		}, false},
		{"nat64", func(v4 [4]byte) (b [16]byte) {
			b[1], b[2], b[3] = 0x64, 0xff, 0x9b
			copy(b[12:], v4[:])
			return b
		}, false},
		{"ipv4-compatible", func(v4 [4]byte) (b [16]byte) {
			copy(b[12:], v4[:])
			return b
		}, false},
		{"nat64 local /48", func(v4 [4]byte) (b [16]byte) {
			b[1], b[2], b[3], b[5] = 0x64, 0xff, 0x9b, 1
			b[6], b[7], b[9], b[10] = v4[0], v4[1], v4[2], v4[3]
			return b
		}, false},
		{"nat64 local /96", func(v4 [4]byte) (b [16]byte) {
			random(b[6:12])
			b[1], b[2], b[3], b[5] = 0x64, 0xff, 0x9b, 1
			copy(b[12:], v4[:])
			return b
		}, true},
	}
	k := mustKeyer(t, IPOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := make(map[string][4]byte)
			for range 2000 {
				var v4 [4]byte
				random(v4[:])
				if v4[0] == 0 { // clear of :: and ::1, which carry no IPv4 address
					v4[0] = 1
				}
				a := netip.AddrFrom16(tt.write(v4))
				want := netip.AddrFrom4(v4).String()
				if tt.whole {
					want = netip.PrefixFrom(a, 128).String()
				}
				got := k.AddrKey(a)
				if got != want {
					t.Fatalf("AddrKey(%v) = %q, want %q", a, got, want)
				}
				if other, ok := keys[got]; ok && other != v4 {
					t.Fatalf("hosts %v and %v share key %q", other, v4, got)
				}
				keys[got] = v4
			}
		})
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
		if got, err := peer(r); !errors.Is(err, ErrNoKey) {
			t.Errorf("IP(RemoteAddr %q) = %q, %v; want ErrNoKey", remote, got, err)
		}
	}
}

func TestParseNetworks(t *testing.T) {
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
		got, err := ParseNetworks(tt.in)
		if tt.wantErr != "" {
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseNetworks(%q) error = %v; want ErrInvalidOption naming %s", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseNetworks(%q): %v", tt.in, err)
			continue
		}
		var gs []string
		for _, p := range got {
			gs = append(gs, p.String())
		}
		if strings.Join(gs, " ") != strings.Join(tt.want, " ") {
			t.Errorf("ParseNetworks(%q) = %v, want %v", tt.in, gs, tt.want)
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
	got, err := k.Key(request("[2001:db8:1:2::1]:1"))
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
		if n := testing.AllocsPerRun(100, func() { _, _ = peer(r) }); n > c.want {
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
		got, err := peer(request(remote))
		if err != nil || got != want {
			t.Errorf("IP(%q) = %q, %v; want %q", remote, got, err, want)
		}
	}
}

// plainPeer takes the key from RemoteAddr's text only for a plain IPv4
// address in netip's form, alone or with a valid port; parseNode reads the
// rest. FuzzPlainPeer checks it against parseNode on every input.
func TestPlainPeer(t *testing.T) {
	for _, c := range []struct {
		remote, host string // host "" when plainPeer declines
	}{
		{"1.2.3.4:5", "1.2.3.4"},
		{"1.2.3.45:6", "1.2.3.45"},
		{"1.2.3.4", "1.2.3.4"},
		{"0.0.0.0:0", "0.0.0.0"},
		{"255.255.255.255:65535", "255.255.255.255"},
		{"10.200.30.4:443", "10.200.30.4"},
		{"256.1.1.1:1", ""},
		{"01.2.3.4:1", ""},
		{"1.2.3.04", ""},
		{"1.2.3.4.5", ""},
		{"1.2.3", ""},
		{"1..3.4", ""},
		{"1.2.3.1234", ""},
		{"1.2.3.4:", ""},
		{"1.2.3.4:70000", ""},
		{"1.2.3.4:_x", ""},
		{"1.2.3.4:80:90", ""},
		{"1.2.3.4%eth0", ""},
		{"[1.2.3.4]:80", ""},
		{"[::ffff:1.2.3.4]:80", ""},
		{"::1", ""},
		{"", ""},
		{"+1.2.3.4", ""},
	} {
		host, a, ok := plainPeer(c.remote)
		if ok != (c.host != "") || (ok && (host != c.host || a.String() != c.host)) {
			t.Errorf("plainPeer(%q) = %q, %v, %v; want %q", c.remote, host, a, ok, c.host)
		}
	}
}

func BenchmarkIP(b *testing.B) {
	b.Run("ipv4-direct", func(b *testing.B) {
		r := request("203.0.113.9:5678")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = peer(r)
		}
	})
	b.Run("ipv6-direct", func(b *testing.B) {
		r := request("[2001:db8:1:2::1]:5678")
		b.ReportAllocs()
		for b.Loop() {
			_, _ = peer(r)
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

func TestParseHeaderMode(t *testing.T) {
	tests := []struct {
		in   string
		want HeaderMode
		ok   bool
	}{
		{"", HeaderXForwardedFor, true},
		{"X-Forwarded-For", HeaderXForwardedFor, true},
		{" x-forwarded-for ", HeaderXForwardedFor, true},
		{"Forwarded", HeaderForwarded, true},
		{"FORWARDED", HeaderForwarded, true},
		{"X-Real-IP", 0, false},
		{"X-Forwarded-For, Forwarded", 0, false},
		{"auto", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseHeaderMode(tt.in)
		if tt.ok != (err == nil) || (tt.ok && got != tt.want) || (!tt.ok && !errors.Is(err, ErrInvalidOption)) {
			t.Errorf("ParseHeaderMode(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != map[HeaderMode]string{HeaderXForwardedFor: "X-Forwarded-For", HeaderForwarded: "Forwarded"}[got] {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
}

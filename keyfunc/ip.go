package keyfunc

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the IPv6 prefix length used when
// [IPOptions.IPv6Prefix] is zero.
//
// An IPv6 subscriber is commonly assigned at least a /64 (often a /56 or a
// /48), and may pick any address inside it. Keying by full address would let
// one client rotate through 2^64 keys, so addresses are grouped by /64. Use
// 56 where ISPs hand out /56s and the cost of grouping neighbours is
// acceptable; use 128 only when clients cannot choose their own addresses.
const DefaultIPv6Prefix = 64

// Bounds on forwarding headers. A header whose lines add up to more than
// MaxForwardedBytes (counting a comma between lines) is treated as malformed.
// At most MaxForwardedHops hops, counted from the right, are examined.
const (
	MaxForwardedBytes = 8 << 10
	MaxForwardedHops  = 64
)

// HeaderMode selects which forwarding header an [IPKeyer] reads when the
// immediate peer is a trusted proxy.
type HeaderMode int

const (
	// HeaderAuto reads X-Forwarded-For when the request has it and
	// Forwarded otherwise. X-Forwarded-For wins because it is what most
	// proxies write: preferring Forwarded would let a client smuggle a
	// spoofed Forwarded header through a proxy that only appends to
	// X-Forwarded-For. Conversely, behind a proxy that writes only
	// Forwarded, select HeaderForwarded, or a client could smuggle a spoofed
	// X-Forwarded-For.
	HeaderAuto HeaderMode = iota
	// HeaderXForwardedFor reads only X-Forwarded-For.
	HeaderXForwardedFor
	// HeaderForwarded reads only Forwarded (RFC 7239).
	HeaderForwarded
)

// IPOptions configures [NewIP]. The zero value keys by the immediate peer
// with IPv6 grouped by [DefaultIPv6Prefix], ignoring forwarding headers.
type IPOptions struct {
	// TrustedProxies lists the networks of proxies whose forwarding headers
	// are believed. Forwarding headers are read only when the immediate peer
	// (Request.RemoteAddr) is inside one of them. Host bits are ignored, and
	// IPv4-mapped IPv6 prefixes are converted to IPv4. See
	// [ParseTrustedProxies].
	TrustedProxies []netip.Prefix

	// IPv6Prefix is the prefix length, 32 to 128, by which IPv6 client
	// addresses are grouped into one key. Zero means [DefaultIPv6Prefix].
	IPv6Prefix int

	// Header selects the forwarding header; see [HeaderMode].
	Header HeaderMode
}

// IPKeyer derives keys from the client IP address. Create one with [NewIP];
// the zero value behaves like NewIP(IPOptions{}). An IPKeyer is immutable
// and safe for concurrent use.
type IPKeyer struct {
	trusted []netip.Prefix
	v6bits  int
	mode    HeaderMode
}

// NewIP returns an IPKeyer configured by opts, or an error matching
// [ErrInvalidOption] when IPv6Prefix is out of range, Header is unknown, or a
// trusted prefix is invalid.
func NewIP(opts IPOptions) (*IPKeyer, error) {
	bits := opts.IPv6Prefix
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if bits < 32 || bits > 128 {
		return nil, fmt.Errorf("%w: IPv6Prefix %d not in 32..128", ErrInvalidOption, opts.IPv6Prefix)
	}
	switch opts.Header {
	case HeaderAuto, HeaderXForwardedFor, HeaderForwarded:
	default:
		return nil, fmt.Errorf("%w: unknown HeaderMode %d", ErrInvalidOption, opts.Header)
	}
	var trusted []netip.Prefix
	for i, p := range opts.TrustedProxies {
		c, ok := canonicalPrefix(p)
		if !ok {
			return nil, fmt.Errorf("%w: trusted proxy %d (%v) is not a valid prefix", ErrInvalidOption, i+1, p)
		}
		trusted = append(trusted, c)
	}
	return &IPKeyer{trusted: trusted, v6bits: bits, mode: opts.Header}, nil
}

// canonicalPrefix masks p and turns an IPv4-mapped prefix into IPv4, since
// addresses are unmapped before they are matched.
func canonicalPrefix(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// ParseTrustedProxies parses a comma-separated list of CIDR prefixes, such as
// the value of a TRUSTED_PROXIES environment variable:
// "10.0.0.0/8, 192.0.2.7, 2001:db8::/32". A bare address stands for a /32
// (IPv4) or /128 (IPv6). White space around elements is ignored, and so are
// empty elements; an empty or blank string gives an empty list. Any other
// malformed element yields an error matching [ErrInvalidOption] that names
// the element and its position.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, elem := range strings.Split(s, ",") {
		elem = strings.TrimSpace(elem)
		if elem == "" {
			continue
		}
		var p netip.Prefix
		var err error
		if strings.Contains(elem, "/") {
			p, err = netip.ParsePrefix(elem)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(elem)
			if err == nil && a.Zone() != "" {
				err = fmt.Errorf("zone %q not allowed", a.Zone())
			}
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: trusted proxy element %d %q: %v", ErrInvalidOption, i+1, elem, err)
		}
		c, _ := canonicalPrefix(p)
		out = append(out, c)
	}
	return out, nil
}

var defaultIPKeyer IPKeyer

// IP is a Func keyed by the immediate peer address (Request.RemoteAddr),
// ignoring forwarding headers, with IPv6 grouped by [DefaultIPv6Prefix]. It
// is the right choice for a server that faces clients directly; behind a
// proxy use [NewIP] with TrustedProxies.
func IP(r *http.Request) (string, error) {
	return defaultIPKeyer.Key(r)
}

// Func returns k.Key as a Func.
func (k *IPKeyer) Func() Func { return k.Key }

// Key returns the key of the client address found by [IPKeyer.ClientAddr],
// rendered by [IPKeyer.AddrKey]. It fails, with an error matching
// [ErrNoKey], only when RemoteAddr cannot be parsed.
func (k *IPKeyer) Key(r *http.Request) (string, error) {
	a, err := k.ClientAddr(r)
	if err != nil {
		return "", err
	}
	if key, ok := textOf(a, r.RemoteAddr); ok {
		return key, nil
	}
	return k.AddrKey(a), nil
}

// textOf returns the host part of remoteAddr when it is already a's key: a
// plain IPv4 address in its one textual form, which saves making the key
// anew for the common request straight from a client.
func textOf(a netip.Addr, remoteAddr string) (string, bool) {
	if !a.Is4() {
		return "", false
	}
	var buf [len("255.255.255.255")]byte
	t := a.AppendTo(buf[:0])
	if len(remoteAddr) < len(t) || remoteAddr[:len(t)] != string(t) ||
		(len(remoteAddr) > len(t) && remoteAddr[len(t)] != ':') {
		return "", false
	}
	return remoteAddr[:len(t)], true
}

// ClientAddr returns the client address of r, unmapped and without zone.
//
// It starts from the immediate peer, parsed from r.RemoteAddr ("host:port",
// "[host]:port" or a bare host). If the peer is not a trusted proxy, the peer
// is the client. Otherwise the forwarding header (see [HeaderMode]; all its
// lines, in order, taken as one comma-separated list) is walked from the
// right, nearest hop first: trusted hops are skipped, and the first
// untrusted hop is the client; if every hop is trusted, the leftmost is. If
// the header is malformed or oversized, the peer is the client; if a hop is
// not an IP address (such as "unknown" or an obfuscated identifier), the walk
// stops and the last trusted address reached is the client. So a client can
// never choose its key by forging headers, only by reaching a trusted proxy
// that forwards its true address.
//
// ClientAddr fails with an error matching [ErrNoKey] when RemoteAddr cannot
// be parsed.
func (k *IPKeyer) ClientAddr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseNode(r.RemoteAddr, false)
	if !ok {
		return netip.Addr{}, fmt.Errorf("keyfunc: cannot parse RemoteAddr %q: %w", clip(r.RemoteAddr, 64), ErrNoKey)
	}
	if len(k.trusted) == 0 || !k.isTrusted(peer) {
		return peer, nil
	}
	return k.walk(r.Header, peer), nil
}

// AddrKey returns the canonical key of a: an IPv4 address (including an
// IPv4-mapped IPv6 address) as a dotted quad such as "192.0.2.1", and an IPv6
// address masked to the configured prefix length and written as a prefix
// such as "2001:db8:1:2::/64". Zones are dropped. AddrKey returns "" for the
// zero Addr.
func (k *IPKeyer) AddrKey(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.WithZone("").Unmap()
	var buf [64]byte
	if a.Is4() {
		return string(a.AppendTo(buf[:0]))
	}
	p := netip.PrefixFrom(a, k.bits()).Masked()
	return string(p.AppendTo(buf[:0]))
}

func (k *IPKeyer) bits() int {
	if k.v6bits == 0 {
		return DefaultIPv6Prefix
	}
	return k.v6bits
}

// isTrusted reports whether a, which must be unmapped and without zone, lies
// in a trusted prefix.
func (k *IPKeyer) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk finds the client address behind the trusted peer; see ClientAddr.
func (k *IPKeyer) walk(h http.Header, peer netip.Addr) netip.Addr {
	xff, fwd := h["X-Forwarded-For"], h["Forwarded"]
	var lines []string
	forwarded := false
	switch k.mode {
	case HeaderXForwardedFor:
		lines = xff
	case HeaderForwarded:
		lines, forwarded = fwd, true
	default:
		if len(xff) > 0 {
			lines = xff
		} else {
			lines, forwarded = fwd, true
		}
	}
	if len(lines) == 0 {
		return peer
	}
	total := len(lines) - 1
	for _, l := range lines {
		total += len(l)
	}
	if total > MaxForwardedBytes {
		return peer
	}
	var hops hopList
	for _, l := range lines {
		var ok bool
		if forwarded {
			ok = parseForwarded(l, &hops)
		} else {
			ok = parseXFF(l, &hops)
		}
		if !ok {
			return peer
		}
	}
	last := peer
	for i := 0; i < hops.len(); i++ {
		a, ok := parseNode(hops.fromRight(i), forwarded)
		if !ok {
			return last
		}
		if !k.isTrusted(a) {
			return a
		}
		last = a
	}
	return last
}

// clip shortens s to at most n bytes for use in error messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

package keyfunc

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// defaultIPv6Prefix is the IPv6 prefix length used when
// IPOptions.IPv6Prefix is zero.
//
// An IPv6 subscriber is commonly assigned at least a /64 (often a /56 or a
// /48), and may pick any address inside it. Keying by full address would let
// one client rotate through 2^64 keys, so addresses are grouped by /64. Use
// 56 where ISPs hand out /56s and the cost of grouping neighbours is
// acceptable; use 128 only when clients cannot choose their own addresses.
const defaultIPv6Prefix = 64

// Bounds on forwarding headers. A header whose lines add up to more than
// maxForwardedBytes (counting a comma between lines) is treated as malformed.
// At most maxForwardedHops hops, counted from the right, are examined.
const (
	maxForwardedBytes = 8 << 10
	maxForwardedHops  = 64
)

// HeaderMode selects the one forwarding header an [IPKeyer] reads when the
// immediate peer is a trusted proxy. The other header is ignored, whoever
// wrote it: a client behind a proxy that writes only one of them could
// otherwise choose its own address by sending the other.
type HeaderMode int

const (
	// HeaderXForwardedFor reads only X-Forwarded-For, which most proxies
	// write. It is the zero value.
	HeaderXForwardedFor HeaderMode = iota
	// HeaderForwarded reads only Forwarded (RFC 7239).
	HeaderForwarded
)

// String returns the header's name.
func (m HeaderMode) String() string {
	switch m {
	case HeaderXForwardedFor:
		return "X-Forwarded-For"
	case HeaderForwarded:
		return "Forwarded"
	}
	return fmt.Sprintf("HeaderMode(%d)", int(m))
}

// ParseHeaderMode reads the name of a forwarding header, such as the value
// of a TRUSTED_PROXY_HEADER environment variable. That is "X-Forwarded-For"
// or "Forwarded", in any case, with surrounding white space ignored. An
// empty string means X-Forwarded-For. Anything else gives an error matching
// [ErrInvalidOption].
func ParseHeaderMode(s string) (HeaderMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "x-forwarded-for":
		return HeaderXForwardedFor, nil
	case "forwarded":
		return HeaderForwarded, nil
	}
	return 0, fmt.Errorf("%w: forwarding header %q is neither X-Forwarded-For nor Forwarded", ErrInvalidOption, clip(s, 64))
}

// IPOptions configures [NewIP]. The zero value keys by the immediate peer
// with IPv6 grouped by /64, ignoring forwarding headers.
type IPOptions struct {
	// TrustedProxies lists the networks of proxies whose forwarding headers
	// are believed. Forwarding headers are read only when the immediate peer
	// (Request.RemoteAddr) is inside one of them. Host bits are ignored, and
	// IPv4-mapped IPv6 prefixes are converted to IPv4. See
	// [ParseNetworks].
	TrustedProxies []netip.Prefix

	// IPv6Prefix is the prefix length, 32 to 128, by which IPv6 client
	// addresses are grouped into one key. Zero means 64: a subscriber is
	// commonly assigned at least a /64, and may pick any address in it.
	// Addresses that carry an IPv4 address are keyed by it instead; see
	// [IPKeyer.AddrKey].
	IPv6Prefix int

	// Header selects the one forwarding header the trusted proxies write;
	// the zero value is X-Forwarded-For. See [HeaderMode].
	Header HeaderMode
}

// IPKeyer derives keys from the client IP address. Create one with [NewIP];
// the zero value behaves like NewIP([IPOptions]{}). An IPKeyer is immutable
// and safe for concurrent use.
type IPKeyer struct {
	trusted []netip.Prefix
	v6bits  int
	mode    HeaderMode
}

// NewIP returns an [IPKeyer] configured by opts, or an error matching
// [ErrInvalidOption] when IPv6Prefix is out of range, Header is unknown, or a
// trusted prefix is invalid.
func NewIP(opts IPOptions) (*IPKeyer, error) {
	bits := opts.IPv6Prefix
	if bits == 0 {
		bits = defaultIPv6Prefix
	}
	if bits < 32 || bits > 128 {
		return nil, fmt.Errorf("%w: IPv6Prefix %d not in 32..128", ErrInvalidOption, opts.IPv6Prefix)
	}
	switch opts.Header {
	case HeaderXForwardedFor, HeaderForwarded:
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

// ParseNetworks parses a comma-separated list of CIDR prefixes, such as the
// value of a TRUSTED_PROXIES environment variable:
// "10.0.0.0/8, 192.0.2.7, 2001:db8::/32". A bare address stands for a /32
// (IPv4) or /128 (IPv6). White space around elements is ignored, and so are
// empty elements; an empty or blank string gives an empty list. Any other
// malformed element yields an error matching [ErrInvalidOption] that names
// the element and its position.
func ParseNetworks(s string) ([]netip.Prefix, error) {
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
			return nil, fmt.Errorf("%w: network element %d %q: %v", ErrInvalidOption, i+1, elem, err)
		}
		c, _ := canonicalPrefix(p)
		out = append(out, c)
	}
	return out, nil
}

// Key returns the key of the client address found by [IPKeyer.ClientAddr],
// rendered by [IPKeyer.AddrKey]. It fails, with an error matching
// [ErrNoKey], when RemoteAddr cannot be parsed or a trusted proxy's
// forwarding header is bad ([ErrBadForwarding]); see ClientAddr.
func (k *IPKeyer) Key(r *http.Request) (string, error) {
	host, peer, plain := plainPeer(r.RemoteAddr)
	if plain && !k.isTrusted(peer) {
		return host, nil // the common request straight from a client
	}
	var a netip.Addr
	var err error
	if plain {
		a, err = k.walk(r.Header, peer) // a trusted peer
	} else {
		a, err = k.ClientAddr(r)
	}
	if err != nil {
		return "", err
	}
	if plain && a == peer {
		return host, nil
	}
	return k.AddrKey(a), nil
}

// plainPeer returns the host part of remoteAddr and its address when it is
// a plain IPv4 address in its one textual form, alone or with a port. That
// host part is then already the address's key, with nothing to allocate. It
// reports false for anything else, which parseNode is left to read.
func plainPeer(remoteAddr string) (string, netip.Addr, bool) {
	a, rest, ok := parseQuad(remoteAddr)
	if !ok || (rest != "" && (rest[0] != ':' || !validPort(rest[1:], false))) {
		return "", netip.Addr{}, false
	}
	return remoteAddr[:len(remoteAddr)-len(rest)], a, true
}

// parseQuad parses the IPv4 address at the start of s, written as netip
// writes one: four decimal octets of 0 to 255 without leading zeros, joined
// by dots. It returns the address and the rest of s.
func parseQuad(s string) (netip.Addr, string, bool) {
	var b [4]byte
	at, n, digits := 0, 0, 0 // the octet read, its value, its digits
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && at < 3 && digits > 0 {
			b[at], at, n, digits = byte(n), at+1, 0, 0
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		n, digits = n*10+int(c-'0'), digits+1
		if n > 255 || (digits > 1 && n < 10) { // n < 10: a leading zero
			return netip.Addr{}, s, false
		}
	}
	if at < 3 || digits == 0 {
		return netip.Addr{}, s, false
	}
	b[3] = byte(n)
	return netip.AddrFrom4(b), s[i:], true
}

// ClientAddr returns the client address of r, unmapped and without zone.
//
// It starts from the immediate peer, parsed from r.RemoteAddr ("host:port",
// "[host]:port" or a bare host). If the peer is not a trusted proxy, the
// peer is the client, and forwarding headers are ignored. Otherwise it
// walks the one forwarding header [IPOptions.Header] selects, taking all
// its lines, in order, as one comma-separated list. It walks from the
// right, nearest hop first: trusted hops are skipped, and the first
// untrusted hop is the client. If every hop is trusted, the leftmost is. A
// trusted peer that sends no such header is itself the client (a proxy's
// own health check, say). So a client can never choose its key by forging
// headers, only by reaching a trusted proxy that forwards its true address.
//
// ClientAddr fails with an error matching [ErrNoKey] when RemoteAddr cannot
// be parsed. It fails with [ErrBadForwarding] when a trusted peer's header
// is oversized (over 8 KiB), does not follow its grammar, or
// lists no hop. It also does when the walk stops at a hop that is not an IP
// address ("unknown", an obfuscated identifier, garbage). The client is
// then unknown: it is never taken to be the proxy, whose own key every such
// request would share.
func (k *IPKeyer) ClientAddr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseNode(r.RemoteAddr, false)
	if !ok {
		return netip.Addr{}, fmt.Errorf("keyfunc: cannot parse RemoteAddr %q: %w", clip(r.RemoteAddr, 64), ErrNoKey)
	}
	if len(k.trusted) == 0 || !k.isTrusted(peer) {
		return peer, nil
	}
	return k.walk(r.Header, peer)
}

// AddrKey returns the canonical key of a. An IPv4 address, IPv4-mapped
// included, is a dotted quad such as "192.0.2.1". An IPv6 address is masked
// to the configured prefix length and written as a prefix, such as
// "2001:db8:1:2::/64". An IPv6 address that carries an IPv4 one is keyed by
// it, so one IPv4 host gets one key and distinct hosts never share one. That
// covers 6to4 (2002::/16, RFC 3056), Teredo (2001::/32, RFC 4380), NAT64's
// well-known prefix (64:ff9b::/96, RFC 6052) and IPv4-compatible addresses
// (::/96 but :: and ::1, RFC 4291). The NAT64 local-use block
// (64:ff9b:1::/48, RFC 8215) holds translation prefixes of /48 to /96, and
// an address does not show its own. One in the /48's form (RFC 6052 section
// 2.2: bits 64-71 and 88-127 zero) is keyed by the IPv4 address in bits
// 48-63 and 72-87. Any other is keyed by its whole 128 bits, which one
// host's translator always writes alike. Zones are dropped. AddrKey returns
// "" for the zero Addr.
func (k *IPKeyer) AddrKey(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.WithZone("").Unmap()
	bits := k.bits()
	if v4, ok := embeddedIPv4(a); ok {
		a = v4
	} else if prefixNAT64Local.Contains(a) {
		bits = 128
	}
	var buf [64]byte
	if a.Is4() {
		return string(a.AppendTo(buf[:0]))
	}
	p := netip.PrefixFrom(a, bits).Masked()
	return string(p.AppendTo(buf[:0]))
}

// Transition prefixes whose addresses carry an IPv4 address.
var (
	prefixCompat     = netip.MustParsePrefix("::/96")
	prefix6to4       = netip.MustParsePrefix("2002::/16")
	prefixTeredo     = netip.MustParsePrefix("2001::/32")
	prefixNAT64      = netip.MustParsePrefix("64:ff9b::/96")
	prefixNAT64Local = netip.MustParsePrefix("64:ff9b:1::/48")
)

// embeddedIPv4 returns the IPv4 address that a, an unmapped address without
// zone, carries by a transition mechanism, and reports whether it carries
// one. See AddrKey for the mechanisms and where each puts the address.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case prefix6to4.Contains(a): // 2002:AABB:CCDD::/48
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case prefixTeredo.Contains(a): // the client's public address, inverted
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	case prefixNAT64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case prefixCompat.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case prefixNAT64Local.Contains(a) && b[8] == 0 && zeros(b[11:]):
		// RFC 6052's /48 form: IPv4 bits 0-15 at 48-63, the u octet
		// (64-71) zero, IPv4 bits 16-31 at 72-87, the suffix zero. An
		// address of a longer prefix whose IPv4 bits leave these zeros
		// reads as this form too: still one key per host of its translator.
		return netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}), true
	}
	return netip.Addr{}, false
}

// zeros reports whether every byte of b is zero.
func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (k *IPKeyer) bits() int {
	if k.v6bits == 0 {
		return defaultIPv6Prefix
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
func (k *IPKeyer) walk(h http.Header, peer netip.Addr) (netip.Addr, error) {
	name, forwarded := "X-Forwarded-For", false
	if k.mode == HeaderForwarded {
		name, forwarded = "Forwarded", true
	}
	lines := h[name]
	if len(lines) == 0 {
		return peer, nil
	}
	bad := func(why string) (netip.Addr, error) {
		return netip.Addr{}, fmt.Errorf("keyfunc: %s from trusted proxy %v: %s: %w", name, peer, why, ErrBadForwarding)
	}
	total := len(lines) - 1
	for _, l := range lines {
		total += len(l)
	}
	if total > maxForwardedBytes {
		return bad(fmt.Sprintf("%d bytes, over %d", total, maxForwardedBytes))
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
			return bad("malformed")
		}
	}
	if hops.len() == 0 {
		return bad("no hop")
	}
	var last netip.Addr
	for i := 0; i < hops.len(); i++ {
		a, ok := parseNode(hops.fromRight(i), forwarded)
		if !ok {
			return bad(fmt.Sprintf("hop %d from the right is not an IP address", i+1))
		}
		if !k.isTrusted(a) {
			return a, nil
		}
		last = a
	}
	return last, nil
}

// clip shortens s to at most n bytes for use in error messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

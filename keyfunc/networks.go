package keyfunc

import "net/netip"

// Networks sort client addresses for the limiters. A request from Block is
// refused before anything is counted. One from Exempt skips the budgets of
// the client address, never those of an account or a destination.
type Networks struct {
	Exempt []netip.Prefix
	Block  []netip.Prefix
}

// IsZero reports whether n lists no network.
func (n Networks) IsZero() bool { return len(n.Exempt) == 0 && len(n.Block) == 0 }

// Blocked reports whether a lies in a network of Block.
func (n Networks) Blocked(a netip.Addr) bool { return inAny(n.Block, a) }

// Exempted reports whether a lies in a network of Exempt.
func (n Networks) Exempted(a netip.Addr) bool { return inAny(n.Exempt, a) }

// inAny reports whether a, unmapped and without zone as ClientAddr returns
// it, lies in one of ps.
func inAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if c, ok := canonicalPrefix(p); ok && c.Contains(a) {
			return true
		}
	}
	return false
}

// CoversEvery returns the address families, "IPv4" and "IPv6", of which ps
// together hold every address: 0.0.0.0/0, say, or 0.0.0.0/1 with
// 128.0.0.0/1.
func CoversEvery(ps []netip.Prefix) []string {
	var cs []netip.Prefix
	for _, p := range ps {
		if c, ok := canonicalPrefix(p); ok {
			cs = append(cs, c)
		}
	}
	var out []string
	if covers(cs, netip.PrefixFrom(netip.IPv4Unspecified(), 0)) {
		out = append(out, "IPv4")
	}
	if covers(cs, netip.PrefixFrom(netip.IPv6Unspecified(), 0)) {
		out = append(out, "IPv6")
	}
	return out
}

// covers reports whether ps together hold every address of q. It splits q
// only where a prefix lies strictly inside it, so it takes at most some
// 2 × 128 steps a prefix.
func covers(ps []netip.Prefix, q netip.Prefix) bool {
	inside := false
	for _, p := range ps {
		if p.Addr().Is4() != q.Addr().Is4() {
			continue
		}
		if p.Bits() <= q.Bits() && p.Contains(q.Addr()) {
			return true
		}
		if p.Bits() > q.Bits() && q.Contains(p.Addr()) {
			inside = true
		}
	}
	if !inside || q.Bits() == q.Addr().BitLen() {
		return false
	}
	lo := netip.PrefixFrom(q.Addr(), q.Bits()+1)
	b := q.Addr().AsSlice()
	b[q.Bits()/8] |= 0x80 >> (q.Bits() % 8)
	hiAddr, _ := netip.AddrFromSlice(b)
	return covers(ps, lo) && covers(ps, netip.PrefixFrom(hiAddr, q.Bits()+1))
}

// The prefix lengths of the networks NetworksOf returns.
const (
	networkIPv4     = 24 // one organisation's or one hosting customer's
	networkIPv6     = 48 // one site's: a customer's, a free tunnel's
	networkIPv6Wide = 32 // one provider's, of many /48s
)

// NetworksOf returns the networks around a client's address key (see
// [IPKeyer.AddrKey]) that one client gets cheaply, so that budgets can
// count them too. An IPv4 address has its /24 (narrow), and wide is
// invalid. An IPv6 key has its /48 and /32, when the key is narrower than a
// /48. Any other key has none: it already names a network, or it is a
// NAT64 local-use address, whose IPv4 host it does not show.
func NetworksOf(key string) (narrow, wide netip.Prefix) {
	if a, rest, ok := parseQuad(key); ok && rest == "" {
		narrow, _ = a.Prefix(networkIPv4)
		return narrow, wide
	}
	p, err := netip.ParsePrefix(key)
	if err != nil || !p.Addr().Is6() || p.Bits() <= networkIPv6 || prefixNAT64Local.Overlaps(p) {
		return narrow, wide
	}
	narrow, _ = p.Addr().Prefix(networkIPv6)
	wide, _ = p.Addr().Prefix(networkIPv6Wide)
	return narrow, wide
}

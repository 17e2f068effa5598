package keyfunc

import (
	"net/netip"
	"strings"
)

// hopList keeps the last maxForwardedHops hops of a forwarding header, in
// a ring, without allocating.
type hopList struct {
	buf [maxForwardedHops]string
	n   int // hops added in total
}

func (h *hopList) add(s string) {
	h.buf[h.n%maxForwardedHops] = s
	h.n++
}

// len returns the number of hops kept.
func (h *hopList) len() int { return min(h.n, maxForwardedHops) }

// fromRight returns the i-th kept hop counting from the right, from 0.
func (h *hopList) fromRight(i int) string {
	return h.buf[(h.n-1-i)%maxForwardedHops]
}

// isOWS reports whether c is optional white space (RFC 9110).
func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// parseXFF adds the hops of one X-Forwarded-For line to hops. Empty list
// elements are skipped, as for any HTTP list. X-Forwarded-For has no grammar
// beyond that, so it always reports true; invalid hops are found when the
// walk parses them.
func parseXFF(line string, hops *hopList) bool {
	for elem := range strings.SplitSeq(line, ",") {
		elem = strings.Trim(elem, " \t")
		if elem == "" {
			continue
		}
		hops.add(elem)
	}
	return true
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseForwarded adds the for= node of each element of one Forwarded line
// (RFC 7239) to hops; an element without for= adds "", which is not an
// address. Empty list elements are skipped. White space is allowed around
// "," and ";" but not around "=". It reports false when the line does not
// follow the grammar or an element repeats for=.
func parseForwarded(line string, hops *hopList) bool {
	i := 0
	skipOWS := func() {
		for i < len(line) && isOWS(line[i]) {
			i++
		}
	}
	for {
		skipOWS()
		if i == len(line) {
			return true
		}
		if line[i] == ',' {
			i++
			continue
		}
		var forVal string
		hasFor := false
		for {
			skipOWS()
			if i == len(line) || line[i] == ',' {
				break
			}
			if line[i] == ';' {
				i++
				continue
			}
			start := i
			for i < len(line) && isTchar(line[i]) {
				i++
			}
			name := line[start:i]
			if name == "" || i == len(line) || line[i] != '=' {
				return false
			}
			i++
			var val string
			var ok bool
			val, i, ok = parseValue(line, i)
			if !ok {
				return false
			}
			if strings.EqualFold(name, "for") {
				if hasFor {
					return false
				}
				forVal, hasFor = val, true
			}
			skipOWS()
			if i < len(line) && line[i] != ';' && line[i] != ',' {
				return false
			}
		}
		hops.add(forVal)
	}
}

// parseValue parses a token or quoted-string starting at line[i] and
// returns its value and the index after it.
func parseValue(line string, i int) (string, int, bool) {
	if i < len(line) && line[i] == '"' {
		return parseQuoted(line, i)
	}
	start := i
	for i < len(line) && isTchar(line[i]) {
		i++
	}
	if i == start {
		return "", i, false
	}
	return line[start:i], i, true
}

// parseQuoted parses the quoted-string at line[i] (which is '"'). Without
// quoted-pairs it returns a substring; with them it builds the unescaped
// value.
func parseQuoted(line string, i int) (string, int, bool) {
	i++
	start := i
	escaped := false
	for ; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			if !escaped {
				return line[start:i], i + 1, true
			}
			return unescapeQuoted(line[start:i]), i + 1, true
		case c == '\\':
			i++
			if i == len(line) || !isQuotedPairChar(line[i]) {
				return "", i, false
			}
			escaped = true
		case !isQdtext(c):
			return "", i, false
		}
	}
	return "", i, false // unterminated
}

func isQdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5B) || (0x5D <= c && c <= 0x7E) || c >= 0x80
}

func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (0x21 <= c && c <= 0x7E) || c >= 0x80
}

// unescapeQuoted removes the backslashes of quoted-pairs from s, which the
// caller has checked.
func unescapeQuoted(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseNode parses a node as found in RemoteAddr, an X-Forwarded-For hop or
// a Forwarded for= value: "192.0.2.1", "192.0.2.1:80", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:80", an IPv6 address possibly with a
// zone. obfPort allows RFC 7239 obfuscated ports such as "_abc". It returns
// the address unmapped and without zone. It reports false for anything
// else, including "unknown" and obfuscated identifiers.
func parseNode(s string, obfPort bool) (netip.Addr, bool) {
	host, port, hasPort, bracketed := s, "", false, false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, bracketed = s[1:end], true
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, false
			}
			port, hasPort = rest[1:], true
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 with port.
		host, port, hasPort = s[:i], s[i+1:], true
	}
	if hasPort && !validPort(port, obfPort) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	if (bracketed && !a.Is6()) || (hasPort && !bracketed && !a.Is4()) {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// validPort reports whether p is a decimal port number 0..65535 or, when
// obf is set, an RFC 7239 obfuscated port.
func validPort(p string, obf bool) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		if !obf || len(p) == 1 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

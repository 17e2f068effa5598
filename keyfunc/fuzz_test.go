package keyfunc

import (
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// checkCanonicalKey fails t unless key is a canonical IP key: a dotted-quad
// IPv4 address or a masked IPv6 prefix of the given length, as netip
// renders them; a whole address (/128) in the NAT64 local-use block.
func checkCanonicalKey(t *testing.T, key string, bits int) {
	t.Helper()
	if strings.Contains(key, "/") {
		p, err := netip.ParsePrefix(key)
		if p.Bits() == 128 && prefixNAT64Local.Contains(p.Addr()) {
			bits = 128
		}
		if err != nil || !p.Addr().Is6() || p.Bits() != bits || p != p.Masked() || p.String() != key {
			t.Fatalf("key %q is not a canonical /%d IPv6 prefix", key, bits)
		}
		return
	}
	a, err := netip.ParseAddr(key)
	if err != nil || !a.Is4() || a.String() != key {
		t.Fatalf("key %q is not a canonical IPv4 address", key)
	}
}

// addrsIn returns every address that some piece of s parses as, ignoring
// brackets, quotes, ports and zones (netip allows any characters in a zone): an oracle, independent of the parser
// under test, for "this address appears in the header".
func addrsIn(s string) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool)
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(",;=\" \t\n\\[]", r) })
	}
	// A quoted string may escape any character (for="[1\::]" names 1::):
	// the fields of the header with its backslashes taken out count too.
	fields := append(split(s), split(strings.ReplaceAll(s, `\`, ""))...)
	for _, f := range fields {
		cands := []string{f}
		if i := strings.IndexByte(f, ':'); i >= 0 && strings.Count(f, ":") == 1 {
			cands = append(cands, f[:i])
		}
		if i := strings.IndexByte(f, '%'); i >= 0 { // a zone, which may hold anything
			cands = append(cands, f[:i])
		}
		for _, c := range cands {
			if a, err := netip.ParseAddr(c); err == nil {
				out[a.WithZone("").Unmap()] = true
			}
		}
	}
	return out
}

func FuzzForwardedHeaders(f *testing.F) {
	f.Add("198.51.100.1", "", true)
	f.Add("6.6.6.6, 198.51.100.1, 10.2.2.2", "", true)
	f.Add("10.3.3.3, 10.2.2.2", "", true)
	f.Add("198.51.100.1, unknown", "", true)
	f.Add("[2001:db8::1]:80, ::ffff:10.0.0.1, fe80::1%eth0", "", true)
	f.Add("", `for="[2001:db8:cafe::17]:4711"`, true)
	f.Add("", `for=192.0.2.60;proto=http;by=203.0.113.43, for="\[10.0.0.1\]"`, true)
	f.Add("", `for=198.51.100.1, for=_hidden, for=unknown;proto=https`, true)
	f.Add("", `for="198.51.100.1:_obf" ; host="a,b"`, true)
	f.Add("", `for=198.51.100.1, for="10.2.2.2`, true)
	f.Add("198.51.100.1", "for=6.6.6.6", false)
	ks := map[HeaderMode]*IPKeyer{}
	for _, m := range []HeaderMode{HeaderXForwardedFor, HeaderForwarded} {
		ks[m] = mustKeyer(f, IPOptions{TrustedProxies: mustPrefixes(f, "10.0.0.0/8, 2001:db8:ffff::/48"), Header: m})
	}
	f.Fuzz(func(t *testing.T, xff, fwd string, trustedPeer bool) {
		peerStr, peer := "203.0.113.9:1", netip.MustParseAddr("203.0.113.9")
		if trustedPeer {
			peerStr, peer = "10.1.1.1:1", netip.MustParseAddr("10.1.1.1")
		}
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peerStr
		r.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		r.Header["Forwarded"] = strings.Split(fwd, "\n")
		for m, k := range ks {
			// Only the header the mode selects is ever read.
			seen := addrsIn(xff)
			if m == HeaderForwarded {
				seen = addrsIn(fwd)
			}
			a, err := k.ClientAddr(r)
			if err != nil {
				if !trustedPeer || !errors.Is(err, ErrBadForwarding) || !errors.Is(err, ErrNoKey) {
					t.Fatalf("%v: ClientAddr: %v", m, err)
				}
				if _, kerr := k.Key(r); !errors.Is(kerr, ErrBadForwarding) {
					t.Fatalf("%v: ClientAddr failed (%v), Key gives %v", m, err, kerr)
				}
				continue
			}
			if !trustedPeer && a != peer {
				t.Fatalf("%v: untrusted peer, got client %v", m, a)
			}
			// The header is present, so a trusted peer never stands for
			// the client: the client is an address the header names.
			if trustedPeer && !seen[a] {
				t.Fatalf("%v: client %v is not an address in the header", m, a)
			}
			key, err := k.Key(r)
			if err != nil {
				t.Fatalf("%v: Key: %v", m, err)
			}
			checkCanonicalKey(t, key, defaultIPv6Prefix)
			if key != k.AddrKey(a) {
				t.Fatalf("%v: Key %q != AddrKey(ClientAddr) %q", m, key, k.AddrKey(a))
			}
		}
	})
}

func FuzzRemoteAddr(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:80", "192.0.2.1", "[2001:db8::1]:443", "2001:db8::1", "[fe80::1%eth0]:1",
		"fe80::1%eth0", "[::ffff:192.0.2.1]:1", "::ffff:192.0.2.1", "", "@", "[::1", "1.2.3.4:99999",
		"[1.2.3.4]:80", "01.2.3.4", "1.2.3.4:_x",
		// Transition addresses: 6to4, Teredo, NAT64, IPv4-compatible, NAT64
		// local use in the /48's form and of a longer prefix.
		"[2002:c000:204::1]:1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "[64:ff9b::c000:204]:1",
		"::192.0.2.7", "[::1]:1", "::", "64:ff9b:1:c000:2:400::", "[64:ff9b:1::c000:204]:1",
		"64:ff9b:1:c000:102:400::",
	} {
		f.Add(s, uint8(64))
	}
	f.Fuzz(func(t *testing.T, remote string, bits uint8) {
		k, err := NewIP(IPOptions{IPv6Prefix: int(bits)})
		if err != nil {
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("NewIP(%d): %v", bits, err)
			}
			return
		}
		b := int(bits)
		if b == 0 {
			b = defaultIPv6Prefix
		}
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		key, err := k.Key(r)
		if bare, perr := netip.ParseAddr(remote); perr == nil {
			if err != nil || key != k.AddrKey(bare) {
				t.Fatalf("Key(%q) = %q, %v; want %q", remote, key, err, k.AddrKey(bare))
			}
		}
		if err != nil {
			if !errors.Is(err, ErrNoKey) || key != "" {
				t.Fatalf("Key(%q) = %q, %v", remote, key, err)
			}
			return
		}
		checkCanonicalKey(t, key, b)
		if ap, perr := netip.ParseAddrPort(remote); perr == nil && key != k.AddrKey(ap.Addr()) {
			t.Fatalf("Key(%q) = %q, netip says %q", remote, key, k.AddrKey(ap.Addr()))
		}
		// An IPv6 client of a transition prefix has an IPv4 key, and one of
		// no such prefix an IPv6 key; the NAT64 local-use block has either.
		if a, ok := parseNode(remote, false); ok && a.Is6() && !prefixNAT64Local.Contains(a) {
			carries := prefix6to4.Contains(a) || prefixTeredo.Contains(a) || prefixNAT64.Contains(a) ||
				(prefixCompat.Contains(a) && !a.IsUnspecified() && !a.IsLoopback())
			if v4key := !strings.Contains(key, "/"); v4key != carries {
				t.Fatalf("Key(%q) = %q: an IPv4 key %v, a transition address %v", remote, key, v4key, carries)
			}
		}
	})
}

// FuzzPlainPeer checks plainPeer, the hand-written path of a plain IPv4
// peer, against parseNode, which reads the address with netip: plainPeer
// takes a RemoteAddr only when parseNode reads the same address from it and
// its host part is that address's key, and it takes every RemoteAddr whose
// host part is an IPv4 address in netip's form.
func FuzzPlainPeer(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1:80", "192.0.2.1", "0.0.0.0:0", "255.255.255.255:65535", "256.0.0.1:1",
		"01.2.3.4", "1.2.3.04:1", "1.2.3.4.5", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:_x",
		"1.2.3.4:1:2", "1.2.3.4%z", "[1.2.3.4]:80", "::ffff:1.2.3.4", "", ":", "1.2.3.",
	} {
		f.Add(s)
	}
	var k IPKeyer
	f.Fuzz(func(t *testing.T, remote string) {
		host, a, ok := plainPeer(remote)
		want, wantOK := parseNode(remote, false)
		if ok && (!wantOK || a != want || host != k.AddrKey(want)) {
			t.Fatalf("plainPeer(%q) = %q, %v; parseNode says %v, %v (key %q)", remote, host, a, want, wantOK, k.AddrKey(want))
		}
		h, _, _ := strings.Cut(remote, ":")
		if !ok && wantOK && want.Is4() && want.String() == h {
			t.Fatalf("plainPeer(%q) declined the IPv4 address %v in netip's form", remote, want)
		}
	})
}

// FuzzBodyField checks BodyField against the standard library's readers:
// whenever BodyField names an account, url.ParseQuery, encoding/json and
// mime/multipart, reading the same body, name the same one or none.
func FuzzBodyField(f *testing.F) {
	f.Add(uint8(0), "username=alice&password=x")
	f.Add(uint8(0), "username=alice&username=bob")
	f.Add(uint8(0), "username=alice&USERNAME=bob")
	f.Add(uint8(0), "user%6eame=a+b%21;x")
	f.Add(uint8(0), "a=1&&username=%zz")
	f.Add(uint8(1), `{"username":"alice","password":"x"}`)
	f.Add(uint8(1), `{"a":{"username":1},"USERNAME":"b","u\u017Fername":"c"}`)
	f.Add(uint8(1), `{"username":"al\ud800ice"} trailing`)
	f.Add(uint8(1), `[{"username":"x"}]`)
	f.Add(uint8(2), "--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nalice\r\n--B--\r\n")
	f.Add(uint8(2), "--B\r\nContent-Disposition: form-data; name=\"username\"; filename=\"a\"\r\n\r\nalice\r\n--B--\r\n")
	f.Add(uint8(2), "--B\r\nContent-Disposition: form-data; name=\"Username\"\r\n\r\nalice\r\n--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nbob\r\n--B--\r\n")
	opts := BodyOptions{MaxBytes: 512}
	f.Fuzz(func(t *testing.T, kind uint8, body string) {
		ct := [...]string{ctForm, ctJSON, ctMultipart}[kind%3]
		r := bodyRequest(http.MethodPost, ct, body)
		key, err := field("username", opts)(r)
		rest, rerr := io.ReadAll(r.Body)
		if rerr != nil || string(rest) != body {
			t.Fatalf("body not restored: %q, %v", rest, rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrNoKey) || key != "" {
				t.Fatalf("BodyField = %q, %v", key, err)
			}
		} else if key == "" || len(key) > DefaultMaxValueBytes {
			t.Fatalf("BodyField key %q out of bounds", key)
		}
		if len(body) > 512 {
			if !errors.Is(err, ErrBodyTooLarge) {
				t.Fatalf("body of %d bytes over bound: %v", len(body), err)
			}
			return
		}
		switch kind % 3 {
		case 1:
			// When the handler's decoding succeeds, it sees our key.
			var v struct {
				Username string `json:"username"`
			}
			if err == nil && json.Unmarshal([]byte(body), &v) == nil && v.Username != key {
				t.Fatalf("BodyField = %q, encoding/json sees %q", key, v.Username)
			}
		case 2:
			form, ferr := multipart.NewReader(strings.NewReader(body), "B").ReadForm(1 << 20)
			if err == nil && ferr == nil && len(form.Value["username"]) > 0 && (len(form.Value["username"]) != 1 || form.Value["username"][0] != key) {
				t.Fatalf("BodyField = %q, mime/multipart sees %q", key, form.Value["username"])
			}
			if ferr == nil {
				form.RemoveAll()
			}
		default:
			vs, perr := url.ParseQuery(body)
			if err == nil && len(vs["username"]) > 0 && (len(vs["username"]) != 1 || vs["username"][0] != key) {
				t.Fatalf("BodyField = %q, url.ParseQuery sees %q", key, vs["username"])
			}
			n := 0
			for k, v := range vs {
				if strings.EqualFold(k, "username") {
					n += len(v)
				}
			}
			if perr == nil && n == 1 && len(vs["username"]) == 1 && vs["username"][0] != "" && len(vs["username"][0]) <= DefaultMaxValueBytes && err != nil {
				t.Fatalf("BodyField failed (%v) where url.ParseQuery sees %q", err, vs["username"])
			}
		}
	})
}

func fuzzNormalize(f *testing.F, normalize func(string) (string, error), seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := normalize(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAccount) || out != "" {
				t.Fatalf("normalize(%q) = %q, %v", s, out, err)
			}
			return
		}
		if out == "" {
			t.Fatalf("normalize(%q) = empty, no error", s)
		}
		again, err := normalize(out)
		if err != nil || again != out {
			t.Fatalf("not idempotent: normalize(%q) = %q; normalize(%q) = %q, %v", s, out, out, again, err)
		}
	})
}

func FuzzNormalizeUsername(f *testing.F) {
	fuzzNormalize(f, NormalizeUsername, "alice", " Alice ", "ＡＬＩＣＥ", "Cafe\u0301", "ali ce", "\xff", "ß", "İstanbul", "ΣΑΣ")
}

func FuzzNormalizeEmail(f *testing.F) {
	fuzzNormalize(f, NormalizeEmail, "Alice@Example.COM ", "alice＠example．com", "Straße@x.de", "a@b@c", "@x", "a@x..y", "ﬁ@ﬂ.example", "İ@x", "\u0345@x")
}

func FuzzNormalizePhone(f *testing.F) {
	fuzzNormalize(f, NormalizePhone, "+1 (415) 555-0100", "＋１４１５５５５０１００", "0207.946.0000", "+", "1+2", "123456", "⁺¹²³⁴⁵⁶⁷")
}

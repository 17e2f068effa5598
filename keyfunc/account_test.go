package keyfunc

import (
	"errors"
	"strings"
	"testing"
)

type normCase struct {
	in   string
	want string // "" means rejected
}

func testNormalize(t *testing.T, name string, f func(string) (string, error), cases []normCase) {
	t.Helper()
	for _, c := range cases {
		got, err := f(c.in)
		if c.want == "" {
			if !errors.Is(err, ErrInvalidAccount) || !errors.Is(err, ErrNoKey) {
				t.Errorf("%s(%q) = %q, %v; want ErrInvalidAccount", name, c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s(%q) = %q, %v; want %q", name, c.in, got, err, c.want)
			continue
		}
		if again, err := f(got); err != nil || again != got {
			t.Errorf("%s not idempotent on %q: %q, %v", name, got, again, err)
		}
	}
}

func TestNormalizeUsername(t *testing.T) {
	testNormalize(t, "NormalizeUsername", NormalizeUsername, []normCase{
		{"alice", "alice"},
		{"  Alice\t", "alice"},
		{"ALICE", "alice"},
		{"ＡＬＩＣＥ", "alice"}, // full width
		{"ÉCOLE", "école"},
		{"Ǆemal", ""},                      // compatibility character disallowed
		{"Cafe\u0301", "café"},             // NFC
		{"café", "café"},                   // precomposed
		{"user.name-1_x", "user.name-1_x"}, // ASCII punctuation allowed
		{"", ""},
		{"   ", ""},
		{"alice smith", ""}, // inner space disallowed
		{"ali\u0000ce", ""},
		{"ali\u200Bce", ""}, // zero-width space
		{"\xff", ""},
		{strings.Repeat("a", maxUsername), strings.Repeat("a", maxUsername)},
		{strings.Repeat("a", maxUsername+1), ""},
		{strings.Repeat("a", maxAccountInput+1), ""},
	})
}

func TestNormalizeEmail(t *testing.T) {
	testNormalize(t, "NormalizeEmail", NormalizeEmail, []normCase{
		{"alice@example.com", "alice@example.com"},
		{"Alice@Example.COM ", "alice@example.com"},
		{"\tALICE@EXAMPLE.COM\n", "alice@example.com"},
		{"alice＠example．com", "alice@example.com"}, // full-width @ and dot
		{"alice+tag@example.com", "alice+tag@example.com"},
		{"a.l.i.c.e@example.com", "a.l.i.c.e@example.com"},
		{"Straße@example.de", "strasse@example.de"},
		{"JÖRG@BÜCHER.example", "jörg@bücher.example"},
		{"a@b", "a@b"},
		{"", ""},
		{"alice", ""},
		{"@example.com", ""},
		{"alice@", ""},
		{"a@b@example.com", ""},
		{`"a@b"@example.com`, ""},
		{"alice smith@example.com", ""},
		{"alice@exa mple.com", ""},
		{"alice\u00A0@example.com", ""}, // NBSP becomes a space
		{"alice@example..com", ""},
		{"alice@.example.com", ""},
		{"alice@example.com.", ""},
		{"ali\x01ce@example.com", ""},
		{"\xffa@example.com", ""},
		{strings.Repeat("a", 65) + "@example.com", ""},
		{strings.Repeat("a", 64) + "@example.com", strings.Repeat("a", 64) + "@example.com"},
		{"a@" + strings.Repeat("b", 252), "a@" + strings.Repeat("b", 252)},
		{"a@" + strings.Repeat("b", 253), ""},
	})
	a, _ := NormalizeEmail("Alice@Example.COM ")
	b, _ := NormalizeEmail("alice@example.com")
	if a != b {
		t.Errorf("NormalizeEmail spellings differ: %q vs %q", a, b)
	}
}

func TestNormalizePhone(t *testing.T) {
	testNormalize(t, "NormalizePhone", NormalizePhone, []normCase{
		{"+1 (415) 555-0100", "+14155550100"},
		{"+14155550100", "+14155550100"},
		{" +44 20.7946.0000 ", "+442079460000"},
		{"0207 946 0000", "02079460000"},
		{"＋１４１５５５５０１００", "+14155550100"}, // full width
		{"1234567", "1234567"},
		{"123456", ""},
		{"+123456789012345", "+123456789012345"},
		{"+1234567890123456", ""},
		{"", ""},
		{"+", ""},
		{"1+4155550100", ""},
		{"++14155550100", ""},
		{"+1 415 555 0100 ext 2", ""},
		{"+1/415/5550100", ""},
		{"٤١٥٥٥٥٠١٠٠", ""}, // Arabic-Indic digits are not ASCII
	})
}

func BenchmarkNormalize(b *testing.B) {
	for _, bc := range []struct {
		name string
		f    func(string) (string, error)
		in   string
	}{
		{"username", NormalizeUsername, " Alice "},
		{"email", NormalizeEmail, "Alice@Example.COM "},
		{"phone", NormalizePhone, "+1 (415) 555-0100"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.f(bc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

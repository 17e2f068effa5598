package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readVars returns every variable Parse reads, over environments that
// take each path of the store's choice.
func readVars() []string {
	seen := map[string]bool{}
	for _, kv := range [][]string{
		nil,
		{"DATABASE_URL", "postgres://h/db", "GATECOUNT_SECRET", secret},
		{"RATE_LIMIT_STORE", "redis", "REDIS_URL", "redis://h", "GATECOUNT_SECRET", secret},
		{"RATE_LIMIT_STORE_URL", "redis://h", "TRUSTED_PROXIES", "10.0.0.0/8", "GATECOUNT_SECRET", secret},
	} {
		lookup := env(kv...)
		Parse(func(k string) (string, bool) { seen[k] = true; return lookup(k) })
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The environment table of docs/operators.md and this package's doc list
// every variable Parse reads, and nothing it does not.
func TestEveryVariableDocumented(t *testing.T) {
	want := readVars()
	readme, err := os.ReadFile("../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Environment variables\n")
	if !ok {
		t.Fatal("docs/operators.md has no section \"Environment variables\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage config")
	for _, tc := range []struct {
		where string
		row   *regexp.Regexp
		text  string
	}{
		{"docs/operators.md's environment table", regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|"), section},
		{"the package doc", regexp.MustCompile(`(?m)^//\t([A-Z0-9_]+) `), doc},
	} {
		var got []string
		for _, m := range tc.row.FindAllStringSubmatch(tc.text, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists\n%v\nParse reads\n%v", tc.where, got, want)
		}
	}
}

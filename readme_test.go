package gatecount_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The documents whose Go blocks must compile and whose sentences are
// measured: README.md and every guide in docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) == 0 {
		t.Fatal("docs/ holds no guide")
	}
	return append([]string{"README.md"}, guides...)
}

// goBlock is a ```go block of a document.
type goBlock struct {
	file string
	line int // the line of its first Go line
	text string
}

// goBlocks returns the ```go blocks of a document.
func goBlocks(file, doc string) []goBlock {
	var out []goBlock
	start := 0
	var block []string
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case start == 0 && line == "```go":
			start, block = i+2, nil
		case start != 0 && line == "```":
			out = append(out, goBlock{file, start, strings.Join(block, "\n")})
			start = 0
		case start != 0:
			block = append(block, line)
		}
	}
	return out
}

// TestDocGoBlocks: every Go block of README.md and docs/*.md compiles.
//
// The convention: a block that starts with a package clause is a whole
// file, and compiles as written. Any other block is a fragment: its import
// lines are kept, and the rest is either top-level declarations or, if it
// does not parse as those, statements, compiled as the body of a function
// with no parameters and no results. A fragment may leave out the imports
// of the packages it names: the package names of wellKnown are imported
// for it. In a fragment, a variable or an import left unused is no error.
//
// A block that imports what only another module of this repository
// requires (metrics/prometheus, metrics/otel, examples/chi,
// examples/gorilla) is not compiled here, which would build that module's
// dependencies in every run of go test ./... of this one. It must instead
// be the start of the body of an Example function of that module, in a
// file that imports what the block imports; that module's own tests
// compile and run it.
func TestDocGoBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the export data of every package the documents import")
	}
	var blocks []goBlock
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, goBlocks(file, string(doc))...)
	}
	if len(blocks) == 0 {
		t.Fatal("no document has a Go block")
	}
	type checked struct {
		b    goBlock
		fset *token.FileSet
		f    *ast.File
		frag bool
	}
	byModule := map[string][]checked{}
	for _, b := range blocks {
		fset := token.NewFileSet()
		src, frag, err := wrap(b.text)
		if err != nil {
			t.Errorf("%s:%d: %v", b.file, b.line, err)
			continue
		}
		f, err := parser.ParseFile(fset, fmt.Sprintf("%s:%d", b.file, b.line), src, 0)
		if err != nil {
			t.Errorf("%s:%d: the Go block does not parse: %v", b.file, b.line, err)
			continue
		}
		mod := moduleOf(f)
		if mod != "." {
			if err := startsExample(mod, b.text); err != nil {
				t.Errorf("%s:%d: %v", b.file, b.line, err)
			}
			continue
		}
		byModule[mod] = append(byModule[mod], checked{b, fset, f, frag})
	}
	mods := mapsKeys(byModule)
	slices.Sort(mods)
	for _, mod := range mods {
		var paths []string
		for _, c := range byModule[mod] {
			for _, spec := range c.f.Imports {
				p, _ := strconv.Unquote(spec.Path.Value)
				if !slices.Contains(paths, p) {
					paths = append(paths, p)
				}
			}
		}
		exports, err := exportData(mod, paths)
		if err != nil {
			t.Errorf("module %s: %v", mod, err)
			continue
		}
		for _, c := range byModule[mod] {
			imp := importer.ForCompiler(c.fset, "gc", func(path string) (io.ReadCloser, error) {
				file, ok := exports[path]
				if !ok {
					return nil, fmt.Errorf("no export data for %q", path)
				}
				return os.Open(file)
			})
			var errs []error
			conf := types.Config{Importer: imp, Error: func(err error) {
				var te types.Error
				if errors.As(err, &te) && te.Soft && c.frag {
					return // an unused variable or import of a fragment
				}
				errs = append(errs, err)
			}}
			conf.Check("doc", c.fset, []*ast.File{c.f}, nil)
			for _, err := range errs {
				t.Errorf("%s:%d: the Go block does not compile (line numbers count from the block's first line, after the imports added): %v", c.b.file, c.b.line, err)
			}
		}
	}
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// startsExample returns an error unless block is the start of the body of
// an Example function in the Go files of directory dir, in a file that
// imports every package the block imports.
func startsExample(dir, block string) error {
	imports, rest := splitImports(strings.Split(block, "\n"))
	for len(rest) > 0 && strings.TrimSpace(rest[len(rest)-1]) == "" {
		rest = rest[:len(rest)-1]
	}
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || found || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, text, 0)
		if err != nil {
			return err
		}
		paths := map[string]bool{}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			paths[p] = true
		}
		for _, spec := range imports {
			fields := strings.Fields(spec.line)
			if p, _ := strconv.Unquote(fields[len(fields)-1]); !paths[p] {
				return nil
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			start := fset.Position(fn.Body.Lbrace).Offset + 1
			end := fset.Position(fn.Body.Rbrace).Offset
			body := strings.Split(strings.TrimPrefix(string(text[start:end]), "\n"), "\n")
			for i, l := range body {
				body[i] = strings.TrimRight(strings.TrimPrefix(l, "\t"), " \t")
			}
			if len(body) >= len(rest) && slices.Equal(body[:len(rest)], rest) {
				found = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("the Go block needs module %s, and is not the start of an Example's body there (in a file with its imports)", dir)
	}
	return nil
}

// wellKnown maps the package names a fragment may use without importing
// them to their import paths.
var wellKnown = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"expvar":     "expvar",
	"fmt":        "fmt",
	"http":       "net/http",
	"httptest":   "net/http/httptest",
	"io":         "io",
	"log":        "log",
	"os":         "os",
	"slog":       "log/slog",
	"strings":    "strings",
	"testing":    "testing",
	"time":       "time",
	"url":        "net/url",
	"gatecount":  "github.com/gatecount/gatecount",
	"config":     "github.com/gatecount/gatecount/config",
	"keyfunc":    "github.com/gatecount/gatecount/keyfunc",
	"limiter":    "github.com/gatecount/gatecount/limiter",
	"metrics":    "github.com/gatecount/gatecount/metrics",
	"middleware": "github.com/gatecount/gatecount/middleware",
	"challenge":  "github.com/gatecount/gatecount/middleware/challenge",
	"store":      "github.com/gatecount/gatecount/store",
	"memory":     "github.com/gatecount/gatecount/store/memory",
	"postgres":   "github.com/gatecount/gatecount/store/postgres",
	"sqlite":     "github.com/gatecount/gatecount/store/sqlite",
	"storetest":  "github.com/gatecount/gatecount/store/storetest",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"sdkmetric":  "go.opentelemetry.io/otel/sdk/metric",
}

// modules maps an import path prefix to the module, a directory of this
// repository, that requires it.
var modules = map[string]string{
	"github.com/gatecount/gatecount/metrics/prometheus": "metrics/prometheus",
	"github.com/prometheus/":                            "metrics/prometheus",
	"github.com/gatecount/gatecount/metrics/otel":       "metrics/otel",
	"go.opentelemetry.io/":                              "metrics/otel",
	"github.com/go-chi/chi/":                            "examples/chi",
	"github.com/gorilla/mux":                            "examples/gorilla",
}

// moduleOf returns the module a file's imports need.
func moduleOf(f *ast.File) string {
	for _, spec := range f.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)
		for prefix, mod := range modules {
			if strings.HasPrefix(p, prefix) {
				return mod
			}
		}
	}
	return "."
}

// wrap returns the source file of a block, and whether it is a fragment.
func wrap(block string) (src string, frag bool, err error) {
	lines := strings.Split(block, "\n")
	for _, l := range lines {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "//") {
			continue
		}
		if strings.HasPrefix(l, "package ") {
			return block, false, nil
		}
		break
	}
	imports, rest := splitImports(lines)
	body := strings.Join(rest, "\n")
	decls := true
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body+"\n", 0); err != nil {
		decls = false
		body = "func _() {\n" + body + "\n}"
	}
	// Import the well-known packages the fragment names and does not
	// import, unless it declares the name itself.
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body+"\n", 0)
	if err != nil {
		if decls {
			return "", false, err
		}
		return "", false, fmt.Errorf("the Go block parses neither as declarations nor as statements: %v", err)
	}
	declared := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.FuncDecl:
			declared[n.Name.Name] = true
		case *ast.TypeSpec:
			declared[n.Name.Name] = true
		}
		return true
	})
	have := map[string]bool{}
	for _, spec := range imports {
		have[spec.name] = true
	}
	var added []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || have[id.Name] || declared[id.Name] {
			return true
		}
		if path, ok := wellKnown[id.Name]; ok {
			have[id.Name] = true
			added = append(added, id.Name+" "+strconv.Quote(path))
		}
		return true
	})
	var b strings.Builder
	b.WriteString("package main\n\n")
	for _, spec := range imports {
		b.WriteString("import " + spec.line + "\n")
	}
	for _, p := range added {
		b.WriteString("import " + p + "\n")
	}
	b.WriteString(body + "\n")
	return b.String(), true, nil
}

// importSpec is one import of a fragment.
type importSpec struct {
	line string // as written after "import"
	name string // the name it binds
}

// splitImports returns the imports a block starts with, and the lines
// after them.
func splitImports(block []string) (imports []importSpec, rest []string) {
	inGroup := false
	for i, line := range block {
		spec := ""
		switch {
		case inGroup && strings.TrimSpace(line) == ")":
			inGroup = false
			continue
		case inGroup:
			spec = line
		case line == "import (":
			inGroup = true
			continue
		case strings.HasPrefix(line, "import "):
			spec = strings.TrimPrefix(line, "import ")
		case strings.TrimSpace(line) == "":
			continue
		default:
			return imports, block[i:]
		}
		spec, _, _ = strings.Cut(spec, "//")
		fields := strings.Fields(spec)
		if len(fields) == 0 {
			continue
		}
		path, err := strconv.Unquote(fields[len(fields)-1])
		if err != nil {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) {
			p := strings.TrimSuffix(path, "/"+name)
			name = p[strings.LastIndex(p, "/")+1:]
		}
		if len(fields) == 2 {
			name = fields[0]
		}
		imports = append(imports, importSpec{strings.Join(fields, " "), name})
	}
	return imports, nil
}

// exportData builds the packages paths, in module dir, and returns the
// export data file of each and of their dependencies.
func exportData(dir string, paths []string) (map[string]string, error) {
	args := append([]string{"list", "-e", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{with .Error}}{{.Err}}{{end}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	exports := map[string]string{}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.SplitN(line, "\t", 3)
		if len(fields) < 2 {
			continue
		}
		if len(fields) == 3 && fields[2] != "" {
			errs = append(errs, fmt.Errorf("%s: %s", fields[0], fields[2]))
		}
		if fields[1] != "" {
			exports[fields[0]] = fields[1]
		}
	}
	return exports, errors.Join(errs...)
}

// TestDocSentences: README's sentences average at most 16 words, and no
// sentence of README.md or docs/*.md runs past 40.
//
// How it counts: code blocks (fenced or indented), tables, headings, HTML
// comments and blank lines are left out. A sentence ends at '.', '!' or
// '?' followed by a space or the end of a line, and at the end of a
// paragraph or of a list item. Words are the runs of text between spaces.
func TestDocSentences(t *testing.T) {
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := sentences(string(doc))
		if len(s) == 0 {
			t.Errorf("%s: no sentence", file)
			continue
		}
		words := 0
		for _, sen := range s {
			n := len(strings.Fields(sen))
			words += n
			if n > 40 {
				t.Errorf("%s: a sentence of %d words: %q", file, n, sen)
			}
		}
		avg := float64(words) / float64(len(s))
		t.Logf("%s: %d sentences, %.1f words on average", file, len(s), avg)
		if file == "README.md" && avg > 16 {
			t.Errorf("README.md: sentences average %.1f words, want at most 16", avg)
		}
	}
}

var sentenceEnd = regexp.MustCompile(`[.!?]["')*_]*(\s|$)`)

// sentences returns the sentences of a Markdown document's prose.
func sentences(doc string) []string {
	var out []string
	var para []string
	flush := func() {
		text := strings.Join(para, " ")
		para = nil
		for text != "" {
			loc := sentenceEnd.FindStringIndex(text)
			end := len(text)
			if loc != nil {
				end = loc[1]
			}
			if s := strings.TrimSpace(text[:end]); s != "" {
				out = append(out, s)
			}
			text = text[end:]
		}
	}
	fenced, comment := false, false
	listItem := regexp.MustCompile(`^\s*([-*]|[0-9]+\.)\s`)
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fenced = !fenced
			continue
		case fenced:
			continue
		case comment || strings.HasPrefix(trimmed, "<!--"):
			flush()
			comment = !strings.Contains(trimmed, "-->")
			continue
		case trimmed == "", strings.HasPrefix(trimmed, "#"), strings.HasPrefix(trimmed, "|"):
			flush()
			continue
		case strings.HasPrefix(line, "    ") && len(para) == 0, strings.HasPrefix(line, "\t"):
			flush() // an indented code block
			continue
		case listItem.MatchString(line):
			flush()
			line = listItem.ReplaceAllString(line, "")
		}
		para = append(para, strings.TrimSpace(line))
	}
	flush()
	return out
}

// TestDocsNameEverything: every environment variable, log kind, route,
// command and flag the code reads or writes is named in README.md,
// docs/*.md or CONTRIBUTING.md (which names the test variables).
//
// It reads the Go files that are not tests: string literals naming a
// RATE_LIMIT_ or GATECOUNT_ variable, a limit- log kind or a route pattern
// ("POST /login"); the flags that cmd/ and tools/cmd/ define; and the
// subcommands of cmd/gatecount.
func TestDocsNameEverything(t *testing.T) {
	var docs strings.Builder
	for _, file := range append(docFiles(t), "CONTRIBUTING.md") {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	text := docs.String()
	variable := regexp.MustCompile(`^(RATE_LIMIT|GATECOUNT)_[A-Z0-9_]+$|^limit-[a-z]+-[a-z-]+$|^(GET|POST|PUT|PATCH|DELETE) /[a-z/.-]*$`)
	flagFuncs := []string{"String", "StringVar", "Bool", "BoolVar", "Int", "IntVar", "Duration", "DurationVar", "Var", "Float64", "Float64Var"}
	want := map[string]string{} // name → where it was found
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		isCmd := strings.HasPrefix(path, "cmd/") || strings.HasPrefix(path, "tools/cmd/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && variable.MatchString(s) {
					want[s] = fset.Position(n.Pos()).String()
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !isCmd || !ok || !slices.Contains(flagFuncs, sel.Sel.Name) {
					return true
				}
				arg := 0
				if strings.HasSuffix(sel.Sel.Name, "Var") {
					arg = 1
				}
				if len(n.Args) <= arg {
					return true
				}
				if lit, ok := n.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, _ := strconv.Unquote(lit.Value)
					want["-"+name] = fset.Position(lit.Pos()).String()
				}
			case *ast.CaseClause:
				if path != filepath.Join("cmd", "gatecount", "main.go") {
					return true
				}
				for _, e := range n.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						name, _ := strconv.Unquote(lit.Value)
						if !strings.HasPrefix(name, "-") && name != "help" {
							want["gatecount "+name] = fset.Position(lit.Pos()).String()
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 50 {
		t.Fatalf("found only %d names to look for: %v", len(want), want)
	}
	t.Logf("%d names", len(want))
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !strings.Contains(text, name) {
			t.Errorf("%s (%s) is named in no document", name, want[name])
		}
	}
}

// TestDocLengths: README.md and each guide hold at most 2,500 words
// (counted as wc -w counts them), and README.md shows a complete program,
// a Go block with a package clause, within its first 100 lines.
func TestDocLengths(t *testing.T) {
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Fields(string(doc))); n > 2500 {
			t.Errorf("%s: %d words, want at most 2,500", file, n)
		}
		if file != "README.md" {
			continue
		}
		first := 0
		for _, b := range goBlocks(file, string(doc)) {
			if strings.HasPrefix(b.text, "package main\n") {
				first = b.line
				break
			}
		}
		if first == 0 || first > 100 {
			t.Errorf("README.md: the first complete program starts on line %d, want a line within the first 100", first)
		}
	}
}

// TestDocLinks: every relative link of README.md and docs/*.md names a file
// of the repository, and a heading of it when it names an anchor.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range docFiles(t) {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(doc), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.Join(filepath.Dir(file), path)
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", file, target, err)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(string(text)), anchor) {
				t.Errorf("%s: link %q: %s has no heading %q", file, target, path, anchor)
			}
		}
	}
}

// anchors returns the anchors GitHub gives a Markdown document's headings.
func anchors(doc string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

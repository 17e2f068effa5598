package gatecount_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goSource is what the Go files of this repository (every module) hold that
// a README block may show.
type goSource struct {
	// bodies are the bodies of Example functions, one tab of indentation
	// removed, each with the imports of its file.
	bodies []goPart
	// decls are the top-level declarations, with their doc comments.
	decls []goPart
}

// goPart is a piece of a Go file.
type goPart struct {
	file    string
	lines   []string
	imports []string
}

// TestREADMEGoBlocks: every Go block of README.md compiles as written and
// is tested. It is the start of an Example function's body (which runs as
// a test, or compiles where it needs a server), or a whole declaration of a
// Go file here, or only imports of packages here. The imports a block
// shows are among its file's.
func TestREADMEGoBlocks(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src := readGoSource(t)
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block")
	}
	for _, line := range slices.Sorted(maps.Keys(blocks)) {
		imports, rest := splitImports(blocks[line])
		if err := parses(rest); err != nil {
			t.Errorf("README.md:%d: the Go block does not parse: %v", line, err)
			continue
		}
		if len(rest) == 0 {
			for _, path := range imports {
				if !hasPackage(path) {
					t.Errorf("README.md:%d: import %q is no package of this repository", line, path)
				}
			}
			continue
		}
		if !src.shows(imports, rest) {
			t.Errorf("README.md:%d: the Go block starting %q is neither the start of an Example's body nor a declaration of a Go file here (with its imports)", line, rest[0])
		}
	}
}

// goBlocks returns README's ```go blocks, by the line each starts on.
func goBlocks(readme string) map[int][]string {
	out := map[int][]string{}
	start := 0
	var block []string
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case start == 0 && line == "```go":
			start, block = i+2, []string{}
		case start != 0 && line == "```":
			out[start] = block
			start = 0
		case start != 0:
			block = append(block, strings.TrimRight(line, " \t"))
		}
	}
	return out
}

// splitImports returns the import paths of the import lines a block starts
// with, and the lines after them.
func splitImports(block []string) (imports, rest []string) {
	inGroup := false
	for i, line := range block {
		spec := ""
		switch {
		case inGroup && line == ")":
			inGroup = false
			continue
		case inGroup:
			spec = line
		case line == "import (":
			inGroup = true
			continue
		case strings.HasPrefix(line, "import "):
			spec = strings.TrimPrefix(line, "import ")
		case line == "":
			continue
		default:
			return imports, block[i:]
		}
		spec, _, _ = strings.Cut(spec, "//")
		fields := strings.Fields(spec)
		if len(fields) == 0 {
			continue
		}
		if path, err := strconv.Unquote(fields[len(fields)-1]); err == nil {
			imports = append(imports, path)
		}
	}
	return imports, nil
}

// parses reports whether lines parse as a function's statements, or else
// as a file's declarations.
func parses(lines []string) error {
	text := strings.Join(lines, "\n")
	_, errStmts := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+text+"\n}\n", 0)
	if errStmts == nil {
		return nil
	}
	_, errDecls := parser.ParseFile(token.NewFileSet(), "", "package p\n"+text+"\n", 0)
	if errDecls == nil {
		return nil
	}
	return errStmts
}

// readGoSource parses every Go file of the repository.
func readGoSource(t *testing.T) *goSource {
	t.Helper()
	src := &goSource{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		return src.add(path)
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// add reads the Example bodies and the declarations of the Go file path.
func (s *goSource) add(path string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, text, parser.ParseComments)
	if err != nil {
		return err
	}
	var imports []string
	for _, spec := range f.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)
		imports = append(imports, p)
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	for _, decl := range f.Decls {
		start := decl.Pos()
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Doc != nil {
			start = fn.Doc.Pos()
		} else if gen, ok := decl.(*ast.GenDecl); ok && gen.Doc != nil {
			start = gen.Doc.Pos()
		}
		s.decls = append(s.decls, goPart{path, lines(text[offset(start):offset(decl.End())]), imports})
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
			continue
		}
		body := lines(text[offset(fn.Body.Lbrace)+1 : offset(fn.Body.Rbrace)])
		for i, l := range body {
			body[i] = strings.TrimPrefix(l, "\t")
		}
		s.bodies = append(s.bodies, goPart{path, body, imports})
	}
	return nil
}

// lines splits text into lines without trailing blanks, leaving out the
// empty first line of a body.
func lines(text []byte) []string {
	var out []string
	for _, l := range strings.Split(string(bytes.TrimPrefix(text, []byte("\n"))), "\n") {
		out = append(out, strings.TrimRight(l, " \t"))
	}
	return out
}

// shows reports whether block is the start of an Example's body, or a
// whole declaration, in a file that imports every one of imports.
func (s *goSource) shows(imports, block []string) bool {
	for _, b := range s.bodies {
		if len(b.lines) >= len(block) && slices.Equal(b.lines[:len(block)], block) && importsAll(b.imports, imports) {
			return true
		}
	}
	for _, d := range s.decls {
		if slices.Equal(d.lines, block) && importsAll(d.imports, imports) {
			return true
		}
	}
	return false
}

func importsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// hasPackage reports whether path is a package of this repository.
func hasPackage(path string) bool {
	dir, ok := strings.CutPrefix(path, "github.com/gatecount/gatecount/")
	if !ok {
		return false
	}
	info, err := os.Stat(filepath.FromSlash(dir))
	return err == nil && info.IsDir()
}

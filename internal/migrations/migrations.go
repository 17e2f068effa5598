// Package migrations reads a store's versioned schema migrations: SQL files
// named NNNN_what.sql, embedded in the store's package.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema step.
type Migration struct {
	Version int    // NNNN, from 1 up with no gap
	Name    string // the file's name without ".sql"
	SQL     string
}

// Load returns the migrations in dir of fsys, in version order. It refuses a
// file not named NNNN_what.sql and versions that do not run 1, 2, 3, ….
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".sql")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration file %q is not named NNNN_what.sql", path.Base(n))
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q out of sequence, want version %d", m.Name, i+1)
		}
	}
	return ms, nil
}

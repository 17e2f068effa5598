package migrations

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_more.sql":  {Data: []byte("B")},
		"m/0001_first.sql": {Data: []byte("A")},
		"m/README":         {Data: []byte("not a migration")},
	}
	ms, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0] != (Migration{1, "0001_first", "A"}) || ms[1] != (Migration{2, "0002_more", "B"}) {
		t.Fatalf("got %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no version": {"m/first.sql": {}},
		"gap":        {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"zero":       {"m/0000_a.sql": {}},
	} {
		if _, err := Load(fsys, "m"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

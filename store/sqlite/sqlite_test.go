package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
	"github.com/gatecount/gatecount/store/value"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	goleak.VerifyTestMain(m)
}

var (
	secretA = []byte("test secret A, long enough to be accepted by keyhash")
	secretB = []byte("test secret B, long enough to be accepted by keyhash")
)

// tempFile returns the path of a new, migrated database file.
func tempFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.db")
	db := openDB(t, path)
	if err := sqlite.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return path
}

// openDB opens path with the sqlite driver, as an app would, closed at the
// end of the test. Its connections wait for the file's lock.
func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// open opens a store on path, closed at the end of the test.
func open(t testing.TB, path string, o sqlite.Options) *store.Store {
	t.Helper()
	if o.Secret == nil {
		o.Secret = secretA
	}
	s, err := sqlite.Open(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func handle(t testing.TB, s *store.Store, prefix string) *store.Handle {
	t.Helper()
	h, err := s.Handle(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// add is an apply that adds one to a JSON integer, starting a counter that
// lives for window.
func add(window time.Duration) store.ApplyFunc {
	return func(now time.Time, es []store.Entry) error {
		for i := range es {
			n := int64(0)
			if es[i].Live() {
				var err error
				if n, err = store.ParseCount(es[i].Value); err != nil {
					return err
				}
			} else {
				es[i].ExpiresAt = now.Add(window)
			}
			es[i].Value = value.AppendCount(es[i].Value[:0], n+1)
		}
		return nil
	}
}

func readCount(t testing.TB, h *store.Handle, key string) int64 {
	t.Helper()
	es, err := h.Read(context.Background(), []string{key})
	if err != nil {
		t.Fatal(err)
	}
	if !es[0].Live() {
		return 0
	}
	n, err := store.ParseCount(es[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestUpdateReadDelete(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	h := handle(t, open(t, path, sqlite.Options{}), "p:")
	for i := 1; i <= 3; i++ {
		if err := h.Update(ctx, []string{"a", "b"}, add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readCount(t, h, "a"); got != 3 {
		t.Fatalf("a = %d, want 3", got)
	}
	// apply's error is returned unchanged and nothing is written.
	errOwn := errors.New("own")
	err := h.Update(ctx, []string{"a"}, func(time.Time, []store.Entry) error { return errOwn })
	if err != errOwn {
		t.Fatalf("Update = %v, want apply's error", err)
	}
	// A nil value deletes.
	if err := h.Update(ctx, []string{"a"}, func(_ time.Time, es []store.Entry) error { es[0].Value = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	es, err := h.Read(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if es[0].Live() || !es[1].Live() || es[2].Live() || string(es[1].Value) != "3" {
		t.Fatalf("Read = %q %q %q, want none, 3, none", es[0].Value, es[1].Value, es[2].Value)
	}
}

func TestNoKeyInClear(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	h := handle(t, open(t, path, sqlite.Options{}), "signin:")
	if err := h.Update(ctx, []string{"alice@example.com"}, add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, path)
	var n int
	err := db.QueryRow(`SELECT count(*) FROM gatecount_limit_entries
		WHERE instr(CAST(name AS TEXT), 'alice') > 0 OR length(name) <> 32`).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("rows with the key in clear or a name not 32 bytes: %d, %v", n, err)
	}
}

// TestSecrets: rows of another secret are neither read nor counted against
// the bound, and go once expired.
func TestSecrets(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	clk := clock.NewFake(time.Now())
	a := handle(t, open(t, path, sqlite.Options{Secret: secretA, MaxEntries: 2, Now: clk.Now}), "p:")
	sb := open(t, path, sqlite.Options{Secret: secretB, MaxEntries: 2, Now: clk.Now})
	b := handle(t, sb, "p:")
	for _, k := range []string{"x", "y"} {
		if err := a.Update(ctx, []string{k}, add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if got := readCount(t, b, "x"); got != 0 {
		t.Fatalf("B reads A's row: %d", got)
	}
	// B's bound does not count A's rows.
	for _, k := range []string{"x", "y"} {
		if err := b.Update(ctx, []string{k}, add(time.Hour)); err != nil {
			t.Fatalf("B: %v", err)
		}
	}
	if got := readCount(t, a, "x"); got != 1 {
		t.Fatalf("A's x = %d, want 1", got)
	}
	if err := b.Update(ctx, []string{"z"}, add(time.Hour)); !errors.Is(err, store.ErrFull) {
		t.Fatalf("B's third key: %v, want ErrFull", err)
	}
	clk.Advance(2 * time.Minute)
	// The background sweep of either handle may run first; either way,
	// B's sweep removes A's expired rows and keeps B's own.
	if _, err := sb.Sweep(ctx); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	var rows int
	if err := openDB(t, path).QueryRowContext(ctx, `SELECT COUNT(*) FROM gatecount_limit_entries`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Fatalf("after B's sweep the file holds %d rows, want B's 2 (A's 2 expired ones removed)", rows)
	}
	if got := readCount(t, b, "x"); got != 1 {
		t.Fatalf("B's x = %d, want 1", got)
	}
}

// TestBound: a full store refuses new keys, keeps counting the ones it
// holds, and makes room by removing expired rows.
func TestBound(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	clk := clock.NewFake(time.Now())
	h := handle(t, open(t, path, sqlite.Options{MaxEntries: 3, Now: clk.Now}), "p:")
	caps := []store.Budget{{Limit: 100, Window: time.Minute}}
	for i := range 3 {
		if _, err := h.Count(ctx, []string{"k" + strconv.Itoa(i)}, caps, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Count", func() error { _, err := h.Count(ctx, []string{"new"}, caps, 1); return err }},
		{"Update", func() error { return h.Update(ctx, []string{"new"}, add(time.Minute)) }},
		{"Update with a held key", func() error { return h.Update(ctx, []string{"k0", "new"}, add(time.Minute)) }},
	} {
		if err := tc.call(); !errors.Is(err, store.ErrFull) || store.ReasonOf(err) != store.ReasonFull {
			t.Fatalf("%s of a new key in a full store: %v, want ErrFull", tc.name, err)
		}
	}
	if tl, err := h.Count(ctx, []string{"k0"}, caps, 1); err != nil || tl.Counts[0] != 2 {
		t.Fatalf("held key in a full store: %+v, %v", tl, err)
	}
	if got := readCount(t, h, "k0"); got != 2 {
		t.Fatalf("k0 = %d after a refused multi-key update, want 2", got)
	}
	if st := h.Store().Stats(); st.Entries != 3 || st.MaxEntries != 3 {
		t.Errorf("Stats: %d of %d entries, want 3 of 3", st.Entries, st.MaxEntries)
	}
	clk.Advance(time.Minute)
	if tl, err := h.Count(ctx, []string{"new"}, caps, 1); err != nil || !tl.Allowed {
		t.Fatalf("new key once the others expired: %+v, %v", tl, err)
	}
	if _, err := h.Store().Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.Store().Stats(); st.Entries != 1 {
		t.Errorf("Stats after the sweep: %d entries, want 1", st.Entries)
	}
}

// generic hides the backend's Counter, so that Handle.Count runs the generic
// Count on Update.
type generic struct{ store.Backend }

// TestCountMatchesGeneric compares the native Count with the generic one on
// the same file and clock.
func TestCountMatchesGeneric(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_123))
	o := sqlite.Options{Secret: secretA, MaxEntries: 10, Now: clk.Now}
	o.Store = o.Store.WithDefaults()
	path := tempFile(t)
	nb, err := sqlite.OpenBackend(ctx, path, o)
	if err != nil {
		t.Fatal(err)
	}
	native := store.New(nb, o.Store)
	t.Cleanup(func() { native.Close() })
	gb, err := sqlite.OpenBackend(ctx, tempFile(t), o)
	if err != nil {
		t.Fatal(err)
	}
	gen := store.New(generic{gb}, o.Store)
	t.Cleanup(func() { gen.Close() })
	if _, ok := native.Backend().(store.Counter); !ok {
		t.Fatal("the backend is not a store.Counter")
	}
	nh, gh := handle(t, native, "p:"), handle(t, gen, "p:")

	set := func(key, value string) {
		for _, h := range []*store.Handle{nh, gh} {
			err := h.Update(ctx, []string{key}, func(now time.Time, es []store.Entry) error {
				es[0] = store.Entry{Value: []byte(value), ExpiresAt: now.Add(time.Minute)}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	hour := time.Hour
	steps := []struct {
		name    string
		before  func()
		keys    []string
		caps    []store.Budget
		n       int64
		advance time.Duration
	}{
		{name: "new key", keys: []string{"a"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "live key", keys: []string{"a"}, caps: []store.Budget{capOf(3, hour)}, n: 2},
		{name: "no room", keys: []string{"a"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "n above cap", keys: []string{"b"}, caps: []store.Budget{capOf(3, hour)}, n: 4},
		{name: "odd window", keys: []string{"c"}, caps: []store.Budget{capOf(3, 1500*time.Microsecond+7)}, n: 1},
		{name: "expired", keys: []string{"c"}, caps: []store.Budget{capOf(3, hour)}, n: 1, advance: 2 * time.Millisecond},
		{name: "multi", keys: []string{"a", "d"}, caps: []store.Budget{capOf(10, hour), capOf(1, hour)}, n: 1},
		{name: "multi limited", keys: []string{"d", "e", "a"}, caps: []store.Budget{capOf(5, hour), capOf(5, hour), capOf(5, hour)}, n: 2},
		{name: "not a count", before: func() { set("f", `"x"`) }, keys: []string{"f"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "negative", before: func() { set("g", `-1`) }, keys: []string{"g"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "minus zero", before: func() { set("h", `-0`) }, keys: []string{"h"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "float", before: func() { set("i", `1.0`) }, keys: []string{"i"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "written by Update", before: func() { set("j", `2`) }, keys: []string{"j"}, caps: []store.Budget{capOf(3, hour)}, n: 1},
		{name: "huge", before: func() { set("k", `9223372036854775807`) }, keys: []string{"k"}, caps: []store.Budget{capOf(1<<62, hour)}, n: 1},
		{name: "at cap", keys: []string{"l"}, caps: []store.Budget{capOf(1, hour)}, n: 1},
		{name: "full", keys: []string{"m1", "m2", "m3", "m4"}, caps: []store.Budget{capOf(1, hour), capOf(1, hour), capOf(1, hour), capOf(1, hour)}, n: 1},
		{name: "full, one key", keys: []string{"m5"}, caps: []store.Budget{capOf(1, hour)}, n: 1},
		{name: "full, held key", keys: []string{"a"}, caps: []store.Budget{capOf(10, hour)}, n: 1},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		clk.Advance(st.advance)
		nt, nerr := nh.Count(ctx, st.keys, st.caps, st.n)
		gt, gerr := gh.Count(ctx, st.keys, st.caps, st.n)
		if fmt.Sprint(nerr) != fmt.Sprint(gerr) || !errors.Is(nerr, errors.Unwrap(gerr)) && nerr != gerr {
			t.Errorf("%s: native error %v, generic %v", st.name, nerr, gerr)
		}
		// On an error the Tally says nothing: the guard does not pass on a
		// Counter's.
		if nerr == nil && gerr == nil && !sameTally(nt, gt) {
			t.Errorf("%s:\nnative  %+v\ngeneric %+v", st.name, nt, gt)
		}
		for _, k := range st.keys {
			ne, _ := nh.Read(ctx, []string{k})
			ge, _ := gh.Read(ctx, []string{k})
			if string(ne[0].Value) != string(ge[0].Value) || !ne[0].ExpiresAt.Equal(ge[0].ExpiresAt) {
				t.Errorf("%s: key %s native %q %v, generic %q %v", st.name, k, ne[0].Value, ne[0].ExpiresAt, ge[0].Value, ge[0].ExpiresAt)
			}
		}
	}
}

func capOf(max int, window time.Duration) store.Budget {
	return store.Budget{Limit: max, Window: window}
}

func sameTally(a, b store.Tally) bool {
	if a.Allowed != b.Allowed || a.Limiting != b.Limiting || a.Counts != b.Counts || !a.Now.Equal(b.Now) {
		return false
	}
	for i := range a.ExpiresAt {
		if !a.ExpiresAt[i].Equal(b.ExpiresAt[i]) {
			return false
		}
	}
	return true
}

// TestCountWhileAppHoldsWriteLock: a count made while another connection
// holds a write transaction on the file is answered unavailable at the
// deadline, and counting resumes once it commits.
func TestCountWhileAppHoldsWriteLock(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	// The breaker is off: the deadline answers below would open it, and a
	// loaded machine's failed reads keep it open past the test's patience;
	// the breaker has tests of its own.
	s := open(t, path, sqlite.Options{Store: store.Options{Deadline: 200 * time.Millisecond, Breaker: store.BreakerOptions{Failures: -1}}})
	h := handle(t, s, "p:")
	caps := []store.Budget{{Limit: 30, Window: time.Hour}}
	if _, err := h.Count(ctx, []string{"k"}, caps, 1); err != nil {
		t.Fatal(err)
	}

	app := openDB(t, path)
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE app_data (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	// The call the writer runs waits for the file's lock, and is answered
	// at the deadline; the calls behind it wait for the writer, which is
	// overload, not failure. Which call the writer holds (the first count,
	// or the background sweep) is the scheduler's choice.
	for i := range 3 {
		var err error
		if i < 2 {
			_, err = h.Count(ctx, []string{"k"}, caps, 1)
		} else {
			err = h.Update(ctx, []string{"k"}, add(time.Hour))
		}
		if r := store.ReasonOf(err); r != store.ReasonDeadline && r != store.ReasonOverloaded {
			t.Fatalf("call %d while the app holds the write lock: %v, want unavailable (deadline, or overloaded behind the writer)", i+1, err)
		}
	}
	// A read, alone on the writer, needs no write lock: it is answered.
	var es []store.Entry
	for range 50 {
		if es, err = h.Read(ctx, []string{"k"}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || string(es[0].Value) != "1" {
		t.Fatalf("read while the app holds the write lock: %v, %v; want the count 1", es, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// Counting resumes (the breaker, closed after fewer than 5 failures,
	// lets it through); the counts answered unavailable were not counted.
	var tl store.Tally
	for range 50 {
		if tl, err = h.Count(ctx, []string{"k"}, caps, 1); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || tl.Counts[0] != 2 {
		t.Fatalf("count after the app committed: %+v, %v; want the count 2", tl, err)
	}
}

func TestNotMigrated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.db")
	_, err := sqlite.Open(ctx, path, sqlite.Options{Secret: secretA})
	if !errors.Is(err, sqlite.ErrNotMigrated) {
		t.Fatalf("Open of an unmigrated file: %v, want ErrNotMigrated", err)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Options{Secret: secretA, AutoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := openDB(t, path)
	for range 2 { // idempotent
		if err := sqlite.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	var v int
	if err := db.QueryRow("SELECT max(version) FROM gatecount_limit_schema").Scan(&v); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, sqlite.SchemaVersion)
	}
}

func TestMigrateFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "odd ?#% name.db")
	for i, want := range []int{0, sqlite.SchemaVersion} { // a new file, then nothing to do
		from, err := sqlite.MigrateFile(ctx, path)
		if err != nil || from != want {
			t.Fatalf("MigrateFile %d: from version %d, %v; want %d", i+1, from, err, want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the file is not where its path says: %v", err)
	}
	s := open(t, path, sqlite.Options{})
	if err := handle(t, s, "p:").Update(ctx, []string{"k"}, add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// A file that cannot be opened is named in the error, with its directory
// when that is what is missing: SQLite's own message names neither.
func TestBadPathNamed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "limits.db")
	_, err := sqlite.Open(ctx, path, sqlite.Options{Secret: []byte(strings.Repeat("s", 32)), AutoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), strconv.Quote(path)) || !strings.Contains(err.Error(), strconv.Quote(filepath.Dir(path))) {
		t.Fatalf("Open of a file in a missing directory: %v", err)
	}
	if _, err := sqlite.MigrateFile(ctx, path); err == nil || !strings.Contains(err.Error(), strconv.Quote(path)) {
		t.Fatalf("MigrateFile of a file in a missing directory: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	for _, tc := range []struct {
		name string
		o    sqlite.Options
	}{
		{"no secret", sqlite.Options{}},
		{"short secret", sqlite.Options{Secret: []byte("short")}},
	} {
		if s, err := sqlite.Open(ctx, path, tc.o); err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", tc.name)
		}
	}
}

func TestNewOverAppDB(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	db := openDB(t, path)
	s, err := sqlite.New(ctx, db, sqlite.Options{Secret: secretA})
	if err != nil {
		t.Fatal(err)
	}
	h := handle(t, s, "p:")
	if err := h.Update(ctx, []string{"k"}, add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !s.Shared() {
		t.Error("Shared() = false")
	}
	// A second handle with the prefix on the same *sql.DB is refused.
	s2, err := sqlite.New(ctx, db, sqlite.Options{Secret: secretA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Handle("p:"); !errors.Is(err, store.ErrDuplicatePrefix) {
		t.Errorf("second handle with one prefix on one *sql.DB: %v, want ErrDuplicatePrefix", err)
	}
	s2.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The app's db is still usable.
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSweepInBatches(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	clk := clock.NewFake(time.Now())
	s := open(t, path, sqlite.Options{SweepBatch: 7, Now: clk.Now})
	h := handle(t, s, "p:")
	for i := range 30 {
		if err := h.Update(ctx, []string{strconv.Itoa(i)}, add(time.Duration(1+i%2)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	if n, err := s.Sweep(ctx); n != 15 || err != nil {
		t.Fatalf("Sweep = %d, %v; want 15", n, err)
	}
	if n, err := s.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error // nil: any error when want is ""
	}{
		{in: "sqlite:/var/lib/app/limits.db", want: "/var/lib/app/limits.db"},
		{in: "sqlite:limits.db", want: "limits.db"},
		{in: "sqlite:///var/lib/app/limits.db", want: "/var/lib/app/limits.db"},
		{in: "sqlite://localhost/var/x.db", want: "/var/x.db"},
		{in: "file:/tmp/a%20b.db", want: "/tmp/a b.db"},
		{in: "FILE:rel/x.db", want: "rel/x.db"},
		{in: "file:///tmp/x.db", want: "/tmp/x.db"},
		{in: "postgres://u:pw@host/db", err: sqlite.ErrNotSQLiteURL},
		{in: "redis://127.0.0.1:6379/0", err: sqlite.ErrNotSQLiteURL},
		{in: "/plain/path.db", err: sqlite.ErrNotSQLiteURL},
		{in: "sqlite:"},
		{in: "sqlite::memory:"},
		{in: "file:x.db?mode=ro"},
		{in: "sqlite://otherhost/x.db"},
		{in: "sqlite:%zz"},
	} {
		got, err := sqlite.ParseURL(tc.in)
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("ParseURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.want == "" && err == nil:
			t.Errorf("ParseURL(%q) = %q, want an error", tc.in, got)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("ParseURL(%q) error %v, want %v", tc.in, err, tc.err)
		}
	}
	if _, err := sqlite.ParseURL("postgres://u:secretpw@h/db"); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("error quotes the password: %v", err)
	}
}

// TestCloseAnswersWaitingCalls: calls waiting for the writer when the store
// closes are answered, never left hanging.
func TestCloseAnswersWaitingCalls(t *testing.T) {
	ctx := context.Background()
	path := tempFile(t)
	o := sqlite.Options{Secret: secretA}
	o.Store = o.Store.WithDefaults()
	b, err := sqlite.OpenBackend(ctx, path, o)
	if err != nil {
		t.Fatal(err)
	}
	app := openDB(t, path)
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	// With no deadline, these wait for the app's lock until Close.
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() {
			errs <- b.Update(ctx, "p:", []string{strconv.Itoa(i)}, add(time.Hour))
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them queue; the test holds either way
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range cap(errs) {
		if err := <-errs; err == nil {
			t.Error("an update succeeded while the app held the write lock")
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

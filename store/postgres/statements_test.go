package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gatecount/gatecount/store"
)

func TestWireEncoding(t *testing.T) {
	at := time.Date(2026, 11, 30, 6, 0, 0, 123_456_000, time.UTC)
	var w wire
	vals := w.reset().bytes([]byte{0xde, 0xad}).text("fp").int8(-2).time(at).values()
	want := [][]byte{
		{0xde, 0xad},
		[]byte("fp"),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe},
	}
	if len(vals) != 4 {
		t.Fatalf("%d values, want 4", len(vals))
	}
	for i, v := range want {
		if !bytes.Equal(vals[i], v) {
			t.Errorf("value %d = %x, want %x", i, vals[i], v)
		}
	}
	us, err := wireMicros(vals[3])
	if err != nil || us != at.UnixMicro() {
		t.Errorf("time round trip = %d, %v; want %d", us, err, at.UnixMicro())
	}
	// reset starts afresh, and a value's capacity ends at the value, so
	// that nothing appended to one spills into the next.
	if vals = w.reset().text("x").values(); len(vals) != 1 || string(vals[0]) != "x" || cap(vals[0]) != 1 {
		t.Errorf("after reset: %q (cap %d)", vals, cap(vals[0]))
	}
}

func TestWireDecoding(t *testing.T) {
	be := func(v int64) []byte {
		var w wire
		return w.int8(v).values()[0]
	}
	for _, c := range []struct {
		name    string
		in      []byte
		wantUs  int64
		wantErr string
	}{
		{"pg epoch", be(0), pgEpochMicros, ""},
		{"unix epoch", be(-pgEpochMicros), 0, ""},
		{"before 1970", be(-pgEpochMicros - 1500), -1500, ""},
		{"infinity", be(math.MaxInt64), 0, "infinite"},
		{"-infinity", be(math.MinInt64), 0, "infinite"},
		{"short", []byte{1, 2, 3}, 0, "3 bytes"},
		{"null", nil, 0, "0 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			us, err := wireMicros(c.in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("wireMicros = %d, %v; want an error with %q", us, err, c.wantErr)
				}
				return
			}
			if err != nil || us != c.wantUs {
				t.Fatalf("wireMicros = %d, %v; want %d", us, err, c.wantUs)
			}
		})
	}
	for _, c := range []struct{ a, b, want int64 }{
		{1500, 1000, 1}, {-1500, 1000, -2}, {-1000, 1000, -1}, {0, 1000, 0}, {999, 1000, 0}, {-1, 1000, -1},
	} {
		if got := floorDiv(c.a, c.b); got != c.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestWireTypesChecked: a statement whose server-side types differ from
// what the store encodes is refused when prepared, not misread later.
func TestWireTypesChecked(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, c := range []struct {
		name string
		spec stmtSpec
		want string
	}{
		{"result", stmtSpec{sql: "SELECT $1::bytea, 1::integer", params: []uint32{oBytea}, results: []uint32{oBytea, oInt8}}, "result types"},
		{"count", stmtSpec{sql: "SELECT $1::bytea", params: []uint32{oBytea}, results: []uint32{oBytea, oText}}, "result types"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sd, err := conn.Conn().PgConn().Prepare(ctx, "", c.spec.sql, c.spec.params)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkWireTypes(sd, c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkWireTypes = %v, want an error about %s", err, c.want)
			}
		})
	}
	// The store's own statements pass.
	st, err := new(Backend).statements(ctx, conn.Conn())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st.s {
		spec := statementSpecs[i]
		switch {
		case spec.results == nil && len(s.resultFormats) != len(s.sd.Fields):
			t.Errorf("statement %d: %d result formats for %d columns", i, len(s.resultFormats), len(s.sd.Fields))
		case spec.results != nil && !slices.Equal(s.resultFormats, binaryFormat):
			t.Errorf("statement %d: result formats %v, want binary", i, s.resultFormats)
		case spec.results != nil && checkWireTypes(s.sd, spec) != nil:
			t.Errorf("statement %d: %v", i, checkWireTypes(s.sd, spec))
		}
	}
}

// TestDeadlineClearedOnRelease: the I/O deadline a call sets on its
// connection goes with the call, so the app's own use of the pool after it
// is not cut short.
func TestDeadlineClearedOnRelease(t *testing.T) {
	newPool(t)
	u := testURL()
	if strings.Contains(u, "?") {
		u += "&pool_max_conns=1"
	} else {
		u += "?pool_max_conns=1"
	}
	pool := newPoolURL(t, u, false) // one connection: the store's and the app's
	s := newStore(t, pool, Options{Secret: testSecret, Store: store.Options{Deadline: 50 * time.Millisecond}})
	h := newHandle(t, s, "deadline")
	ctx := context.Background()
	if _, err := h.Count(ctx, []string{"k"}, faultCaps, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.Update(ctx, []string{"u"}, incr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past both calls' deadlines
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the app's query after the store's calls: %v", err)
	}
}

// TestBackendDeadline: a call to a database that does not answer ends with
// an error matching context.DeadlineExceeded, for each path that bounds its
// I/O by the connection's deadline; a context cancelled before the call
// ends it before any I/O.
func TestBackendDeadline(t *testing.T) {
	p, pool := faultPool(t)
	b, err := NewBackend(context.Background(), pool, Options{Secret: randomSecret()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	<-b.started
	prefix := randomPrefix("bd")
	ops := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"count", func(ctx context.Context) error {
			var tl store.Tally
			return b.Count(ctx, prefix, []string{"k"}, faultCaps, 1, &tl)
		}},
		{"update", func(ctx context.Context) error { return b.Update(ctx, prefix, []string{"u"}, incr) }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			if err := op.call(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := op.call(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("call with a cancelled context: %v, want context.Canceled", err)
			}
			p.BlackHole()
			defer p.Restore()
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := op.call(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call to a black hole: %v, want context.DeadlineExceeded", err)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				t.Fatalf("call to a black hole: a server error %v", pgErr)
			}
		})
	}
}

// TestReplanAfterGrowth: statements prepared while the table was nearly
// empty are prepared again once it has grown, so that the one-key lock of
// Update, planned as a sequential scan of a table of no pages, becomes a
// lookup by primary key.
func TestReplanAfterGrowth(t *testing.T) {
	schema := benchSchema(t)
	pool := benchPool(t, 1, map[string]string{"search_path": schema}) // one connection
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "VACUUM gatecount_entries"); err != nil { // statistics of an empty table
		t.Fatal(err)
	}
	b, err := NewBackend(ctx, pool, Options{Secret: randomSecret()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	<-b.started
	prefix := randomPrefix("replan")
	updates := func(label string) {
		for i := range 8 { // past the 5 custom plans PostgreSQL makes before it settles
			if err := b.Update(ctx, prefix, []string{fmt.Sprint(label, i)}, incr); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan := func() string {
		rows, err := pool.Query(ctx, fmt.Sprintf(`EXPLAIN EXECUTE %s('\x00'::bytea)`, stmtName(uLockRead1Async)), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	updates("before")
	if p := plan(); !strings.Contains(p, "Seq Scan") {
		t.Fatalf("plan on a nearly empty table, before growth: want PostgreSQL's sequential scan, the case this guards against:\n%s", p)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO gatecount_entries (keyhash, fingerprint, value, expires_at)
		SELECT sha256(g::text::bytea), $1, '1', now() + interval '1 hour' FROM generate_series(1, 5000) AS g`, b.fp); err != nil {
		t.Fatal(err)
	}
	if err := b.recount(ctx); err != nil {
		t.Fatal(err)
	}
	updates("after")
	if p := plan(); !strings.Contains(p, "Index Scan") {
		t.Fatalf("plan after the table grew to 5,000 rows: want a lookup by primary key:\n%s", p)
	}
}

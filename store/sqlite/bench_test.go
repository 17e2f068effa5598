package sqlite_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/sqlite"
)

// benchKeys is the key space of the random-key benchmarks.
const benchKeys = 100_000

func benchHandle(b *testing.B) *store.Handle {
	s := open(b, tempFile(b), sqlite.Options{})
	return handle(b, s, "bench:")
}

// keyOf picks the key of call i: one hot key, or random ones.
func keyOf(hot bool, rng *rand.Rand) string {
	if hot {
		return "hot"
	}
	return "k" + strconv.Itoa(rng.IntN(benchKeys))
}

// BenchmarkBareTx is the floor: BEGIN IMMEDIATE, one UPSERT, COMMIT on one
// connection with the store's pragmas, nothing else.
func BenchmarkBareTx(b *testing.B) {
	ctx := context.Background()
	db := openDB(b, tempFile(b))
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL", "PRAGMA busy_timeout = 5000"} {
		if _, err := conn.ExecContext(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	var stmts []*sql.Stmt
	for _, q := range []string{"BEGIN IMMEDIATE", `INSERT INTO gatecount_limit_entries (name, secret, value, expires_at)
VALUES (?1, 'bench', 1, ?2) ON CONFLICT (name) DO UPDATE SET value = value + 1`, "COMMIT"} {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		stmts = append(stmts, st)
	}
	name := make([]byte, 32)
	exp := time.Now().Add(time.Hour).UnixMilli()
	benchload.Run(b, 1, func(*rand.Rand) error {
		if _, err := stmts[0].ExecContext(ctx); err != nil {
			return err
		}
		if _, err := stmts[1].ExecContext(ctx, name, exp); err != nil {
			return err
		}
		_, err := stmts[2].ExecContext(ctx)
		return err
	})
}

func BenchmarkUpdate(b *testing.B) {
	benchEach(b, func(b *testing.B, conc int, hot bool) {
		h := benchHandle(b)
		ctx := context.Background()
		inc := add(time.Hour)
		benchload.Run(b, conc, func(r *rand.Rand) error {
			return h.Update(ctx, []string{keyOf(hot, r)}, inc)
		})
	})
}

func BenchmarkCount(b *testing.B) {
	benchEach(b, func(b *testing.B, conc int, hot bool) {
		h := benchHandle(b)
		ctx := context.Background()
		caps := []store.Budget{{Limit: 1 << 40, Window: time.Hour}}
		benchload.Run(b, conc, func(r *rand.Rand) error {
			_, err := h.Count(ctx, []string{keyOf(hot, r)}, caps, 1)
			return err
		})
	})
}

// BenchmarkLimiterAttempt is the limiter's Attempt on this store: the
// figure the goal names.
func BenchmarkLimiterAttempt(b *testing.B) {
	benchEach(b, func(b *testing.B, conc int, hot bool) {
		l, err := limiter.New(benchHandle(b), limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() }) // its memory's sweep and clock
		ctx := context.Background()
		benchload.Run(b, conc, func(r *rand.Rand) error {
			_, err := l.Attempt(ctx, keyOf(hot, r))
			return err
		})
	})
}

func benchEach(b *testing.B, run func(b *testing.B, conc int, hot bool)) {
	for _, conc := range []int{1, 4, 8} {
		for _, hot := range []bool{true, false} {
			name := "conc=" + strconv.Itoa(conc) + "/random"
			if hot {
				name = "conc=" + strconv.Itoa(conc) + "/hot"
			}
			b.Run(name, func(b *testing.B) { run(b, conc, hot) })
		}
	}
}

// BenchmarkCountFullSync is Count with synchronous=FULL, which syncs the WAL
// at every commit: group commit shares each sync among the calls of a batch.
func BenchmarkCountFullSync(b *testing.B) {
	for _, conc := range []int{1, 4} {
		b.Run("conc="+strconv.Itoa(conc)+"/hot", func(b *testing.B) {
			h := handle(b, open(b, tempFile(b), sqlite.Options{FullSync: true}), "bench:")
			ctx := context.Background()
			caps := []store.Budget{{Limit: 1 << 40, Window: time.Hour}}
			benchload.Run(b, conc, func(*rand.Rand) error {
				_, err := h.Count(ctx, []string{"hot"}, caps, 1)
				return err
			})
		})
	}
}

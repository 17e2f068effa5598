package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/gatecount/gatecount/internal/loop"
	"github.com/gatecount/gatecount/internal/option"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/storekit"
)

// Defaults of Options.
const (
	DefaultSweepInterval = 5 * time.Minute
	DefaultSweepBatch    = 1000
	DefaultBusyTimeout   = 5 * time.Second
)

// The WAL holds every commit until a checkpoint copies its pages into the
// database file. The writer does that in the COMMIT that takes the WAL past
// walCheckpointPages pages, and every call queued behind it waits
// meanwhile. A page written many times between two checkpoints is copied
// once, so larger checkpoints, less often, cost less in all. 10,000 pages
// make about 40 MB of WAL; the package's DESIGN.md gives what they save.
// walSizeLimit is what the WAL file is cut back to when it starts over,
// should it ever have grown past it.
const (
	walCheckpointPages = 10_000
	walSizeLimit       = 64 << 20
)

// Options configure an SQLite store. Secret is required; the zero value of
// every other field gives its default.
type Options struct {
	// Secret names keys (HMAC-SHA-256) and tells this app's rows from those
	// written under another secret; at least [keyhash.MinSecretLen] bytes.
	// Every process sharing the counts must use the same secret.
	Secret []byte
	// MaxEntries bounds the rows held under Secret; 0 means
	// 1,000,000.
	MaxEntries int
	// SweepInterval is how often expired rows are removed in the background
	// after the sweep at open; 0 means [DefaultSweepInterval].
	SweepInterval time.Duration
	// SweepBatch is the most rows one sweep transaction removes; 0 means
	// [DefaultSweepBatch]. It also bounds the expired rows a new key removes
	// when it finds the store full.
	SweepBatch int
	// BusyTimeout bounds a wait for the file's write lock (PRAGMA
	// busy_timeout); a call's context ends it sooner. 0 means
	// [DefaultBusyTimeout].
	BusyTimeout time.Duration
	// FullSync sets synchronous=FULL, which syncs the WAL on every commit,
	// in place of synchronous=NORMAL (see the package documentation).
	FullSync bool
	// AutoMigrate runs Migrate when the store opens; otherwise a database
	// that was not migrated is refused with [ErrNotMigrated].
	AutoMigrate bool
	// Store configures the guard.
	Store store.Options
	// Now is the store's clock; nil means the process clock. Tests set it.
	Now func() time.Time
}

// ErrNotSQLite is returned by New for a *sql.DB whose driver is not SQLite.
var ErrNotSQLite = errors.New("sqlite: database is not SQLite")

// Open opens (creating if need be) the SQLite file at path and returns a
// store over it behind the guard. The store owns the *sql.DB it opens and
// closes it on Close; its background sweep runs until then.
func Open(ctx context.Context, path string, o Options) (*store.Store, error) {
	return storekit.Build(&o.Store, func() (*Backend, error) { return OpenBackend(ctx, path, o) })
}

// New returns a store behind the guard over db, a *sql.DB of the
// modernc.org/sqlite driver the app opened. The store takes one connection
// of db's pool, the writer, for its own use, so db must allow one more open
// connection than the app needs. Close closes it rather than returning it,
// with the store's settings, to the pool. It does not close db.
func New(ctx context.Context, db *sql.DB, o Options) (*store.Store, error) {
	return storekit.Build(&o.Store, func() (*Backend, error) { return NewBackend(ctx, db, o) })
}

// OpenBackend is Open without the guard. Most code wants Open.
func OpenBackend(ctx context.Context, path string, o Options) (*Backend, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	db, err := sql.Open("sqlite", fileURI(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	// The writer, and a connection for Migrate.
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	b, err := newBackend(ctx, db, o)
	if err != nil {
		db.Close()
		return nil, pathError(path, err)
	}
	b.ownDB = true
	return b, nil
}

// pathError names the file of a failure to open or migrate it, and the
// likely cause when its directory is missing. SQLite's own error, "unable
// to open database file (14)", names neither.
func pathError(path string, err error) error {
	dir := filepath.Dir(path)
	if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
		return fmt.Errorf("sqlite: file %q: its directory %q does not exist: %w", path, dir, err)
	} else if serr != nil {
		return fmt.Errorf("sqlite: file %q: its directory %q cannot be used (%v): %w", path, dir, serr, err)
	}
	return fmt.Errorf("sqlite: file %q: %w", path, err)
}

// fileURI turns a path into an SQLite URI, so that no character of the path
// is taken for a parameter.
func fileURI(path string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(path)
}

// Backend is the SQLite store's [store.Backend]. Most code wants Open or New,
// which wrap it in the guard.
type Backend struct {
	db    *sql.DB
	ownDB bool
	hash  *keyhash.Hasher
	fp    string
	bound *storekit.Bound
	// entries is the rows under this secret, as last counted.
	entries atomic.Int64
	now     func() time.Time
	log     *slog.Logger
	batch   int

	// writer is the one connection every call uses, owned by writeLoop,
	// which serves the calls sent on queue.
	writer     *sql.Conn
	st         statements
	queue      chan *op
	writerDone chan struct{}

	stop        chan struct{}
	closeCtx    context.Context // cancelled by Close
	closeCancel context.CancelFunc
	sweeper     *loop.Loop
	closeOnce   sync.Once
	closeErr    error
}

// NewBackend is New without the guard. Most code wants New.
// o.Store should already have its defaults (see [store.Options.WithDefaults]).
func NewBackend(ctx context.Context, db *sql.DB, o Options) (*Backend, error) {
	if db == nil {
		return nil, errors.New("sqlite: nil *sql.DB")
	}
	return newBackend(ctx, db, o)
}

func newBackend(ctx context.Context, db *sql.DB, o Options) (*Backend, error) {
	h, err := keyhash.New(o.Secret)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	option.Default(&o.MaxEntries, storekit.DefaultMaxEntriesDatabase)
	option.Default(&o.SweepInterval, DefaultSweepInterval)
	option.Default(&o.SweepBatch, DefaultSweepBatch)
	option.Default(&o.BusyTimeout, DefaultBusyTimeout)
	if o.Now == nil {
		o.Now = time.Now
	}
	log := storekit.LoggerFor(o.Store, "sqlite")
	if o.AutoMigrate {
		if err := Migrate(ctx, db); err != nil {
			return nil, err
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	fail := func(err error) (*Backend, error) {
		conn.Close()
		return nil, err
	}
	if err := checkDriver(conn); err != nil {
		return fail(err)
	}
	if err := setPragmas(ctx, conn, o.BusyTimeout, o.FullSync); err != nil {
		return fail(fmt.Errorf("sqlite: %w", err))
	}
	v, err := schemaVersion(ctx, conn)
	if err != nil {
		return fail(fmt.Errorf("sqlite: reading the schema version: %w", err))
	}
	if v < SchemaVersion {
		return fail(fmt.Errorf("%w: the database is at version %d, this store needs %d: run sqlite.Migrate (the app's migrate command)", ErrNotMigrated, v, SchemaVersion))
	}
	b := &Backend{
		db:         db,
		hash:       h,
		fp:         h.Fingerprint(),
		bound:      storekit.NewBound(o.MaxEntries, log),
		now:        o.Now,
		log:        log,
		batch:      o.SweepBatch,
		writer:     conn,
		queue:      make(chan *op, maxBatch),
		writerDone: make(chan struct{}),
		stop:       make(chan struct{}),
	}
	b.entries.Store(-1)
	if err := b.st.prepare(ctx, conn); err != nil {
		b.st.close()
		return fail(fmt.Errorf("sqlite: preparing statements: %w", err))
	}
	b.closeCtx, b.closeCancel = context.WithCancel(context.Background())
	go b.writeLoop()
	b.sweeper = loop.Go(ctx, func(ctx context.Context) {
		b.sweepTick(ctx)
		loop.Every(ctx, loop.Task{Every: o.SweepInterval, Do: b.sweepTick})
	})
	return b, nil
}

// checkDriver refuses a connection of another driver, whose SQL would fail
// in confusing ways.
func checkDriver(conn *sql.Conn) error {
	return conn.Raw(func(dc any) error {
		if t := fmt.Sprintf("%T", dc); !strings.HasPrefix(t, "*sqlite.") {
			return fmt.Errorf("%w: driver connection is %s, want modernc.org/sqlite", ErrNotSQLite, t)
		}
		return nil
	})
}

// setPragmas sets what the store needs on a connection: WAL mode (kept by
// the file), the busy timeout and the durability of commits.
func setPragmas(ctx context.Context, conn *sql.Conn, busy time.Duration, full bool) error {
	sync := "NORMAL"
	if full {
		sync = "FULL"
	}
	for _, p := range []string{
		"PRAGMA busy_timeout = " + strconv.FormatInt(busy.Milliseconds(), 10),
		"PRAGMA journal_mode = WAL",
		"PRAGMA synchronous = " + sync,
		"PRAGMA wal_autocheckpoint = " + strconv.Itoa(walCheckpointPages),
		"PRAGMA journal_size_limit = " + strconv.Itoa(walSizeLimit),
	} {
		if _, err := conn.ExecContext(ctx, p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal (an in-memory database cannot be shared)", mode)
	}
	return nil
}

// discard closes conn for good: it goes back to no pool, so that no one
// else gets a connection with the store's settings.
func discard(conn *sql.Conn) error {
	if err := conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		return conn.Close()
	}
	return nil // database/sql closed it
}

// Shared reports true: every process on this host that opens the file sees
// the same entries. Processes on other hosts do not (see the package
// documentation).
func (b *Backend) Shared() bool { return true }

// Fingerprint returns the fingerprint of the store's secret, recorded
// beside every row it writes.
func (b *Backend) Fingerprint() string { return b.fp }

// Entries implements [store.Sizer]: the rows held under the store's secret,
// expired ones not yet removed included. It gives them as last seen by the
// store, at each sweep and when a new key was admitted the long way. It is
// -1 before the store first looked.
func (b *Backend) Entries() int { return int(b.entries.Load()) }

// MaxEntries implements [store.Sizer]: the bound on rows held under the
// store's secret.
func (b *Backend) MaxEntries() int { return b.bound.Max() }

// Backing returns the *sql.DB the store uses: two handles with one prefix
// are refused on one *sql.DB.
func (b *Backend) Backing() any { return b.db }

// Prompt reports true: a call waits for the writer, and for the file's
// lock, no longer than its context.
func (b *Backend) Prompt() bool { return true }

// row is what the store holds for one key.
type row struct {
	present bool // a row of this secret, live or expired
	entry   store.Entry
}

// nameOf returns the name key is stored under.
func (b *Backend) nameOf(prefix, key string) [32]byte { return b.hash.Sum(prefix, key) }

// readRows reads the rows of names into rows. Rows of another secret are
// ignored; expired rows are present but not live.
func (b *Backend) readRows(ctx context.Context, names [][32]byte, rows []row, nowMs int64) error {
	stmt, err := b.st.selectN(ctx, b.writer, len(names))
	if err != nil {
		return err
	}
	args := make([]any, len(names))
	for i := range names {
		args[i] = names[i][:]
	}
	rs, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var (
			name, value []byte
			secret      string
			exp         int64
		)
		if err := rs.Scan(&name, &secret, &value, &exp); err != nil {
			return err
		}
		if secret != b.fp {
			continue
		}
		for i := range names {
			if string(names[i][:]) != string(name) {
				continue
			}
			rows[i].present = true
			if exp > nowMs {
				rows[i].entry = store.Entry{Value: value, ExpiresAt: time.UnixMilli(exp)}
			}
			break
		}
	}
	return rs.Err()
}

// Update implements [store.Backend]. The read-modify-write runs in a BEGIN
// IMMEDIATE transaction of the writer, which it may share with other calls
// that waited for it. Update returns once that transaction committed.
func (b *Backend) Update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	_, err := b.do(ctx, func(tctx context.Context) error {
		return b.update(tctx, prefix, keys, apply)
	}, nil)
	return err
}

func (b *Backend) update(ctx context.Context, prefix string, keys []string, apply store.ApplyFunc) error {
	now := b.now()
	nowMs := now.UnixMilli()
	names, rows, entries, err := b.read(ctx, prefix, keys, nowMs)
	if err != nil {
		return err
	}
	if err := apply(now, entries); err != nil {
		return err
	}
	return b.write(ctx, prefix, names, rows, entries, nowMs)
}

// read reads the live entries of keys as of nowMs, with the names and rows
// that write needs to write them back.
func (b *Backend) read(ctx context.Context, prefix string, keys []string, nowMs int64) ([][32]byte, []row, []store.Entry, error) {
	names := make([][32]byte, len(keys))
	for i, k := range keys {
		names[i] = b.nameOf(prefix, k)
	}
	rows := make([]row, len(keys))
	if err := b.readRows(ctx, names, rows, nowMs); err != nil {
		return nil, nil, nil, dbErr("read", err)
	}
	entries := make([]store.Entry, len(keys))
	for i := range rows {
		entries[i] = rows[i].entry
	}
	return names, rows, entries, nil
}

// write writes entries for names, whose rows were read into rows: a nil
// value deletes, a new key must find room under the bound.
func (b *Backend) write(ctx context.Context, prefix string, names [][32]byte, rows []row, entries []store.Entry, nowMs int64) error {
	added := 0
	for i := range entries {
		if entries[i].Value != nil && !rows[i].present {
			added++
		}
	}
	if added > 0 {
		if err := b.admit(ctx, prefix, added, nowMs); err != nil {
			return err
		}
	}
	for i := range entries {
		e := &entries[i]
		switch {
		case e.Value == nil && rows[i].present:
			if _, err := b.st.del.ExecContext(ctx, names[i][:]); err != nil {
				return dbErr("delete", err)
			}
		case e.Value == nil:
		default:
			if _, err := b.st.upsert.ExecContext(ctx, names[i][:], b.fp, e.Value, e.ExpiresAt.UnixMilli()); err != nil {
				return dbErr("write", err)
			}
		}
	}
	return nil
}

// admit answers whether added new rows fit under the bound, removing a
// batch of this secret's expired rows first when they do not.
func (b *Backend) admit(ctx context.Context, prefix string, added int, nowMs int64) error {
	n, err := b.rowCount(ctx)
	if err != nil {
		return err
	}
	if b.bound.Full(n + added - 1) {
		if _, err := b.st.purge.ExecContext(ctx, nowMs, b.fp, b.batch); err != nil {
			return dbErr("removing expired rows", err)
		}
		if n, err = b.rowCount(ctx); err != nil {
			return err
		}
	}
	if err := b.bound.Admit(n+added-1, prefix); err != nil {
		b.entries.Store(int64(n))
		return err
	}
	b.entries.Store(int64(n + added))
	return nil
}

// rowCount returns the rows held under this store's secret, expired ones
// not yet removed included.
func (b *Backend) rowCount(ctx context.Context) (int, error) {
	var n int
	if err := b.st.count.QueryRowContext(ctx, b.fp).Scan(&n); err != nil {
		return 0, dbErr("counting rows", err)
	}
	return n, nil
}

// Read implements [store.Backend]: one statement on the writer, judged on the
// host's clock. Alone on the writer it reads outside any write transaction;
// queued with writes, it shares their transaction and is answered once that
// committed.
func (b *Backend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	names := make([][32]byte, len(keys))
	for i, k := range keys {
		names[i] = b.nameOf(prefix, k)
	}
	rows := make([]row, len(keys))
	read := func(ctx context.Context) error {
		clear(rows)
		if err := b.readRows(ctx, names, rows, b.now().UnixMilli()); err != nil {
			return b.failed("read", ctx, err)
		}
		return nil
	}
	// Alone on the writer, a read takes no write lock.
	_, err := b.do(ctx, read, func(ctx context.Context) (bool, error) { return true, read(ctx) })
	if err != nil {
		return nil, err
	}
	out := make([]store.Entry, len(keys))
	for i := range rows {
		out[i] = rows[i].entry
	}
	return out, nil
}

// Sweep implements [store.Backend]. It removes expired rows, of every
// secret, in transactions of at most SweepBatch rows, until none is left or
// ctx ends. Other calls may use the writer between two of them.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := b.sweepBatch(ctx, false)
		total += n
		if err != nil {
			return total, err
		}
		if n < b.batch {
			_, err := b.sweepBatch(ctx, true)
			return total, err
		}
	}
}

// sweepBatch removes a batch of expired rows, or, when count is set,
// counts the rows under this store's secret.
func (b *Backend) sweepBatch(ctx context.Context, count bool) (int, error) {
	var n int64
	_, err := b.do(ctx, func(tctx context.Context) error {
		if count {
			n, err := b.rowCount(tctx)
			if err == nil {
				b.entries.Store(int64(n))
			}
			return err
		}
		res, err := b.st.sweep.ExecContext(tctx, b.now().UnixMilli(), b.batch)
		if err != nil {
			return dbErr("sweep", err)
		}
		n, _ = res.RowsAffected()
		return nil
	}, nil)
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// sweepTick is the background sweep's work: at once, then every
// SweepInterval until Close.
func (b *Backend) sweepTick(ctx context.Context) {
	if _, err := b.Sweep(ctx); err != nil && ctx.Err() == nil && !b.closing() {
		b.log.Warn("limit store sweep failed: expired rows stay until the next sweep",
			"kind", storekit.KindSweepFailed, "err", err)
	}
}

func (b *Backend) closing() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// Close stops the background sweep and the writer, answering the calls
// still waiting for it as closed, and releases the writer's connection and,
// when Open opened it, the database. It is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.stop)
		b.closeCancel()
		b.sweeper.Stop()
		<-b.writerDone
		err := b.st.close()
		if cerr := discard(b.writer); err == nil {
			err = cerr
		}
		if b.ownDB {
			if cerr := b.db.Close(); err == nil {
				err = cerr
			}
		}
		b.closeErr = err
	})
	return b.closeErr
}

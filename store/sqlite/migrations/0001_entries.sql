-- gatecount limit store, version 1: entries, and the count of rows each
-- secret holds, kept exact by triggers so that the bound is one lookup.

CREATE TABLE IF NOT EXISTS gatecount_limit_entries (
    -- HMAC-SHA-256 of the handle's prefix and the key, under the app's secret.
    name       BLOB    NOT NULL PRIMARY KEY,
    -- Fingerprint of the secret the row was written under.
    secret     TEXT    NOT NULL,
    -- JSON of at most 4096 bytes: a blob, or an integer for a counter.
    value      BLOB    NOT NULL,
    -- Unix milliseconds, on the host's clock.
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS gatecount_limit_entries_expires_at
    ON gatecount_limit_entries (expires_at);

CREATE TABLE IF NOT EXISTS gatecount_limit_counts (
    secret TEXT    NOT NULL PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS gatecount_limit_entries_insert
AFTER INSERT ON gatecount_limit_entries
BEGIN
    INSERT INTO gatecount_limit_counts (secret, n) VALUES (NEW.secret, 1)
    ON CONFLICT (secret) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS gatecount_limit_entries_delete
AFTER DELETE ON gatecount_limit_entries
BEGIN
    UPDATE gatecount_limit_counts SET n = n - 1 WHERE secret = OLD.secret;
END;

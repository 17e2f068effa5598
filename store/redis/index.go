package redis

import "strings"

// indexKeys is how many Redis keys a script that writes entries takes for
// the live index of their tag, after the entries' keys.
const indexKeys = 2

// indexOf names the keys of tag's index of live entries: the count of
// entries per expiry (a hash, with their total in field "n"), the
// expiries it holds (a sorted set), then the index earlier versions
// kept (a sorted set of entry members), which only a tidy reads.
func (b *Backend) indexOf(tag string) [indexKeys + 1]string {
	return indexNames(keyPrefix(tag, b.fp))
}

// indexNames names the keys of the live index of the entries under p.
func indexNames(p string) [indexKeys + 1]string {
	return [...]string{p + "ends", p + "ends:at", p + "live"}
}

// The live index in Lua: the one place it is kept, as blocks of code that
// the scripts writing entries take in (indexLua). They are code, not Lua
// functions: a function would be made anew at each run of a script, which
// costs more than the rest of a count.
//
// The hash counts the entries per expiry millisecond, and their total in
// field "n"; the sorted set lists those milliseconds, so that a tidy finds
// the expired ones without a scan. An entry is counted from its write
// until a tidy finds its expiry passed. A new key costs two HINCRBYs, and a
// ZADD only for a millisecond the index does not hold yet. The index
// expires a minute after its newest expiry.
//
// Each block reads and sets the locals its comment names. The script's
// head ($INDEX) sets now, ends, endsat and top. Increments go to HINCRBY
// as strings: Redis formats a Lua number argument with snprintf, which
// costs more than the command.
var indexLua = strings.NewReplacer(
	"$INDEX", `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = #KEYS - 2
local ends, endsat = KEYS[n + 1], KEYS[n + 2]
local top = 0`,
	// $TIDY removes from the index the entries expired by now, and sets
	// removed to their number.
	"$TIDY", tidyLua,
	// $ROOM counts fresh new entries in the total and sets live to it,
	// when live and others (under other tags) stay within cap; otherwise
	// it tidies and tries again, and at last leaves the total as it was and
	// sets full to it.
	"$ROOM", `
local full, removed
local fs = fresh == 1 and '1' or string.format('%d', fresh)
live = redis.call('HINCRBY', ends, 'n', fs)
if live + others > cap then
  redis.call('HINCRBY', ends, 'n', '-' .. fs)
  `+tidyLua+`
  live = redis.call('HINCRBY', ends, 'n', fs)
  if live + others > cap then
    redis.call('HINCRBY', ends, 'n', '-' .. fs)
    full = live - fresh
  end
end`,
	// $ADD counts an entry expiring at e (ms), es in decimal, under that
	// expiry; $ROOM has counted it in the total.
	"$ADD", addLua,
	// $MOVE counts the live entry that expired at e0 as expiring at e
	// (es in decimal).
	"$MOVE", `
if e0 ~= e then
  `+uncountLua+`
  if not counted then redis.call('HINCRBY', ends, 'n', '1') end
  `+addLua+`
end`,
	// $DROP uncounts the live entry that expired at e0.
	"$DROP", uncountLua+`
if counted then redis.call('HINCRBY', ends, 'n', '-1') end`,
	// $FINISH makes the index outlive its newest expiry.
	"$FINISH", `
if top > 0 then
  local ttl = redis.call('PTTL', ends)
  if ttl < 0 or now + ttl < top then
    local at = string.format('%d', top + 60000)
    redis.call('PEXPIREAT', ends, at)
    redis.call('PEXPIREAT', endsat, at)
  end
end`,
)

// tidyLua is $TIDY.
const tidyLua = `
local nows = string.format('%d', now)
local gone = redis.call('ZRANGEBYSCORE', endsat, '-inf', nows)
removed = 0
for i = 1, #gone, 500 do
  local part = {unpack(gone, i, math.min(i + 499, #gone))}
  for _, c in ipairs(redis.call('HMGET', ends, unpack(part))) do
    removed = removed + math.max(tonumber(c) or 0, 0)
  end
  redis.call('HDEL', ends, unpack(part))
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', endsat, '-inf', nows)
  if redis.call('HINCRBY', ends, 'n', -removed) < 0 then redis.call('HSET', ends, 'n', 0) end
end`

// addLua is $ADD.
const addLua = `
if redis.call('HINCRBY', ends, es, '1') == 1 then
  redis.call('ZADD', endsat, es, es)
  if e > top then top = e end
end`

// uncountLua takes the entry that expired at e0 from its expiry's count,
// and sets counted to whether the index held it there: an entry is never
// uncounted twice.
const uncountLua = `
local counted
do
  local es = string.format('%d', e0)
  local c = redis.call('HINCRBY', ends, es, '-1')
  counted = c >= 0
  if c <= 0 then
    redis.call('HDEL', ends, es)
    redis.call('ZREM', endsat, es)
  end
end`

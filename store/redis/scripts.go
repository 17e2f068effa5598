package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// script is a Lua script the store runs by its SHA-1 (EVALSHA), loading it
// again (EVAL) on a server that lost it. hash and src hold the SHA-1 and
// the source as command arguments, put in an interface once.
type script struct {
	src  string
	rs   *goredis.Script
	hash any
	body any
}

func newScript(src string) *script {
	rs := goredis.NewScript(src)
	return &script{src: src, rs: rs, hash: rs.Hash(), body: src}
}

// load loads the script on the server, or on every master of a Cluster.
func (s *script) load(ctx context.Context, c goredis.UniversalClient) error {
	return s.rs.Load(ctx, c).Err()
}

// noRetry is a command the client must not send twice: a script whose
// answer was lost may have run, and running a write again can count an
// attempt twice. Clients still follow MOVED and ASK redirects for it, which
// Redis answers without running the command.
type noRetry struct{ *goredis.Cmd }

// NoRetry reports true.
func (noRetry) NoRetry() bool { return true }

// noRetryInts is noRetry for a script that answers integers.
type noRetryInts struct{ *goredis.IntSliceCmd }

// NoRetry reports true.
func (noRetryInts) NoRetry() bool { return true }

// eval runs s on keys with args, on the server or Cluster node that holds
// the keys. An OOM answer is the store being full (see storeErr).
func (b *Backend) eval(ctx context.Context, s *script, keys []string, args ...any) *goredis.Cmd {
	a := make([]any, 3+len(keys)+len(args))
	a = append(a[:cmdArgs(a, keys)], args...)
	a[0], a[1] = "evalsha", s.hash
	cmd := goredis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	_ = b.c.Process(ctx, noRetry{cmd})
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		a[0], a[1] = "eval", s.body
		cmd = goredis.NewCmd(ctx, a...)
		cmd.SetFirstKeyPos(3)
		_ = b.c.Process(ctx, noRetry{cmd})
	}
	if err := cmd.Err(); err != nil {
		cmd.SetErr(b.storeErr(err))
	}
	return cmd
}

// evalInts runs the command a, laid out by cmdArgs and followed by the
// script's arguments, as eval runs s. It is for a script that answers an
// array of integers, which it reads as such, with no interface to hold
// each.
func (b *Backend) evalInts(ctx context.Context, s *script, a []any) ([]int64, error) {
	a[0], a[1] = "evalsha", s.hash
	cmd := goredis.NewIntSliceCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	_ = b.c.Process(ctx, noRetryInts{cmd})
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		a[0], a[1] = "eval", s.body
		cmd = goredis.NewIntSliceCmd(ctx, a...)
		cmd.SetFirstKeyPos(3)
		_ = b.c.Process(ctx, noRetryInts{cmd})
	}
	if err := cmd.Err(); err != nil {
		return nil, b.storeErr(err)
	}
	return cmd.Val(), nil
}

// cmdArgs lays out the start of an EVAL or EVALSHA of keys in a. It puts
// two places for the command and the script (set when it is sent), then the
// number of keys, then the keys. Each key is a pointer to its name, since a
// string put in an interface would be copied. It returns how many places it
// filled.
func cmdArgs(a []any, keys []string) int {
	a[2] = len(keys)
	for i := range keys {
		a[3+i] = &keys[i]
	}
	return 3 + len(keys)
}

// The Lua scripts the store runs. Each takes the server's time with TIME and
// touches only keys of one hash tag, so it runs on one node of a Cluster.
//
// An entry is a Redis string "<expiry ms>:<value JSON>" set with PXAT at
// its expiry, so Redis removes it by itself. The scripts that write
// entries keep the live index of their tag (see indexLua).

// readScript returns the server's time (seconds, microseconds) and the raw
// values of KEYS, false where there is none.
var readScript = newScript(`
local t = redis.call('TIME')
local r = {t[1], t[2]}
for i = 1, #KEYS do
  r[i + 2] = redis.call('GET', KEYS[i])
end
return r
`)

// writeScript is the compare-and-set step of an Update. KEYS are the entry
// keys, then the live index's. ARGV: max entries, live entries elsewhere,
// the time apply was given (Unix ms). Then come four per key: mode, raw
// value as read, new raw value, new expiry. The layout, the modes and the
// special raw values are in args.go. The time apply was given must not be
// after the server's.
//
// It returns {status, live, now}. status is 0 on a conflict, 2 when new
// entries find no room, 1 when written. live is the index's count (after
// the write), or -1 when it was not counted. now is the server's time. A
// conflict writes nothing. After those three, it answers the raw values of
// the entry keys, false where there is none, as readScript would at now.
// The Update that guessed wrong goes on from that read.
var writeScript = newScript(indexLua.Replace(writeLayout.Replace(`$INDEX
local function conflict()
  local r = {0, -1, now}
  for i = 1, n do
    r[3 + i] = redis.call('GET', KEYS[i])
  end
  return r
end
if tonumber(ARGV[3]) > now then return conflict() end
local fresh = 0
for i = 1, n do
  local o = $HEAD + (i - 1) * $PER
  local mode, want, val = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local cur = redis.call('GET', KEYS[i])
  if mode == '$ABSENT' then
    if cur then return conflict() end
  elseif mode == '$LIVE' then
    if cur ~= want then return conflict() end
    if tonumber(string.match(want, '^(%d+):')) <= now then return conflict() end
  else
    if cur and cur ~= want then return conflict() end
  end
  if mode ~= '$LIVE' and val ~= '' and val ~= '$KEEP' and tonumber(ARGV[o + 4]) > now then
    fresh = fresh + 1
  end
end
local live = -1
if fresh > 0 then
  local others, cap = tonumber(ARGV[2]), tonumber(ARGV[1])
  $ROOM
  if full then return {2, full, now} end
end
for i = 1, n do
  local o = $HEAD + (i - 1) * $PER
  local mode, want, val, es = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4]
  if val ~= '$KEEP' then
    local e = tonumber(es)
    local e0 = mode == '$LIVE' and tonumber(string.match(want, '^(%d+):'))
    if val ~= '' and e > now then
      redis.call('SET', KEYS[i], val, 'PXAT', es)
      if e0 then
        $MOVE
      else
        $ADD
      end
    elseif e0 then
      redis.call('DEL', KEYS[i])
      $DROP
      if live >= 0 then live = live - 1 end
    elseif mode ~= '$ABSENT' then
      redis.call('DEL', KEYS[i])
    end
  end
end
$FINISH
return {1, live, now}
`)))

// countScript is the fixed-window count of store.Count in one step. KEYS
// are the counters' keys, then the live index. ARGV: amount, room (max
// entries less the live entries elsewhere), then two per key: cap, window
// ms (the layout is in args.go).
//
// It returns {-1} when a value is not a plain count it can do exact
// arithmetic on (the caller then counts through Update); {-2, now, live}
// when new counters find no room; otherwise {now, limiting (1-based, 0
// for none: allowed), live, count1, expiry1, count2, ...}, an expiry of 0
// meaning no counter.
//
// It runs on every limiter attempt, so it does the least it can: one
// pattern match per value, the answer built in place and sized for one
// key, few arguments, KEEPTTL for a live counter (whose TTL is its expiry,
// since every entry is set with PXAT at it), and Lua's own conversion of
// a string of digits (s + 0: tonumber converts twice). See "What a Count
// costs in Redis" in DESIGN.md.
var countScript = newScript(indexLua.Replace(countLayout.Replace(`$INDEX
local amt = ARGV[1] + 0
local r = {now, 0, -1, 0, 0}
local fresh = 0
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  local c, e = 0, 0
  if v then
    local es, body = string.match(v, '^(%d+):(%d+)$')
    if es and #body <= 15 then
      local ev = es + 0
      if ev > now then c, e = body + 0, ev end
    else
      es = string.match(v, '^(%d+):')
      if not es or es + 0 > now then return {-1} end
    end
  end
  r[2 + 2 * i], r[3 + 2 * i] = c, e
  if e == 0 then fresh = fresh + 1 end
  if r[2] == 0 and c > ARGV[$HEAD + 1 + (i - 1) * $PER] - amt then r[2] = i end
end
if r[2] > 0 then return r end
if fresh > 0 then
  local live, others, cap = 0, 0, ARGV[2] + 0
  $ROOM
  if full then return {-2, now, full} end
  r[3] = live
end
for i = 1, n do
  local c, e = r[2 + 2 * i] + amt, r[3 + 2 * i]
  if e == 0 then
    e = now + ARGV[$HEAD + 2 + (i - 1) * $PER]
    local es = string.format('%d', e)
    redis.call('SET', KEYS[i], es .. ':' .. string.format('%d', c), 'PXAT', es)
    $ADD
  else
    redis.call('SET', KEYS[i], string.format('%d:%d', e, c), 'KEEPTTL')
  end
  r[2 + 2 * i], r[3 + 2 * i] = c, e
end
$FINISH
return r
`)))

// tidyScript removes the expired entries from the live index whose keys
// are KEYS (see indexOf), and moves up to 1,000 live entries from the index
// earlier versions kept into it. It answers {removed, live, left}: the
// expired entries it removed, the live entries counted after, and the
// entries the earlier index holds still.
//
// An entry the earlier index holds is counted only once it is moved, and
// counted twice if a version that keeps that index writes it again: a
// deployment that runs both versions at once may exceed its bound, by
// what the earlier version writes between two sweeps.
var tidyScript = newScript(indexLua.Replace(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ends, endsat, earlier = KEYS[1], KEYS[2], KEYS[3]
local top, removed = 0
$TIDY
removed = removed + redis.call('ZREMRANGEBYSCORE', earlier, '-inf', nows)
local moving = redis.call('ZRANGE', earlier, 0, 999, 'WITHSCORES')
for i = 1, #moving, 2 do
  local e = tonumber(moving[i + 1])
  local es = string.format('%d', e)
  $ADD
end
if #moving > 0 then
  redis.call('HINCRBY', ends, 'n', #moving / 2)
  redis.call('ZREMRANGEBYRANK', earlier, 0, #moving / 2 - 1)
end
if redis.call('PTTL', ends) == -1 then
  local newest = redis.call('ZRANGE', endsat, -1, -1, 'WITHSCORES')
  top = math.max(tonumber(newest[2]) or now, now)
end
$FINISH
return {removed, tonumber(redis.call('HGET', ends, 'n')) or 0, redis.call('ZCARD', earlier)}
`))

package redis

// algoScript is store.Count for budgets of any algorithm, mixed in one
// call, in one step: the rule of store.ApplyCount in Lua. It reads and
// writes each algorithm's value as store documents it, inside the entry
// "<expiry ms>:<value JSON>". It answers as countScript does. It answers
// {-1} for a value it cannot read (the caller then counts through Update),
// and {-2, now, live} when new entries find no room. Otherwise it answers
// {allowed, now, limiting, live, count1, next1, ...}, next being when one
// more unit is admitted (0 for none). Every number stays below 2^53, which
// Lua holds exactly (store.Budget.Validate bounds a bucket's span), and
// division is exact.
var algoScript = newScript(indexLua.Replace(algoLayout.Replace(`$INDEX
local nowu = now * 1000
local amt = tonumber(ARGV[1])
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local st = {}
local limiting, fresh = 0, 0
for i = 1, n do
  local o = $HEAD + (i - 1) * $PER
  local alg, cap, win, iv = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
  local s = {alg = alg, cap = cap, win = win, iv = iv, c = 0, e = 0, live = false}
  local v = redis.call('GET', KEYS[i])
  if v then
    local es, body = string.match(v, '^(%d+):(.*)$')
    if not es then return {-1} end
    local ev = tonumber(es)
    if ev > now then
      s.live, s.exp = true, ev
      if alg == $SLIDING then
        if #body > 4096 or not string.match(body, '^%[%d+[%d,]*%]$') or string.find(body, ',,') or string.find(body, ',%]') then return {-1} end
        local times, prev = {}, -1
        for m in string.gmatch(body, '%d+') do
          if #m > 15 or (#m > 1 and string.sub(m, 1, 1) == '0') then return {-1} end
          local tm = tonumber(m)
          if tm < prev then return {-1} end
          prev = tm
          if tm > now - win then times[#times + 1] = m end
        end
        s.times, s.newest = times, prev
        s.c = #times
        if s.c > 0 then s.e = tonumber(times[1]) + win end
      elseif alg == $BUCKET then
        local m = string.match(body, '^{"tat":(%d+)}$')
        if not m or #m > 16 or (#m > 1 and string.sub(m, 1, 1) == '0') then return {-1} end
        s.tat = tonumber(m)
      else
        if #body > 15 or not string.match(body, '^%d+$') then return {-1} end
        s.c, s.e = tonumber(body), ev
      end
    end
  end
  if alg == $BUCKET then
    s.tat = math.max(s.tat or nowu, nowu)
    s.c = cdiv(s.tat - nowu, iv)
    if s.c > 0 then s.e = cdiv(s.tat - (math.min(s.c, cap) - 1) * iv, 1000) end
  elseif alg == $SLIDING and not s.times then
    s.times, s.newest = {}, 0
  end
  if not s.live then fresh = fresh + 1 end
  if limiting == 0 and s.c > cap - amt then limiting = i end
  st[i] = s
end
local live = -1
if limiting == 0 then
  if fresh > 0 then
    local others, cap = tonumber(ARGV[3]), tonumber(ARGV[2])
    $ROOM
    if full then return {-2, now, full} end
  end
  for i = 1, n do
    local s = st[i]
    local val, exp
    if s.alg == $SLIDING then
      local at = math.max(now, s.newest)
      local sat = string.format('%d', at)
      for _ = 1, amt do s.times[#s.times + 1] = sat end
      s.c = #s.times
      s.e = tonumber(s.times[1]) + s.win
      val, exp = '[' .. table.concat(s.times, ',') .. ']', at + s.win
    elseif s.alg == $BUCKET then
      s.tat = s.tat + amt * s.iv
      s.c = s.c + amt
      s.e = cdiv(s.tat - (math.min(s.c, s.cap) - 1) * s.iv, 1000)
      val, exp = string.format('{"tat":%d}', s.tat), cdiv(s.tat, 1000)
    else
      s.c = s.c + amt
      if not s.live then s.e = now + s.win end
      val, exp = string.format('%d', s.c), s.e
    end
    redis.call('SET', KEYS[i], string.format('%d:', exp) .. val, 'PXAT', string.format('%d', exp))
    local e, e0 = exp, s.exp
    if s.live then
      $MOVE
    else
      $ADD
    end
  end
  $FINISH
end
local r = {limiting == 0 and 1 or 0, now, limiting, live}
for i = 1, n do
  r[3 + 2 * i] = st[i].c
  r[4 + 2 * i] = st[i].e
end
return r
`)))

// CountsAlgorithms implements store.AlgorithmCounter: a Count with a
// budget other than a fixed window runs algoScript, one script.
func (b *Backend) CountsAlgorithms() {}

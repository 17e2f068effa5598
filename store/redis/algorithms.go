package redis

// algoScript is store.Count for budgets of any algorithm, mixed in one
// call, in one step: the rule of store.ApplyCount in Lua. It reads and
// writes each algorithm's value as store documents it, inside the entry
// "<expiry ms>:<value JSON>", and answers as countScript does: {-1} for a
// value it cannot read (the caller then counts through Update), {-2, now,
// live} when new entries find no room, else {now, limiting, live, count1,
// next1, ...}, next being when one more unit is admitted (0 for none).
// Every number stays below 2^53, which Lua holds exactly
// (store.Budget.Validate bounds a bucket's span), and division is exact.
//
// It runs on every limiter attempt with such a budget, so it makes no
// function and no table per key (a Lua function is made anew at each
// run): each key's state is kept in the array st, six places a key, and
// each algorithm's value is matched with one pattern.
var algoScript = newScript(indexLua.Replace(algoLayout.Replace(`$INDEX
local nowu = now * 1000
local amt = ARGV[1] + 0
local r = {now, 0, -1, 0, 0}
-- st, six places a key: algorithm, capacity, span, the live entry's expiry
-- (0 for none), x (a bucket's tat in µs, a sliding window's times), and a
-- sliding window's newest time.
local st = {0, 0, 0, 0, 0, 0}
local limiting, fresh = 0, 0
for i = 1, n do
  local o, k = $HEAD + (i - 1) * $PER, (i - 1) * 6
  local alg, cap, span = ARGV[o + 1], ARGV[o + 2] + 0, ARGV[o + 3] + 0
  local c, e, e0, x, newest = 0, 0, 0, nil, 0
  local v = redis.call('GET', KEYS[i])
  if v then
    local es, body
    if alg == '$BUCKET' then
      es, body = string.match(v, '^(%d+):{"tat":(%d+)}$')
    elseif alg == '$SLIDING' then
      es, body = string.match(v, '^(%d+):(.*)$')
    else
      es, body = string.match(v, '^(%d+):(%d+)$')
    end
    if not es then
      es = string.match(v, '^(%d+):')
      if not es or es + 0 > now then return {-1} end
    else
      local ev = es + 0
      if ev > now then
        e0 = ev
        if alg == '$SLIDING' then
          if #body > 4096 or not string.match(body, '^%[%d+[%d,]*%]$') or string.find(body, ',,') or string.find(body, ',%]') then return {-1} end
          local times, prev = {}, -1
          for m in string.gmatch(body, '%d+') do
            if #m > 15 or (#m > 1 and string.byte(m) == 48) then return {-1} end
            local tm = m + 0
            if tm < prev then return {-1} end
            prev = tm
            if tm > now - span then times[#times + 1] = m end
          end
          x, newest = times, prev
          c = #times
          if c > 0 then e = times[1] + span end
        elseif alg == '$BUCKET' then
          if #body > 16 or (#body > 1 and string.byte(body) == 48) then return {-1} end
          x = body + 0
        else
          if #body > 15 then return {-1} end
          c, e = body + 0, ev
        end
      end
    end
  end
  if alg == '$BUCKET' then
    if not x or x < nowu then x = nowu end
    if x > nowu then
      ` + cdiv("c", "x - nowu", "span") + `
    end
    if c > 0 then
      local m = c
      if m > cap then m = cap end
      ` + cdiv("e", "x - (m - 1) * span", "1000") + `
    end
  elseif alg == '$SLIDING' and not x then
    x = {}
  end
  if e0 == 0 then fresh = fresh + 1 end
  if limiting == 0 and c > cap - amt then limiting = i end
  st[k + 1], st[k + 2], st[k + 3], st[k + 4], st[k + 5], st[k + 6] = alg, cap, span, e0, x, newest
  r[2 + 2 * i], r[3 + 2 * i] = c, e
end
if limiting == 0 then
  if fresh > 0 then
    local live, others, cap = 0, 0, ARGV[2] + 0
    $ROOM
    if full then return {-2, now, full} end
    r[3] = live
  end
  for i = 1, n do
    local k = (i - 1) * 6
    local alg, cap, span, e0, x = st[k + 1], st[k + 2], st[k + 3], st[k + 4], st[k + 5]
    local c, nx = r[2 + 2 * i] + amt, r[3 + 2 * i]
    local val, e
    if alg == '$SLIDING' then
      local at = math.max(now, st[k + 6])
      local sat = string.format('%d', at)
      for _ = 1, amt do x[#x + 1] = sat end
      c = #x
      nx = x[1] + span
      val, e = '[' .. table.concat(x, ',') .. ']', at + span
    elseif alg == '$BUCKET' then
      x = x + amt * span
      local m = c
      if m > cap then m = cap end
      ` + cdiv("nx", "x - (m - 1) * span", "1000") + `
      ` + cdiv("e", "x", "1000") + `
      val = '{"tat":' .. string.format('%d', x) .. '}'
    else
      if e0 == 0 then nx = now + span end
      val, e = string.format('%d', c), nx
    end
    local es = string.format('%d', e)
    redis.call('SET', KEYS[i], es .. ':' .. val, 'PXAT', es)
    if e0 > 0 then
      $MOVE
    else
      $ADD
    end
    r[2 + 2 * i], r[3 + 2 * i] = c, nx
  end
  $FINISH
end
r[2] = limiting
return r
`)))

// cdiv is Lua code that sets q to a / b rounded up, exactly, for integers
// a ≥ 0 and b > 0 below 2^53 (the float quotient may be one off, and is
// corrected). It is code, not a Lua function, since a function would be
// made anew at each run of the script.
func cdiv(q, a, b string) string {
	return "do local num = (" + a + ") + (" + b + ") - 1; " + q + " = math.floor(num / (" + b + ")); " +
		"if " + q + " * (" + b + ") > num then " + q + " = " + q + " - 1 " +
		"elseif (" + q + " + 1) * (" + b + ") <= num then " + q + " = " + q + " + 1 end end"
}

// CountsAlgorithms implements store.AlgorithmCounter: a Count with a
// budget other than a fixed window runs algoScript, one script.
func (b *Backend) CountsAlgorithms() {}

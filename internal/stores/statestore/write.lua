-- Writes one aggregator window of one shard atomically, guarded by log position.
--
-- KEYS[1] meta, KEYS[2] cnt, KEYS[3] outbox, KEYS[4..6] bitmaps of online, idle,
-- invisible, then the state buckets the window writes, then the rev buckets it writes.
-- ARGV[1] last offset of the window, ARGV[2] next free index, ARGV[3] outbox,
-- ARGV[4..6] bitmaps (empty: unchanged), ARGV[7..9] their counts,
-- ARGV[10] the number of state buckets, ARGV[11] the number of rev buckets,
-- ARGV[12] the offset the writer last wrote (-1: none), ARGV[13] '1' while the writer
-- rebuilds the shard from the log, then for each bucket in KEYS order: its number of
-- entries c, then c field, value pairs (state buckets: user id, state; rev buckets:
-- index & 127, user id). Then the groups the window changed: KEYS[k] the shard's
-- group index and KEYS[k+1..k+g] the groups' bitmaps, k the key after the buckets;
-- ARGV the number of groups g, then per group its id, its bitmap (empty: unchanged)
-- and its counts (empty: the group has no member left in the shard, delete it).
-- Then the users the window erased: KEYS[m+2j-1] the state bucket and KEYS[m+2j] the
-- rev bucket of erasure j, m the last key before them; ARGV their number e, then per
-- erasure the state field to delete ('' when the window writes the id again) and the
-- rev field.
--
-- Returns 1 when written, 0 when the shard already holds this offset or a later
-- one: a replay after a crash between this write and the offset commit then changes
-- nothing (docs/design.md guarantee 7). Returns -1, writing nothing, when the shard
-- holds less than the writer last wrote: Redis lost its data (a flush, a restart
-- without persistence, a failover to an empty replica), and writing the window over
-- it would make a partial state look whole (guarantee 10).
local cur = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
if cur < tonumber(ARGV[12]) then
  return -1
end
if cur >= tonumber(ARGV[1]) then
  return 0
end

-- One HSET per bucket, of at most 256 pairs: unpack is bounded by Lua's C stack.
local k, a = 7, 14
for _ = 1, tonumber(ARGV[10]) + tonumber(ARGV[11]) do
  local c = tonumber(ARGV[a])
  a = a + 1
  while c > 0 do
    local m = math.min(c, 256)
    redis.call('HSET', KEYS[k], unpack(ARGV, a, a + 2 * m - 1))
    a = a + 2 * m
    c = c - m
  end
  k = k + 1
end

local groups = KEYS[k]
local ng = tonumber(ARGV[a])
for j = 1, ng do
  local id, members, counts = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  if counts == '' then
    redis.call('DEL', KEYS[k + j])
    redis.call('HDEL', groups, id)
  else
    if members ~= '' then
      redis.call('SET', KEYS[k + j], members)
    end
    redis.call('HSET', groups, id, counts)
  end
  a = a + 3
end

-- The group index and the groups' bitmaps are declared only when there are groups.
local m = k - 1
if ng > 0 then
  m = k + ng
end
a = a + 1
for j = 1, tonumber(ARGV[a]) do
  local field, rev = ARGV[a + 2 * j - 1], ARGV[a + 2 * j]
  if field ~= '' then
    redis.call('HDEL', KEYS[m + 2 * j - 1], field)
  end
  redis.call('HDEL', KEYS[m + 2 * j], rev)
end

local statuses = {'online', 'idle', 'invisible'}
for i = 1, 3 do
  if ARGV[3 + i] ~= '' then
    redis.call('SET', KEYS[3 + i], ARGV[3 + i])
  end
  redis.call('HSET', KEYS[2], statuses[i], ARGV[6 + i])
end

if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3])
end
redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'next', ARGV[2])
if ARGV[13] == '1' then
  redis.call('HSET', KEYS[1], 'rebuilding', '1')
end
return 1

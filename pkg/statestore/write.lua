-- Writes one aggregator window of one shard atomically, guarded by log position.
--
-- KEYS[1] meta, KEYS[2] ids, KEYS[3] cnt, KEYS[4] outbox,
-- KEYS[5..7] bitmaps of online, idle, invisible, KEYS[8] rev, KEYS[9..] user state keys.
-- ARGV[1] last offset of the window, ARGV[2] next free index, ARGV[3] outbox,
-- ARGV[4..6] bitmaps (empty: unchanged), ARGV[7..9] their counts,
-- ARGV[10] n new ids, then n pairs (user id, index), then one state per user key.
--
-- Returns 1 when written, 0 when the shard already holds this offset or a later
-- one: a replay after a crash between this write and the offset commit then changes
-- nothing (DESIGN.md guarantee 7).
local cur = tonumber(redis.call('HGET', KEYS[1], 'offset') or '-1')
if cur >= tonumber(ARGV[1]) then
  return 0
end

local n = tonumber(ARGV[10])
local a = 11
for _ = 1, n do
  redis.call('HSET', KEYS[2], ARGV[a], ARGV[a + 1])
  redis.call('HSET', KEYS[8], ARGV[a + 1], ARGV[a])
  a = a + 2
end

for i = 9, #KEYS do
  redis.call('SET', KEYS[i], ARGV[a])
  a = a + 1
end

local statuses = {'online', 'idle', 'invisible'}
for i = 1, 3 do
  if ARGV[3 + i] ~= '' then
    redis.call('SET', KEYS[4 + i], ARGV[3 + i])
  end
  redis.call('HSET', KEYS[3], statuses[i], ARGV[6 + i])
end

if ARGV[3] ~= '' then
  redis.call('SET', KEYS[4], ARGV[3])
end
redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'next', ARGV[2])
return 1

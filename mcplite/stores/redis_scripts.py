"""The Lua scripts of the Redis promise store (:mod:`.redis`): each change of a
record's state is one script, so two processes never both win a race."""

__all__ = ["CREATE", "GET", "LOSE", "PROGRESS", "SET_STATUS", "SWEEP"]

# KEYS[1] the expiry set, KEYS[2] the record, KEYS[3] the owner's lease key; ARGV: the
# capacity, id, expiry, tool, owner, inbox, the key's TTL and the lease in milliseconds.
CREATE = """
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'tool', ARGV[4], 'owner', ARGV[5], 'inbox', ARGV[6],
           'expires_at', ARGV[3], 'status', 'running')
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[8])
return 1
"""

# KEYS[1] the record; ARGV: owner key prefix.  The record's fields, then the
# milliseconds left of its owner's lease while it runs (-2: no lease; -1 otherwise).
GET = """
local v = redis.call('HMGET', KEYS[1], 'tool', 'owner', 'expires_at', 'status', 'progress',
                     'result', 'error')
if not v[4] then return false end
if v[4] == 'running' then
  table.insert(v, redis.call('PTTL', ARGV[1] .. v[2]))
else
  table.insert(v, -1)
end
return v
"""

# KEYS[1] the record; ARGV: owner key prefix, result, done channel, inbox prefix, id.
# Resolves a RUNNING record whose owner has no lease; 1 if it did.
LOSE = """
local found = redis.call('HMGET', KEYS[1], 'status', 'owner', 'inbox')
if found[1] ~= 'running' then return 0 end
if redis.call('EXISTS', ARGV[1] .. found[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'done', 'result', ARGV[2])
redis.call('PUBLISH', ARGV[3], '1')
redis.call('PUBLISH', ARGV[4] .. found[3], ARGV[5])
return 1
"""

# KEYS[1] the record; ARGV: status, result, error, done channel, inbox prefix, id,
# the calling store's inbox (told in the process, not through Redis).
SET_STATUS = """
local found = redis.call('HMGET', KEYS[1], 'status', 'inbox')
if not found[1] then return -1 end
if found[1] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[2]) end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[3]) end
redis.call('PUBLISH', ARGV[4], '1')
if ARGV[1] == 'cancelled' and found[2] ~= ARGV[7] then
  redis.call('PUBLISH', ARGV[5] .. found[2], ARGV[6])
end
return 1
"""

# KEYS[1] the expiry set; ARGV: now, record prefix, inbox prefix, done prefix, own inbox.
SWEEP = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local running = {}
for _, id in ipairs(ids) do
  local key = ARGV[2] .. id
  local found = redis.call('HMGET', key, 'status', 'inbox')
  if found[1] == 'running' then
    table.insert(running, id)
    if found[2] ~= ARGV[5] then redis.call('PUBLISH', ARGV[3] .. found[2], id) end
  end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], id)
  redis.call('PUBLISH', ARGV[4] .. id, '0')
end
return {#ids, running}
"""

PROGRESS = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'progress', ARGV[1]) end
return 0
"""

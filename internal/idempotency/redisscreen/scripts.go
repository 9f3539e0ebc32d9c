package redisscreen

import "github.com/redis/go-redis/v9"

// Every entry is ONE Redis hash under {prefix}{route}:{key} (SPEC §5), so
// each script touches one key and works on Redis Cluster whatever slot the
// key hashes to. Fields:
//
//	s  state: "f" in flight, "d" done, "x" forgotten (a tombstone, see
//	   forgetScript), "r" released before its claim landed (a tombstone,
//	   see releaseScript)
//	o  owner token (in flight; released: the owner whose claim is refused)
//	u  lease deadline, ms since the epoch by the Redis server's clock (in flight)
//	f  fingerprint, "" for none
//	e  the encoded response (done; see codec.go)
//	w  "1" once a waiter has looked at the in-flight entry (heldScript)
//
// Lease deadlines come from redis.call('TIME'), so replicas agree on them
// whatever their clocks. An in-flight key expires two leases after the
// claim: until then a claim past the deadline reports TakenOver.
//
// Scripts that end an in-flight entry publish its key on the events
// channel (ARGV[1]) only when a waiter marked it (w), since most
// deliveries have no repeat waiting. The mark cannot be missed: Wait
// subscribes before heldScript sets w atomically with reading the entry.
// Takeover and Forget always publish. PUBLISH goes through redis.pcall:
// waiters poll anyway, so an ACL user without the events channel must not
// fail, or half do, the operation around it.

// claimScript: ARGV = channel, owner, fingerprint, lease ms.
// Returns {1} acquired, {2} taken over, {3, owner, fingerprint, ms left}
// in flight, {4, fingerprint, entry} done, {5} refused: owner's claim was
// released before it landed (its caller gave up on it long ago).
var claimScript = redis.NewScript(claimSrc)

const claimSrc = `
local v = redis.call('HMGET', KEYS[1], 's', 'o', 'u', 'f', 'e')
local status = 1
if v[1] == 'd' then
  return {4, v[4], v[5]}
end
if v[1] == 'r' and v[2] == ARGV[2] then
  return {5}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if v[1] == 'f' then
  if v[2] == ARGV[2] then
    -- the owner again: a retry after a lost reply
    return {1}
  end
  local left = tonumber(v[3]) - now
  if left > 0 then
    return {3, v[2], v[4], left}
  end
  status = 2
  redis.pcall('PUBLISH', ARGV[1], KEYS[1])
end
local lease = tonumber(ARGV[4])
if v[1] then
  redis.call('DEL', KEYS[1]) -- the dead owner's fields (w) must not survive
end
redis.call('HSET', KEYS[1], 's', 'f', 'o', ARGV[2], 'u', string.format('%.0f', now + lease), 'f', ARGV[3])
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return {status}
`

// peekScript: no ARGV. Returns {} when the key holds no claim or record,
// else what claimScript would report of it, without the lease's ms left:
// {3, owner, fingerprint, 0} in flight, {4, fingerprint, entry} done. It
// writes nothing; it is a script so that concurrent peeks share one run
// (bundle.go).
var peekScript = redis.NewScript(peekSrc)

const peekSrc = `
local v = redis.call('HMGET', KEYS[1], 's', 'o', 'f', 'e')
if v[1] == 'd' then
  return {4, v[3], v[4]}
end
if v[1] == 'f' then
  return {3, v[2], v[3], 0}
end
return {}
`

// completeScript: ARGV = channel, ttl ms, fingerprint, entry, refill
// owner ("" for a record the caller wrote). Returns 1 when written, 0 when
// a done entry was kept, the key was forgotten (s = "x", see
// forgetScript), or a refill found the key in flight for another owner (a
// record read before an operator's delete must not end a new claim).
var completeScript = redis.NewScript(completeSrc)

const completeSrc = `
local v = redis.call('HMGET', KEYS[1], 's', 'w', 'o')
if v[1] == 'd' or v[1] == 'x' then
  return 0
end
if ARGV[5] ~= '' and v[1] == 'f' and v[3] ~= ARGV[5] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'd', 'f', ARGV[3], 'e', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if v[2] then
  redis.pcall('PUBLISH', ARGV[1], KEYS[1])
end
return 1
`

// releaseScript: ARGV = channel, owner, tombstone ms. Returns 1 when
// released, 0 when the key is not in flight for owner.
//
// A release can overtake its own claim whose reply was lost, which would
// then hold the key for a lease nobody ends. So a release that finds the
// key empty leaves a tombstone naming the owner (s = "r"): that owner's
// claim is refused, any other takes the key as absent.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 's', 'o', 'w')
if not v[1] then
  redis.call('HSET', KEYS[1], 's', 'r', 'o', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 0
end
if v[1] ~= 'f' or v[2] ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1])
if v[3] then
  redis.pcall('PUBLISH', ARGV[1], KEYS[1])
end
return 1
`)

// forgetScript: ARGV = channel, tombstone ms. Returns 1 when the key held
// an entry. It becomes a tombstone (s = "x") that completes refuse and
// claims take like an absent key.
var forgetScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], 's')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'x')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if old and old ~= 'x' then
  redis.pcall('PUBLISH', ARGV[1], KEYS[1])
  return 1
end
return 0
`)

// forgetDoneScript deletes the entry only when it is done. Returns 1 when
// it did. Nobody waits on a done entry: nothing is published.
var forgetDoneScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 's') == 'd' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// heldScript: ARGV = owner. Returns the ms left of owner's live claim, or
// -1 when owner holds none. A live claim is marked as waited for (w), so
// that its completion or release is published.
var heldScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 's', 'o', 'u')
if v[1] ~= 'f' or v[2] ~= ARGV[1] then
  return -1
end
local t = redis.call('TIME')
local left = tonumber(v[3]) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if left <= 0 then
  return -1
end
redis.call('HSET', KEYS[1], 'w', '1')
return left
`)

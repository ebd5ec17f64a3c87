"""The Lua scripts of the Redis backend: one round trip per command, atomic
(a script runs alone on the server), on a stock Redis (bitmaps, hashes and
the ``struct`` library every Redis since 2.6 carries).

A filter is two keys that share a hash tag (one slot in a Redis Cluster):

- ``{prefix}bf:{KEY}`` — a hash: ``l0`` (-ln of the error rate, as Python
  wrote it), ``e``, ``x`` (expansion), ``ns`` (1: non-scaling), ``n``
  (layers), ``items``, ``bytes`` (of all layers), and per layer ``i``:
  ``c<i>`` capacity, ``m<i>`` bits, ``k<i>`` hashes, ``s<i>`` items in it;
- ``{prefix}bf:{KEY}:bits:<i>`` — layer ``i``'s bits, a string made at its
  full size when the layer is added. The scripts name these keys from
  ``KEYS[2]`` (``...:bits``): they share its hash tag, so in a Redis
  Cluster they live in the declared keys' slot.

Items arrive hashed: 12 bytes each (three little-endian 32-bit words, see
:mod:`pushengine.bloom.hashing`); the scripts work out the bits with the
same arithmetic as the in-process backend (every value below 2**53, so
exact in Lua's doubles) and shape new layers with the same formula
(:func:`pushengine.bloom.params.layer_shape`).
"""
from __future__ import annotations

from pushengine.bloom import errors
from pushengine.bloom.params import LN2, MAX_BYTES, MAX_LAYERS

PRELUDE = """
local LN2 = %(ln2)r
local MAXBYTES = %(max_bytes)d
local MAXLAYERS = %(max_layers)d
-- the bytes this filter may hold in all, given the node's --bloom-max-bytes
-- and its other filters (each script sets it from an argument)
local ROOM = MAXBYTES

local function load(meta)
  local flat = redis.call('HGETALL', meta)
  if #flat == 0 then return nil end
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  local f = {l0 = tonumber(h.l0), x = tonumber(h.x), ns = h.ns == '1', n = tonumber(h.n),
             items = tonumber(h.items), bytes = tonumber(h.bytes), layers = {}}
  for i = 0, f.n - 1 do
    f.layers[i + 1] = {c = tonumber(h['c' .. i]), m = tonumber(h['m' .. i]),
                       k = tonumber(h['k' .. i]), s = tonumber(h['s' .. i]),
                       key = KEYS[2] .. ':' .. i}
  end
  return f
end

-- the same operations, in the same order, as params.layer_shape
local function shape(f, index, capacity)
  local j = index + 1
  if f.ns then j = 0 end
  local nl = f.l0 + j * LN2
  local bpe = nl / (LN2 * LN2)
  return math.ceil(capacity * bpe), math.ceil(nl / LN2)
end

-- a new last layer for `capacity` items: 1, or -3 when the filter would be
-- too large, -4 when it would pass ROOM. Each layer is a string of its own,
-- made at its final size (one allocation of exactly its bytes: growing one
-- string would leave Redis's spare room)
local function grow(f, meta, capacity)
  local index = f.n
  if index >= MAXLAYERS then return -3 end
  local m, k = shape(f, index, capacity)
  local nbytes = math.floor((m + 7) / 8)
  if f.bytes + nbytes > MAXBYTES then return -3 end
  if f.bytes + nbytes > ROOM then return -4 end
  local key = KEYS[2] .. ':' .. index
  redis.call('DEL', key)
  redis.call('SETRANGE', key, nbytes - 1, '\\0')
  f.layers[index + 1] = {c = capacity, m = m, k = k, s = 0, key = key}
  f.n = index + 1
  f.bytes = f.bytes + nbytes
  redis.call('HSET', meta, 'n', f.n, 'bytes', f.bytes, 'c' .. index, capacity, 'm' .. index, m,
             'k' .. index, k, 's' .. index, 0)
  return 1
end

local function create(meta, l0, e, capacity, x, ns)
  local f = {l0 = tonumber(l0), x = tonumber(x), ns = ns == '1', n = 0, items = 0, bytes = 0,
             layers = {}}
  local m = shape(f, 0, tonumber(capacity))
  local nbytes = math.floor((m + 7) / 8)
  if nbytes > MAXBYTES then return nil, '%(too_large)s' end
  if nbytes > ROOM then return nil, '%(no_room)s' end
  redis.call('DEL', meta)
  redis.call('HSET', meta, 'l0', l0, 'e', e, 'x', x, 'ns', f.ns and 1 or 0, 'items', 0)
  grow(f, meta, tonumber(capacity))
  return f
end

local function has(layer, index, h1, h2, h3)
  local m = layer.m
  local a = (h1 + index * h3) %% m
  local b = h2 %% m
  local bits = layer.key
  for _ = 1, layer.k do
    if redis.call('GETBIT', bits, a) == 0 then return false end
    a = a + b
    if a >= m then a = a - m end
  end
  return true
end

-- set the item's bits in a layer; true when every one was set already
local function set(layer, index, h1, h2, h3)
  local m = layer.m
  local a = (h1 + index * h3) %% m
  local b = h2 %% m
  local bits = layer.key
  local all = true
  for _ = 1, layer.k do
    -- one SETBIT per bit: cheaper than a BITFIELD of k SETs (measured)
    if redis.call('SETBIT', bits, a, 1) == 0 then all = false end
    a = a + b
    if a >= m then a = a - m end
  end
  return all
end
"""

# KEYS: meta, bits; ARGV: l0, e, capacity, expansion, nonscaling, room → "OK"
RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.error_reply('ERR %(exists)s') end
ROOM = tonumber(ARGV[6])
local f, why = create(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if not f then return redis.error_reply('ERR ' .. why) end
return redis.status_reply('OK')
"""

# KEYS: meta, bits; ARGV: create ("1"/"0"), l0, e, capacity, expansion,
# nonscaling, ttl ms (0: none), hashes, room → {codes, bytes of the filter};
# per item 1 added, 0 there, -2 full (non-scaling), -3 cannot grow, -4 no
# room under --bloom-max-bytes; stops at the first negative
ADD = """
local meta = KEYS[1]
ROOM = tonumber(ARGV[9])
local f = load(meta)
if not f then
  if ARGV[1] ~= '1' then return redis.error_reply('ERR %(not_found)s') end
  local why
  f, why = create(meta, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  if not f then return redis.error_reply('ERR ' .. why) end
end
local first = f.n
local blob = ARGV[8]
local out = {}
local pos = 1
for it = 1, #blob / 12 do
  local h1, h2, h3
  h1, h2, h3, pos = struct.unpack('<I4I4I4', blob, pos)
  local code = 1
  local n = f.n
  for i = n - 1, 1, -1 do
    if has(f.layers[i], i - 1, h1, h2, h3) then code = 0 break end
  end
  if code == 1 then
    local last = f.layers[n]
    if last.s < last.c then
      if set(last, n - 1, h1, h2, h3) then code = 0 end
    elseif has(last, n - 1, h1, h2, h3) then
      code = 0
    elseif f.ns then
      code = -2
    else
      code = grow(f, meta, last.c * f.x)
      if code == 1 then
        last = f.layers[f.n]
        set(last, f.n - 1, h1, h2, h3)
      end
    end
    if code == 1 then
      last.s = last.s + 1
      f.items = f.items + 1
    end
  end
  out[it] = code
  if code < 0 then break end
end
local counts = {'items', f.items}
for i = first, f.n do
  counts[#counts + 1] = 's' .. (i - 1)
  counts[#counts + 1] = f.layers[i].s
end
redis.call('HSET', meta, unpack(counts))
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  redis.call('PEXPIRE', meta, ttl)
  for i = 1, f.n do redis.call('PEXPIRE', f.layers[i].key, ttl) end
end
return {out, f.bytes}
"""

# KEYS: meta, bits → 1 (deleted, with every layer), or 0 (no such filter)
DELETE = """
local f = load(KEYS[1])
if not f then return 0 end
for i = 1, f.n do redis.call('DEL', f.layers[i].key) end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: meta, bits; ARGV: hashes → per item 1 or 0 (0 for a missing filter)
EXISTS = """
local blob = ARGV[1]
local out = {}
local f = load(KEYS[1])
local pos = 1
for it = 1, #blob / 12 do
  local h1, h2, h3
  h1, h2, h3, pos = struct.unpack('<I4I4I4', blob, pos)
  local found = 0
  if f then
    for i = f.n, 1, -1 do
      if has(f.layers[i], i - 1, h1, h2, h3) then found = 1 break end
    end
  end
  out[it] = found
end
return out
"""

# KEYS: meta, bits → {capacity, size, filters, items, expansion (-1: non-scaling)}
INFO = """
local f = load(KEYS[1])
if not f then return redis.error_reply('ERR %(not_found)s') end
local capacity = 0
for i = 1, f.n do capacity = capacity + f.layers[i].c end
local x = f.x
if f.ns then x = -1 end
return {capacity, f.bytes, f.n, f.items, x}
"""


def sources(max_bytes: int = MAX_BYTES, max_layers: int = MAX_LAYERS) -> dict[str, str]:
    """The scripts' source, by name, for filters of at most ``max_bytes``."""
    words = {"exists": errors.ITEM_EXISTS, "not_found": errors.NOT_FOUND,
             "too_large": errors.TOO_LARGE, "no_room": errors.NO_ROOM}
    prelude = PRELUDE % {"ln2": LN2, "max_bytes": max_bytes, "max_layers": max_layers, **words}
    return {name: prelude + body % words
            for name, body in (("reserve", RESERVE), ("add", ADD), ("exists", EXISTS),
                               ("info", INFO), ("delete", DELETE))}

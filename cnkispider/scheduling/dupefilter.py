"""A scalable Bloom filter in Redis: the crawl's dedupe, a few bytes per fingerprint.

Layers under ``{namespace}:bloom`` grow by ``DUPEFILTER_GROWTH`` with tightening error rates,
so the rates sum to less than ``DUPEFILTER_ERROR_RATE`` however far the filter grows (about 9
bytes per fingerprint at 10 million: docs/SPEED.md). The test and set run inside the
scheduler's enqueue script, so dedupe costs no round trip of its own.

Scope. A filter must not outlive what it describes, or it hides documents that are not stored
(a re-crawl after ``task move``, a new database on the same Redis). So the scheduler keeps one
filter per round, ``{namespace}:round:{id}:bloom`` (first layer ``DUPEFILTER_ROUND_CAPACITY``),
from the round's first request until it drains, when the queue script deletes it; requests
without a round share ``{namespace}:bloom``, deleted whenever the namespace holds no request. A
duplicate is thus a second copy of a document *within one crawl of its round* (a list page
replayed after its worker died, two sort orders of one search): exactly what must not be
fetched twice. :meth:`BloomDupeFilter.request_seen` and :meth:`add_fingerprints` use
``{namespace}:bloom`` (standalone use and the memory benchmark).

Requests with ``dont_filter`` are not tested. Fingerprints come from ``crawler.request_fingerprinter``
(see :mod:`cnkispider.scheduling.fingerprint` for ``doc_key``).

Settings: ``SCHEDULER_NAMESPACE``, ``DUPEFILTER_CAPACITY``, ``DUPEFILTER_ROUND_CAPACITY``,
``DUPEFILTER_ERROR_RATE``,
``DUPEFILTER_GROWTH``, ``DUPEFILTER_DEBUG``; for standalone use also ``REDIS_URL`` and
``CNKI_DATA_DIR``.

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingdupefilterpy.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.dupefilters import BaseDupeFilter

from cnkispider import default_settings
from cnkispider.scheduling import defaults
from cnkispider.store import redisconn

if TYPE_CHECKING:
    import redis
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

MAX_LAYER_BITS = 2**32 - 1  # a Redis string holds at most 512 MB

#: Lua functions shared by every script that dedupes. ``bloom_open(key, cfg)`` loads (creating
#: if missing) the filter state; ``bloom_check_and_add(B, fp)`` returns true for a fingerprint
#: seen before and records a new one; ``bloom_close(B)`` writes the newest layer's count back.
BLOOM_LUA = r"""
local LN2 = math.log(2)
local MAX_BITS = 4294967295

local function bloom_layer_params(B, i)
  local cap = math.floor(B.capacity * B.growth ^ i)
  local p = B.error * (1 - B.tight) * B.tight ^ i
  local m = math.ceil(cap * -math.log(p) / (LN2 * LN2))
  if m > MAX_BITS then m = MAX_BITS end
  local k = math.floor(m / cap * LN2 + 0.5)
  if k < 1 then k = 1 end
  return cap, m, k
end

local function bloom_add_layer(B)
  local i = B.n
  local cap, m, k = bloom_layer_params(B, i)
  B.cap[i], B.m[i], B.k[i] = cap, m, k
  B.n = i + 1
  B.count = 0
  redis.call('SETBIT', B.key .. ':' .. i, m - 1, 0)  -- allocate the whole array now
  redis.call('HSET', B.key, 'cap' .. i, cap, 'm' .. i, m, 'k' .. i, k, 'layers', B.n, 'count', 0)
end

local function bloom_open(key, capacity, error_rate, growth, tightening)
  local raw = redis.call('HGETALL', key)
  local h = {}
  for i = 1, #raw, 2 do h[raw[i]] = raw[i + 1] end
  local B = {key = key, cap = {}, m = {}, k = {}, dirty = false}
  if h.layers == nil then
    B.capacity, B.error = tonumber(capacity), tonumber(error_rate)
    B.growth, B.tight = tonumber(growth), tonumber(tightening)
    B.n, B.count = 0, 0
    redis.call('HSET', key, 'capacity', capacity, 'error_rate', error_rate,
               'growth', growth, 'tightening', tightening)
    bloom_add_layer(B)
    return B
  end
  B.capacity, B.error = tonumber(h.capacity), tonumber(h.error_rate)
  B.growth, B.tight = tonumber(h.growth), tonumber(h.tightening)
  B.n, B.count = tonumber(h.layers), tonumber(h.count)
  for i = 0, B.n - 1 do
    B.cap[i], B.m[i], B.k[i] = tonumber(h['cap' .. i]), tonumber(h['m' .. i]), tonumber(h['k' .. i])
  end
  return B
end

-- k positions in [0, m) from the first 8 bytes of the fingerprint (enhanced double hashing).
local function bloom_bits(B, i, fp, op)
  local m, k = B.m[i], B.k[i]
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(fp, 1, 8)
  local a = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % m
  local b = (((b5 * 256 + b6) * 256 + b7) * 256 + b8) % m
  local args = {B.key .. ':' .. i}
  local n = 1
  for j = 1, k do
    if op == 'SET' then
      args[n + 1], args[n + 2], args[n + 3], args[n + 4] = 'SET', 'u1', a, 1
      n = n + 4
    else
      args[n + 1], args[n + 2], args[n + 3] = 'GET', 'u1', a
      n = n + 3
    end
    a = (a + b) % m
    b = (b + j) % m
  end
  local bits = redis.call('BITFIELD', unpack(args))
  for j = 1, k do
    if bits[j] == 0 then return false end
  end
  return true
end

local function bloom_check_and_add(B, fp)
  local last = B.n - 1
  for i = 0, last - 1 do
    if bloom_bits(B, i, fp, 'GET') then return true end
  end
  if bloom_bits(B, last, fp, 'SET') then return true end  -- every bit was already set
  B.count = B.count + 1
  B.dirty = true
  if B.count >= B.cap[last] then bloom_add_layer(B) end
  return false
end

local function bloom_close(B)
  if B.dirty then redis.call('HSET', B.key, 'count', B.count) end
end
"""

_SEEN_SCRIPT = (
    BLOOM_LUA
    + r"""
local B = bloom_open(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local out = {}
for i = 5, #ARGV do
  out[#out + 1] = bloom_check_and_add(B, ARGV[i]) and 1 or 0
end
bloom_close(B)
return out
"""
)


@dataclass(frozen=True)
class Layer:
    capacity: int
    bits: int
    hashes: int


def layer_plan(capacity: int, error_rate: float, growth: float, index: int) -> Layer:
    """Size of layer ``index`` (the same formula as the Lua code, for reports and tests)."""
    tightening = defaults.DUPEFILTER_TIGHTENING
    cap = math.floor(capacity * growth**index)
    p = error_rate * (1 - tightening) * tightening**index
    bits = min(math.ceil(cap * -math.log(p) / (math.log(2) ** 2)), MAX_LAYER_BITS)
    return Layer(cap, bits, max(1, math.floor(bits / cap * math.log(2) + 0.5)))


def bytes_for(count: int, capacity: int, error_rate: float, growth: float) -> int:
    """Bytes of bit arrays the filter has allocated once it holds ``count`` fingerprints."""
    total, held, index = 0, 0, 0
    while True:
        layer = layer_plan(capacity, error_rate, growth, index)
        total += (layer.bits + 7) // 8
        held += layer.capacity
        if held > count:  # a layer is added as soon as the newest one is full
            return total
        index += 1


class BloomDupeFilter(BaseDupeFilter):
    """Scrapy dupefilter backed by the Redis Bloom filter of one task namespace."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDupeFilter:
        settings = crawler.settings
        return cls(
            namespace=settings.get("SCHEDULER_NAMESPACE"),
            capacity=settings.getint("DUPEFILTER_CAPACITY"),
            round_capacity=settings.getint("DUPEFILTER_ROUND_CAPACITY"),
            error_rate=settings.getfloat("DUPEFILTER_ERROR_RATE"),
            growth=settings.getfloat("DUPEFILTER_GROWTH"),
            fingerprinter=crawler.request_fingerprinter,
            redis_url=settings.get("REDIS_URL"),
            data_dir=settings.get("CNKI_DATA_DIR"),
            debug=settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
        )

    def __init__(
        self,
        namespace: str = default_settings.SCHEDULER_NAMESPACE,
        *,
        capacity: int = default_settings.DUPEFILTER_CAPACITY,
        round_capacity: int = default_settings.DUPEFILTER_ROUND_CAPACITY,
        error_rate: float = default_settings.DUPEFILTER_ERROR_RATE,
        growth: float = default_settings.DUPEFILTER_GROWTH,
        fingerprinter: Any = None,
        client: redis.Redis | None = None,
        redis_url: str = default_settings.REDIS_URL,
        data_dir: str = default_settings.CNKI_DATA_DIR,
        debug: bool = False,
        stats: Any = None,
    ):
        if capacity < 1 or round_capacity < 1:
            raise ValueError(
                f"DUPEFILTER_CAPACITY and DUPEFILTER_ROUND_CAPACITY must be at least 1, got "
                f"{capacity} and {round_capacity}"
            )
        if not 0 < error_rate < 1:
            raise ValueError(f"DUPEFILTER_ERROR_RATE must be between 0 and 1, got {error_rate}")
        if growth < 1:
            raise ValueError(f"DUPEFILTER_GROWTH must be at least 1, got {growth}")
        self.key = f"{namespace}:bloom"
        self.capacity, self.error_rate, self.growth = capacity, error_rate, growth
        self.round_capacity = round_capacity
        self.fingerprinter = fingerprinter
        self.debug, self.stats = debug, stats
        self._client = client
        self._redis_url, self._data_dir = redis_url, data_dir
        self._script = None

    # --- what the scheduler's enqueue script needs ---------------------------------------------

    def script_args(self) -> list[Any]:
        """The configuration arguments of ``bloom_open`` (used when the filter is created)."""
        return [
            self.capacity,
            repr(float(self.error_rate)),
            self.growth,
            defaults.DUPEFILTER_TIGHTENING,
        ]

    def fingerprint(self, request: Request) -> bytes:
        """The bytes the filter hashes: the request fingerprint (at least 8 bytes)."""
        if self.fingerprinter is None:
            from scrapy.utils.request import fingerprint

            fp = fingerprint(request)
        else:
            fp = self.fingerprinter.fingerprint(request)
        return fp if len(fp) >= 8 else hashlib.sha1(fp).digest()

    # --- standalone use ---------------------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redisconn.connect(self._redis_url, self._data_dir)
        return self._client

    def add_fingerprints(self, fingerprints: list[bytes]) -> list[bool]:
        """Test-and-set many fingerprints in one call; ``True`` for each one seen before."""
        if self._script is None:
            self._script = self.client.register_script(_SEEN_SCRIPT)
        fps = [fp if len(fp) >= 8 else hashlib.sha1(fp).digest() for fp in fingerprints]
        result = self._script(keys=[self.key], args=[*self.script_args(), *fps])
        return [bool(x) for x in result]

    def request_seen(self, request: Request) -> bool:
        return self.add_fingerprints([self.fingerprint(request)])[0]

    def memory(self) -> dict[str, int]:
        """Bytes held by the bit arrays, the layer count and the fingerprints recorded."""
        state = {k.decode(): v.decode() for k, v in self.client.hgetall(self.key).items()}
        layers = int(state.get("layers", 0))
        total = sum(self.client.strlen(f"{self.key}:{i}") for i in range(layers))
        count = int(state.get("count", 0)) + sum(int(state[f"cap{i}"]) for i in range(layers - 1))
        return {"bytes": total, "layers": layers, "fingerprints": count}

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request})
        if self.stats is not None:
            self.stats.inc_value("dupefilter/filtered")

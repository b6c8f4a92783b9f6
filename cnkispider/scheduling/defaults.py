"""The tuning constants of the Redis scheduling package (not settings).

The defaults of its settings (``SCHEDULER_*``, ``DUPEFILTER_*``, ``REDIS_URL``, ``CNKI_DATA_DIR``)
are in :mod:`cnkispider.default_settings`, with what each one means.
"""

#: Each Bloom layer's error rate is this fraction of the previous one's, so that the sum over
#: all layers stays below DUPEFILTER_ERROR_RATE (Almeida et al., "Scalable Bloom Filters", 2007).
DUPEFILTER_TIGHTENING = 0.5

#: Largest number of buffered writes sent in one Redis call; more wait for the next call. Bounds
#: how long one Lua script holds the (single-threaded) server.
MAX_OPS_PER_SYNC = 500
#: Expired leases examined per Redis call (the rest on the next one).
MAX_EXPIRED_PER_SYNC = 200
#: Seconds a worker that was told a round drained has to confirm it before another worker is
#: told instead (the first one died between the count reaching zero and its signal handlers).
DRAINED_CONFIRM_SECONDS = 120.0
#: Seconds before a drain flow control could not take yet (its round was not marked seeded) is
#: checked again; doubled each time, up to DRAINED_RECHECK_MAX.
DRAINED_RECHECK_SECONDS = 0.5
DRAINED_RECHECK_MAX = 30.0
#: Scrapy priorities are clamped to +-2**19 so that priority and sequence fit one exact score.
PRIORITY_LIMIT = 2**19

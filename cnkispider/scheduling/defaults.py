"""Every default of the Redis scheduling package, in one place.

Settings (Scrapy names; config.ini maps onto them):

=============================  =================  ============================================
setting                        default            meaning
=============================  =================  ============================================
``SCHEDULER_NAMESPACE``        ``"cnki"``         key prefix of one task (e.g. ``cnki:task:7``)
``SCHEDULER_LEASE_SECONDS``    ``60``             a popped request returns to the queue after
                                                  this long without renewal (renewed every
                                                  third of it while its worker lives)
``SCHEDULER_MAX_ATTEMPTS``     ``5``              hand-outs whose lease ran out before the
                                                  request is abandoned (``request_abandoned``)
``SCHEDULER_BATCH_SIZE``       ``32``             requests popped per Redis call (local buffer)
``SCHEDULER_FLUSH_INTERVAL``   ``0.05``           seconds a buffered write waits at most
``SCHEDULER_IDLE_POLL``        ``0.5``            seconds between polls of an empty queue
``REDIS_URL``                  ``""``             empty: the embedded Redis under the data dir
``CNKI_DATA_DIR``              ``"data"``         folder of the embedded Redis (and more)
``DUPEFILTER_CAPACITY``        ``100000``         fingerprints the first Bloom layer holds
                                                  (the filter of requests without a round)
``DUPEFILTER_ROUND_CAPACITY``  ``10000``          the same for each round's own filter
``DUPEFILTER_ERROR_RATE``      ``1e-9``           false-drop probability of a new document
``DUPEFILTER_GROWTH``          ``2``              each further layer holds this many times more
=============================  =================  ============================================
"""

NAMESPACE = "cnki"
LEASE_SECONDS = 60.0
MAX_ATTEMPTS = 5
BATCH_SIZE = 32
FLUSH_INTERVAL = 0.05
IDLE_POLL = 0.5

REDIS_URL = ""
DATA_DIR = "data"

DUPEFILTER_CAPACITY = 100_000
DUPEFILTER_ERROR_RATE = 1e-9
DUPEFILTER_GROWTH = 2
#: A round's filter starts small (a round lists a few thousand documents; a split one grows it
#: by layers) and is deleted when the round drains.
DUPEFILTER_ROUND_CAPACITY = 10_000
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

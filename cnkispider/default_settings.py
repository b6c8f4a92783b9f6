"""The default of every setting the crawler reads, each written once, one section per prefix.

The counterpart of Scrapy's ``scrapy/settings/default_settings.py``: every upper-case name here is
a Scrapy setting, and :class:`cnkispider.runtime.addon.DefaultSettings` (in ``ADDONS`` of
``cnkispider.settings``) installs them all at the ``addon`` priority, so the project settings,
config.ini (mapped in :func:`cnkispider.launch.crawlsettings.crawler_settings`), ``-s`` and a spider's
``custom_settings`` override them, and components read a setting without a fallback of their own.
``config.SCHEMA`` takes the default of each key that maps onto a setting from here, and
constructors that have a default refer to these names.

Only setting names may be upper-case in this module: the add-on installs every one of them.
"""

# -- Scrapy's own settings, changed -------------------------------------------------------------
# config.ini's [crawl] maps onto these.

CONCURRENT_REQUESTS = 16
DOWNLOAD_DELAY = 0.0
DOWNLOAD_TIMEOUT = 30.0  # Scrapy's is 180: a CNKI page that takes longer is a stuck request
LOG_LEVEL = "INFO"
COOKIES_ENABLED = True  # sessions are cookie jars
# Scrapy runs each response's output through this many asyncio tasks, made anew per response
# whatever the output's length (100: 101 tasks for a detail page's one item, about 15% of
# a worker's CPU). 50 is the most items one response yields (a list page at list depth, an
# export batch), so a response's items still share one database batch.
CONCURRENT_ITEMS = 50

# -- CNKI_*: the site (cnkispider/cnki/protocol.py) ---------------------------------------------

CNKI_BASE_URL = "https://kns.cnki.net"
CNKI_CLIENT_ID_URL = "https://recsys.cnki.net/RCDService/api/UtilityOpenApi/GenerateClientID"
CNKI_PAGE_SIZE = 50  # CNKI accepts only 10, 20 and 50
CNKI_CAP_ROWS = 6000  # rows one search order can reach, whatever the page size
CNKI_MAX_PAGES = 0  # 0: cap_rows // page_size
CNKI_CATEGORY_MODE = "subject"  # subject | facet
CNKI_CATEGORY_FIELD = "CLC"
CNKI_CATEGORY_OPERATOR = "SUFFIX"
# export ids a session's first GetExport asks for; learned down per session from CNKI's answers
# (cnkispider/cnki/export_batch.py)
CNKI_EXPORT_BATCH = 50
CNKI_DATA_DIR = "data"  # the embedded Redis, the archive (relative to config.ini's folder)

# -- DATABASE_*: storage (cnkispider/pipelines.py, cnkispider/store/db.py) ----------------------------

DATABASE_URL = "sqlite:///data/cnki.db"
# seconds a worker waits out an unreachable database (with backoff, a log line per attempt)
# before it gives up; minutes, so a restart or failover does not stop a crawl
DATABASE_OUTAGE_SECONDS = 600.0
DATABASE_BATCH_SIZE = 200  # documents written per transaction at most
DATABASE_BATCH_SECONDS = 0.2  # seconds a document waits at most for its batch
# days after which a done round's per-document ledger rows are folded into per-round counts
# (tasks/retention.py); 0: never, every row is kept. Kept above a follow task's look-back
# (at least TASKS_LOOK_BACK_DAYS + 30): a look walks its window's rounds on their rows.
DATABASE_LEDGER_DAYS = 180
# seconds between two folds of a long-running worker (the first when it starts); 0: at start only
DATABASE_FOLD_EVERY = 6 * 3600

# -- REDIS_* ------------------------------------------------------------------------------------

REDIS_URL = ""  # empty: the embedded Redis under CNKI_DATA_DIR
# the prefix of every key the crawler keeps in Redis ([redis] prefix): a task's queue under
# <prefix><task>:, the shared pace under <prefix>ratelimit:, the session pool under <prefix><host>:
REDIS_KEY_PREFIX = "cnki:"
# retention ([redis] unreadable_kept, remove_finished): the newest requests refused as unreadable
# kept in <namespace>:unreadable for a person to read (older ones are trimmed), and whether a
# task's keys are removed from Redis when it finishes
REDIS_UNREADABLE_KEPT = 1000
REDIS_REMOVE_FINISHED = True

# -- SCHEDULER_*, DUPEFILTER_*: Redis scheduling (cnkispider/scheduling/) -----------------------

SCHEDULER_NAMESPACE = "cnki"  # one task's keys (crawler_settings: REDIS_KEY_PREFIX + task name)
# a popped request returns to the queue after this long without renewal (renewed every third
# of it while its worker lives)
SCHEDULER_LEASE_SECONDS = 60
SCHEDULER_MAX_ATTEMPTS = 5  # hand-outs whose lease ran out before the request is abandoned
SCHEDULER_BATCH_SIZE = 32  # requests popped per Redis call (local buffer)
SCHEDULER_FLUSH_INTERVAL = 0.05  # seconds a buffered write waits at most
SCHEDULER_IDLE_POLL = 0.5  # seconds between polls of an empty queue
# hosts besides CNKI_BASE_URL and CNKI_CLIENT_ID_URL a request read back from Redis may go to
SCHEDULER_ALLOWED_HOSTS: list[str] = []
DUPEFILTER_CAPACITY = 100_000  # fingerprints the first Bloom layer holds (requests without a round)
# the same for each round's own filter: a round lists a few thousand documents (a split one
# grows it by layers), and the filter is deleted when the round drains
DUPEFILTER_ROUND_CAPACITY = 10_000
DUPEFILTER_ERROR_RATE = 1e-9  # false-drop probability of a new document
DUPEFILTER_GROWTH = 2  # each further layer holds this many times more

# -- SESSION_*, USERAGENT_*: the browser we look like (cnkispider/middlewares/) -----------------

SESSION_ENABLED = True
SESSION_TURN_LIMIT = 14  # CNKI allows 15 turns after the first grid request: renew one early
SESSION_MAX_AGE = 600.0  # seconds; 0 = no limit
SESSION_POOL_SIZE = 4
# a retired session's cookie jar is freed after this long: PROXY_WAIT_MAX + DOWNLOAD_TIMEOUT
# + RETRY_BACKOFF_MAX, the longest a request holding a session may still be on its way
SESSION_JAR_GRACE = 660.0
USERAGENT_ENABLED = True
USERAGENT_BROWSERS = ["Chrome", "Edge", "Firefox", "Safari"]
USERAGENT_OS = ["Windows", "Mac OS X", "Linux"]
USERAGENT_PLATFORMS = ["desktop"]

# -- PROXY_*: proxies from the pool in proxy/ (cnkispider/middlewares/proxy.py) -----------------

PROXY_ENABLED = False  # the global switch (the seed's PROXY_OPEN)
PROXY_API_URL = ""
PROXY_API_FORMAT = "lines"  # lines | json
PROXY_API_JSON_PATH = "data"
PROXY_API_JSON_IP = "ip"
PROXY_API_JSON_PORT = "port"
PROXY_API_TIMEOUT = 10.0
PROXY_CREDENTIALS = ""  # user:pass for proxies that come without
PROXY_STATIC: list[str] = []  # fixed proxies instead of an API
PROXY_REUSE = 10  # average uses per proxy
PROXY_FETCH_INTERVAL = 5.0  # seconds between provider calls (its rate limit)
PROXY_MAX_AGE = 0.0  # seconds a proxy may be handed out after purchase; 0 = no limit
PROXY_BAN_STATUSES = [403, 407]  # a 429 cools a proxy, it does not evict it
PROXY_BAN_REASONS = ["captcha"]
PROXY_BAN_TIME = 300.0  # seconds an evicted address is refused when offered again
PROXY_WAIT_MAX = 600.0  # seconds a request waits for a proxy before it gives up

# -- RETRY_*: cnkispider/middlewares/retry.py (the rest of RETRY_* is Scrapy's, unchanged) ------

RETRY_TIMES = 5  # CNKI says no often and transiently; Scrapy's default is 2
RETRY_PRIORITY_ADJUST = 1  # retry at once: ahead of new work, not behind it (Scrapy: -1)
RETRY_BACKOFF_BASE = 0.5  # seconds before the first retry (x2 each time, jittered)
RETRY_BACKOFF_MAX = 30.0
# challenges that persist across this many fresh sessions pause the task for the cool-down
RETRY_CHALLENGE_SESSIONS = 4
RETRY_CHALLENGE_COOLDOWN = 300.0  # seconds; shared by every worker (Redis); 0 = no pause

# -- RATELIMIT_*, PACE_*: cnkispider/middlewares/ratelimit.py (and cnkispider/pace/store.py) ----

RATELIMIT_ENABLED = True
RATELIMIT_RATE = 0.0  # requests/s to one site, all workers together; 0 = no limit
RATELIMIT_PROXY_RATE = 0.0  # requests/s through one proxy, all workers together; 0 = no limit
RATELIMIT_BURST = 1  # requests a fixed key lets go at once after a quiet spell
RATELIMIT_LATE = 0.05  # seconds a request may wake after its time and still go
# CNKI's "come back later" (a 429, or a 503 with Retry-After) closes a window for every worker
RATELIMIT_WINDOWS = True
RATELIMIT_MAX_BACKOFF = 300.0  # seconds: the longest backoff of a 429 without Retry-After
RATELIMIT_BACKOFF = (5.0, 3.0)  # a 429 without Retry-After: 5 s, then x3 (5, 15, 45 s...)
RATELIMIT_KEY_PREFIX = "cnki:ratelimit"  # crawler_settings: REDIS_KEY_PREFIX + "ratelimit"
PACE_ENABLED = False
PACE_START = 0.5  # requests/s of a new session or IP
PACE_STEP = 0.5  # requests/s gained per second of clean answers
PACE_DECREASE = 0.5  # factor applied on a challenge
PACE_CEILING = 0.95  # share of the last challenged pace where fast growth stops
PACE_PROBE_SECONDS = 1800.0  # clean seconds to grow from that share back to the ceiling
PACE_MIN = 0.05
PACE_MAX = 0.0  # 0: the site's fixed limit (RATELIMIT_RATE), or none when that is 0 too
PACE_COOLDOWN = 30.0  # seconds a challenged session or IP stays quiet, doubled up to the max
PACE_COOLDOWN_MAX = 600.0
PACE_WINDOW = 2.0  # seconds over which the site is assumed to count a pace
PACE_TTL = 7 * 24 * 3600.0  # seconds an IP's learned pace is kept after its last use
PACE_DIRECT_NAME = "direct"  # the IP name of requests without a proxy

# -- SESSIONS_*: sessions a person verified (cnkispider/sessions/), NOTIFY_* (cnkispider/watch/notify.py)

# auto: plain sessions until CNKI checks for a person, then verified ones | verified | plain
SESSIONS_MODE = "auto"
SESSIONS_ON_CHECK = "wait"  # no usable session: wait | prompt (ask at the console) | fail (exit 3)
# Redis key prefix of the pool; empty: REDIS_KEY_PREFIX + CNKI_BASE_URL's host (a session is the
# site's)
SESSIONS_NAMESPACE = ""
SESSIONS_TTL = 12 * 3600.0  # seconds a session stays in the pool at most
SESSIONS_LEASE = 120.0  # seconds a round keeps its session without a request (a dead worker's)
SESSIONS_POLL = 5.0  # seconds between looks at the pool while waiting for a person or a session
# fresh plain sessions in a row whose warm-up CNKI sends to its check before auto moves on
SESSIONS_AUTO_AFTER = 3
# requests/s a verified session never exceeds (2026 reports: 1.5 s between searches, 2 s between
# detail pages; 4 quick requests drew the check)
SESSIONS_PACE_MAX = 0.5
# requests a person's pass answers before CNKI checks again, until passes have been measured
# (the stand-in's hidden limit is 300; a detail crawl got 283 of them: docs/SESSIONS.md)
SESSIONS_PASS_REQUESTS = 280
NOTIFY_WEBHOOKS: list[str] = []  # URLs that get one POST when a task waits, halts or finishes
NOTIFY_FORMAT = "json"  # json | dingtalk | wecom | feishu
NOTIFY_TIMEOUT = 5.0  # seconds a webhook may take

# -- WEB_*: `cnkispider web`, the operator's page (cnkispider/web/) ------------------------------

WEB_HOST = "127.0.0.1"  # this machine only: reach it from elsewhere through an SSH tunnel
WEB_PORT = 8700
# empty: made at the first start, kept in data_dir/web-token and printed once
WEB_TOKEN = ""
# the page's address as a person reaches it (a tunnel's, a proxy's): the notification links the
# pass desk there; empty: no link in the message
WEB_PUBLIC_URL = ""

# -- the operator's language ([ui]; cnkispider/words/i18n.py, docs/TRANSLATING.md) ----------------------
UI_LANGUAGE = ""  # zh_CN | en; empty: the locale's (LANG=zh_CN.UTF-8 gives Chinese), else English

# -- TASKS_*, ERRORS_*: flow control (tasks/, errors/, cnkispider/watch/halting.py) -------------------

TASKS_ENABLED = True
TASKS_NAME = "default"
TASKS_TYPE = "patent"
TASKS_START_DATE = ""  # empty: today
TASKS_END_DATE = ""  # empty: open-ended, crawled up to today
TASKS_CATEGORIES = "builtin"
# list | export | detail (cnkispider.items.DEPTHS, docs/DEPTH.md): what a task fetches beyond its
# list rows; cnkispider.items.DEFAULT_DEPTH is this
TASKS_DEPTH = "detail"
# the task's professional-search expression (docs/QUERY.md); "" = every document of the category
TASKS_QUERY = ""
# one search per day without the category first (tasks/rounds.py "The day census"); False: a round
# per (day x root category), as before issue 21 (the benchmark's baseline)
TASKS_DAY_CENSUS = True
# issue 38 (docs/FOLLOW.md): a task that follows today counts the days of its look-back again
# every TASKS_FOLLOW_EVERY seconds (0: at each worker's start) and crawls what CNKI added late
TASKS_FOLLOW = False
TASKS_LOOK_BACK_DAYS = 60
TASKS_FOLLOW_EVERY = 6 * 3600
# and refreshes the counts (cited, downloads) over its look-back every TASKS_REFRESH_COUNTS_EVERY
# seconds (0: never; a type whose rows carry counts)
TASKS_REFRESH_COUNTS_EVERY = 0
# issue 46 (cnkispider/config/looktiers.py): a look counts a day again by its age: the last 7 days at
# every look, the month weekly, the rest of the window monthly ("off": every day at every look)
TASKS_LOOK_TIERS = "7d:every, 30d:7d, 60d:30d"
# issue 46.2 (docs/FOLLOW.md): a look recounts the parts of a day split by its categories with one
# group/result request, and walks only the parts whose count changed (False: each part's page 1)
TASKS_FACET_COUNTS = True
# the config file this worker read ("": defaults only), for the counts refresh it starts
CNKI_CONFIG_FILE = ""
# `cnkispider run --until-idle`: a follow task's run ends once nothing is due (not a config key)
TASKS_UNTIL_IDLE = False
TASKS_ROUND_LEASE = 300  # seconds a claimed round stays with a silent worker
# times a round whose ledger does not balance is crawled before it stays failed
# (cnkispider/store/ledger.py)
TASKS_ROUND_ATTEMPTS = 3
TASKS_HEARTBEAT = 15  # seconds between a worker's heartbeats (renewing its rounds' leases)
TASKS_ROUNDS_IN_FLIGHT = 4
TASKS_RECRAWL = True
TASKS_EXIT_WHEN_IDLE = True
# when CNKI keeps saying no: this many refusals in a row, or most of the last window, halt
TASKS_HALT_AFTER = 10
TASKS_HALT_WINDOW = 50
TASKS_UNREACHABLE_AFTER = 3
# a worker whose every list request failed for a local cause (DNS, refused, timeout) before
# CNKI answered one stops itself and claims nothing more; the task is not halted for the
# others (off: such a worker halts the task, as before issue 47)
TASKS_LOCAL_FAULT_STOPS = True
ERRORS_ENABLED = True
ERRORS_MAX_ATTEMPTS = 3
# the markup drift alarm (cnkispider/watch/drift.py): a field filled on most documents before and
# empty on this many in a row halts the task; 0 turns it off
CNKI_DRIFT_DOCUMENTS = 100
# `cnkispider refresh-counts` (cnkispider/watch/refresh.py): list pages only, their rows' counts stored
CNKI_COUNTS_ONLY = False
# [crawl] references (cnkispider/spiders/references.py): a paper's reference list after its
# detail page, one request per 10 entries (off: the list costs nothing)
CNKI_REFERENCES = False

# -- PROGRESS_*: cnkispider/status/progress.py ---------------------------------------------------------

PROGRESS_ENABLED = True
PROGRESS_INTERVAL = 60.0  # seconds between progress lines


def starting_with(*prefixes: str) -> dict:
    """The defaults of the settings named ``PREFIX...``: for a crawl that uses some components
    of the crawler without the add-on (the scheduler's test site and benchmarks), which would
    change Scrapy's own settings too."""
    return {
        name: value
        for name, value in globals().items()
        if name.isupper() and name.startswith(prefixes)
    }

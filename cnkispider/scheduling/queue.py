"""The leased request queue of one task namespace: Redis structures and the one script that moves them.

Why: a request popped from a shared queue must not be lost with the worker that popped it, nor
run twice by two workers, and exactly one worker must learn that a round is finished. So a pop
is a lease, not a delete, and every move is one atomic step of :data:`SYNC_LUA` (its own module,
syncscript.py). The keys under ``{ns}`` (``SCHEDULER_NAMESPACE``): ``queue``, ``requests``,
``leases``, ``attempts``, ``tokens``, ``seq``, ``writers``, ``round:{r}:outstanding``,
``round:{r}:bloom[:i]``, ``bloom``, ``drained``, ``seedings``, ``epoch``, ``unreadable``,
``unreadable:order`` (the table: docs/INTERNALS.md). A request's id is its score (``-priority * 2**33 + seq``): priority first,
first-in first-out within one. One server (or a primary with replicas): the script builds key names, not Cluster.

Life of a request (the invariants; every move is one atomic step of :data:`SYNC_LUA`)::

    enqueue ──> queued ──pop──> leased ──ack──> gone (its outcome is written)
                  ^               │ │
                  └──lease ran out┘ └──lease ran out with attempts >= max──> abandoned
                  └────release────┘                 (handed to one worker, acked after
                                                     request_abandoned has been handled)

- *enqueue* drops a fingerprint its round's Bloom filter has seen, in the same step; a new
  request is queued and its round's count goes up, once. One made from a lease names that
  hand-out, and is refused unless the hand-out is still current (a late holder's children).
- *pop* leases up to N ids until ``now + lease``, each hand-out (abandoned ones too) with a
  random token: only that hand-out may renew, release or acknowledge it.
- *epoch*: lease writes of another epoch are stale; an older snapshot gets a new epoch.
- *ack* deletes the request; the ack that brings the round's count to 0 reports the round
  drained to that one worker (``{ns}:drained`` until confirmed); children are written first.
- *lease ran out*: back to the queue, or *abandoned* after ``SCHEDULER_MAX_ATTEMPTS``.

The rest of this module's story: docs/INTERNALS.md#cnkispiderschedulingqueuepy.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cnkispider import default_settings
from cnkispider.exceptions import RedisUnavailable
from cnkispider.scheduling import defaults
from cnkispider.scheduling.syncscript import SYNC_LUA
from cnkispider.words.i18n import _

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Enqueue:
    """A new request: ``fingerprint`` is ``None`` to skip the dupefilter (``dont_filter``);
    ``parent`` is the lease it was made from (None: a seed, made from no leased request), and
    the request is refused unless that hand-out is still current."""

    data: bytes
    priority: int = 0
    fingerprint: bytes | None = None
    round_id: str | None = None
    parent: Held | None = None
    seeding: str | None = None  # a round's seed: the seeding it starts (``{ns}:seedings``)


@dataclass(frozen=True)
class Held:
    """A lease as its holder knows it: the request id and the token of the hand-out (of the
    queue's epoch: :attr:`LeasedQueue.epoch`)."""

    lease_id: str
    token: str


@dataclass(frozen=True)
class Burial:
    """A popped request no worker may run: moved to ``{ns}:unreadable`` with the reason."""

    held: Held
    reason: str


def server_version(client: redis.Redis) -> str:
    """The server's version from HELLO (Redis 6+), which a worker's ACL user may run; INFO is
    @dangerous and refused to it. Redis 5 has no HELLO (and no ACL): INFO then."""
    import redis as redis_module

    try:
        reply = client.execute_command("HELLO")
    except redis_module.ResponseError:
        return str(client.info("server").get("redis_version", "0"))
    if isinstance(reply, dict):
        fields = reply
    else:  # RESP2: a flat list of name, value pairs
        fields = dict(zip(reply[::2], reply[1::2], strict=False))
    version = fields.get(b"version", fields.get("version", b"0"))
    return version.decode() if isinstance(version, bytes) else str(version)


@dataclass
class SyncBatch:
    """Everything one call writes (in this order) and how many requests it pops."""

    enqueues: list[Enqueue] = field(default_factory=list)
    acks: list[Held] = field(default_factory=list)
    burials: list[Burial] = field(default_factory=list)
    renewals: list[Held] = field(default_factory=list)
    releases: list[Held] = field(default_factory=list)
    confirms: list[str] = field(default_factory=list)
    rechecks: list[str] = field(default_factory=list)
    pop: int = 0

    #: The write lists, in the order the script applies them.
    WRITES = ("enqueues", "acks", "burials", "renewals", "releases", "confirms", "rechecks")

    def ops(self) -> int:
        return sum(len(getattr(self, name)) for name in self.WRITES)


@dataclass(frozen=True)
class Popped:
    lease_id: str
    attempts: int
    token: str  # of this hand-out
    round_id: str | None
    data: bytes

    @property
    def held(self) -> Held:
        return Held(self.lease_id, self.token)


@dataclass
class SyncResult:
    epoch: str
    queued: int
    leased: int
    enqueued: int
    duplicates: int
    acked: int
    stale: int  # acks and burials that no longer held their lease
    popped: list[Popped]
    abandoned: list[Popped]
    drained: list[str]
    refused: int = 0  # new requests made from a hand-out no longer current
    seq: int = 0  # the namespace's sequence after the call
    #: drained round id -> the seeding it drained under ('' where none was recorded)
    seedings: dict[str, str] = field(default_factory=dict)


class LeasedQueue:
    """Blocking access to one namespace's queue; the scheduler runs it off the reactor thread."""

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        *,
        lease_seconds: float = default_settings.SCHEDULER_LEASE_SECONDS,
        max_attempts: int = default_settings.SCHEDULER_MAX_ATTEMPTS,
        bloom_args: list | None = None,
        round_capacity: int = default_settings.DUPEFILTER_ROUND_CAPACITY,
        drained_confirm_seconds: float = defaults.DRAINED_CONFIRM_SECONDS,
        max_expired: int = defaults.MAX_EXPIRED_PER_SYNC,
        unreadable_kept: int = default_settings.REDIS_UNREADABLE_KEPT,
    ):
        self.client = client
        self.namespace = namespace
        self.lease_ms = max(1, round(lease_seconds * 1000))
        self.max_attempts = max_attempts
        self.bloom_args = bloom_args or [
            default_settings.DUPEFILTER_CAPACITY,
            repr(default_settings.DUPEFILTER_ERROR_RATE),
            default_settings.DUPEFILTER_GROWTH,
            defaults.DUPEFILTER_TIGHTENING,
        ]
        self.round_capacity = round_capacity
        self.confirm_ms = round(drained_confirm_seconds * 1000)
        self.max_expired = max_expired
        self.unreadable_kept = unreadable_kept
        # This worker's view of the namespace, sent with every call: the epoch its leases belong
        # to (None before the first answer) and the highest sequence number it has seen.
        self.epoch: str | None = None
        self.seq_seen = 0
        # ... and who it is in {ns}:writers, with the mark of its last call there (the server
        # time, never going back)
        self.writer = secrets.token_hex(6)
        self.last_call_ms = 0
        self._sync = client.register_script(SYNC_LUA)

    def key(self, name: str) -> str:
        return f"{self.namespace}:{name}"

    def round_key(self, round_id: str | int) -> str:
        return f"{self.namespace}:round:{round_id}:outstanding"

    def open(self) -> str:
        """Check the server can run the script and return the namespace's epoch (created if new)."""
        version = server_version(self.client)
        if tuple(int(x) for x in str(version).split(".")[:2]) < (5, 0):
            raise RedisUnavailable(
                _("Redis %(version)s is too old: the scheduler needs 5.0 or newer")
                % {"version": version}
            )
        self.client.set(self.key("epoch"), secrets.token_hex(8), nx=True)
        self.epoch = self.client.get(self.key("epoch")).decode()
        return self.epoch

    def sync(self, batch: SyncBatch, *, now_ms: int | None = None) -> SyncResult:
        """Apply ``batch`` and pop, in one atomic script call (one round trip)."""
        args: list = [
            now_ms or 0,
            self.lease_ms,
            self.max_attempts,
            batch.pop,
            self.max_expired,
            self.confirm_ms,
            secrets.token_hex(8),
            *self.bloom_args,
            len(batch.enqueues),
            len(batch.acks),
            len(batch.burials),
            len(batch.renewals),
            len(batch.releases),
            len(batch.confirms),
            self.round_capacity,
            len(batch.rechecks),
            self.epoch or "",
            self.seq_seen,
            self.unreadable_kept,
            self.writer,
            self.last_call_ms,
        ]
        for e in batch.enqueues:
            parent = e.parent or Held("", "")
            args += [
                e.priority,
                e.fingerprint or b"",
                e.round_id or "",
                parent.lease_id,
                parent.token,
                e.data,
                e.seeding or "",
            ]
        for held in batch.acks:
            args += [held.lease_id, held.token]
        for burial in batch.burials:
            args += [burial.held.lease_id, burial.held.token, burial.reason]
        for held in (*batch.renewals, *batch.releases):
            args += [held.lease_id, held.token]
        args += batch.confirms
        args += batch.rechecks
        raw = self._sync(keys=[self.namespace], args=args)
        epoch, queued, leased, enqueued, dups, acked, stale, popped, abandoned, drained = raw[:10]
        refused, seq = raw[10], int(raw[11])
        self.epoch = epoch.decode()
        self.seq_seen = max(self.seq_seen, seq)
        self.last_call_ms = int(raw[12])
        drained_ids = [r.decode() for r in drained]
        seedings = [s.decode() for s in raw[13]] if len(raw) > 13 else []
        return SyncResult(
            epoch=self.epoch,
            queued=queued,
            leased=leased,
            enqueued=enqueued,
            duplicates=dups,
            acked=acked,
            stale=stale,
            popped=_popped(popped),
            abandoned=_popped(abandoned),
            drained=drained_ids,
            refused=refused,
            seq=seq,
            seedings=dict(zip(drained_ids, seedings, strict=False)),
        )

    def remove(self) -> int:
        """Delete the namespace's keys (its task finished): :func:`remove_namespace`."""
        return remove_namespace(self.client, self.namespace)

    # --- reads for flow control, tools and tests --------------------------------------------

    def outstanding(self, round_id: str | int) -> int:
        """The round's count of queued and leased requests (0: none, or the round is unknown)."""
        value = self.client.get(self.round_key(round_id))
        return 0 if value is None else int(value)

    def rounds_at_zero(self) -> list[str]:
        """Rounds that drained and whose drain flow control has not confirmed yet."""
        return sorted(r.decode() for r in self.client.zrange(self.key("drained"), 0, -1))

    def sizes(self) -> dict[str, int]:
        """Requests queued and leased, read at one moment (MULTI): a request moving between
        the two (a pop, a release, a lease run out) is counted in one, never in neither."""
        return dict(zip(("queued", "leased"), self._cards("queue", "leases"), strict=True))

    def work_left(self) -> dict[str, int]:
        """:meth:`sizes` and the rounds drained whose drain flow control has not confirmed
        (the round is closed in the database, then confirmed): the task's work left in Redis.
        The ack that drains a round adds it in the same script, so a round's end is never in
        neither."""
        names = ("queued", "leased", "drained")
        return dict(zip(names, self._cards("queue", "leases", "drained"), strict=True))

    def _cards(self, *keys: str) -> list[int]:
        pipe = self.client.pipeline(transaction=True)
        for key in keys:
            pipe.zcard(self.key(key))
        return pipe.execute()


def _popped(flat: list) -> list[Popped]:
    out = []
    for j in range(0, len(flat), 4):
        lease_id, attempts, token = flat[j].decode(), int(flat[j + 1]), flat[j + 2].decode()
        round_id, _, data = flat[j + 3].partition(b"\n")
        out.append(Popped(lease_id, attempts, token, round_id.decode() or None, data))
    return out


#: The namespace's keys that are not a round's: deleted by name when a task is done, so that a
#: worker whose Redis user may not SCAN (least rights: docs/WORKERS.md) still removes them.
TASK_KEYS = (
    "queue",
    "requests",
    "leases",
    "attempts",
    "tokens",
    "bloom",
    "drained",
    "unreadable",
    "unreadable:order",
    "seedings",
)


def remove_namespace(client: redis.Redis, namespace: str) -> int:
    """Delete the keys of a finished task's namespace (its queue, requests, filters, drains,
    unreadable requests, ...) but ``epoch``, ``seq`` and ``writers``: the number deleted. These
    three small keys (the last trimmed to the workers of the last hour) keep the namespace's
    identity, so a worker still polling sees no new epoch (no false "Redis lost its state")
    and a later crawl of the task goes on with new ids. The task's own keys go by name
    (:data:`TASK_KEYS`); a round's keys go when it drains, and any a round left behind are
    found with SCAN, not KEYS (which blocks the server), where the Redis user may run it: a
    worker's user may not (its ACL refuses SCAN), and then they stay for the administrator's
    sweep rather than stopping the worker. UNLINK frees the memory off the server's main
    thread."""
    from redis.exceptions import NoPermissionError

    keep = {f"{namespace}:{name}".encode() for name in ("epoch", "seq", "writers")}
    removed = client.unlink(*(f"{namespace}:{name}" for name in TASK_KEYS))
    batch: list = []
    try:
        for key in client.scan_iter(match=_glob_escape(namespace) + ":*", count=500):
            if key in keep:
                continue
            batch.append(key)
            if len(batch) >= 500:
                removed += client.unlink(*batch)
                batch = []
    except NoPermissionError:
        logger.info(
            "%s: this Redis user may not SCAN; the task's keys are gone, any a round left "
            "behind stay",
            namespace,
        )
    if batch:
        removed += client.unlink(*batch)
    return removed


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)

"""The worker's side of the verified-session pool: which sessions it uses, and waiting for a person.

:class:`VerifiedSessions` is a Scrapy extension, the one owner of this worker's view of the pool;
the session middleware and the retry middleware ask it through ``VerifiedSessions.of(crawler)``
(None: the extension is off, every session is plain); the task feeder hears whether it waits
(signal ``person_waiting``).

Modes (``[cnki] sessions``, setting ``SESSIONS_MODE``):

- ``plain``: today's sessions, warmed up by the crawler (CNKI before its person check);
- ``verified``: only sessions a person passed, from the shared pool;
- ``auto``: plain until CNKI checks one (a challenge on a plain session), then verified, for
  every worker of the task (the switch is a Redis key, :meth:`SessionStore.set_checked`).

Waiting for a person is a state, not a failure: the request is held (no retry spent, nothing
recorded), the feeder claims no round, the state is published for ``status``, ``[notify]`` gets
one message, and a session added ends the wait by itself; ``[cnki] on_check`` says what else
happens (``wait``, ``fail``, ``prompt``).

Settings: ``SESSIONS_MODE``, ``SESSIONS_ON_CHECK``, ``SESSIONS_AUTO_AFTER``, ``SESSIONS_NAMESPACE``, ``SESSIONS_TTL``,
``SESSIONS_LEASE``, ``SESSIONS_POLL``, ``SESSIONS_PACE_MAX`` (the rate limiter's cap on a verified
session's learned pace), ``REDIS_URL``, ``CNKI_DATA_DIR``, ``SCHEDULER_NAMESPACE`` (the task's
scope for round leases and the auto switch).

Stats (``sessions/...``): ``leased``, ``needs_person``, ``waiting_seconds``, ``relisted``.

The rest of this module's story: docs/INTERNALS.md#cnkispidersessionsruntimepy.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import sleep as loop_sleep
from scrapy.utils.defer import deferred_from_coro

from cnkispider import signals as cnki_signals
from cnkispider.runtime import engineslot
from cnkispider.runtime.context import context_of
from cnkispider.runtime.offload import in_thread
from cnkispider.sessions import tickets
from cnkispider.sessions.pool import WAITING_MESSAGE, SessionStore
from cnkispider.words.i18n import _

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

MODES = ("auto", "verified", "plain")
ON_CHECK = ("wait", "prompt", "fail")
#: finish reason of a worker that stopped because CNKI wants a person and on_check is fail
NEEDS_PERSON = "needs_person"
LOGIN_COMMAND = "cnkispider session login"
ADD_COMMAND = "cnkispider session add --from-curl FILE"


class VerifiedSessions:
    """This worker's handle on the shared pool; see the module docstring."""

    def __init__(
        self,
        crawler: Crawler,
        store: SessionStore | Callable[[], SessionStore],
        *,
        mode: str = "auto",
        on_check: str = "wait",
        scope: str = "cnki",
        poll: float = 5.0,
        auto_after: int = 3,
    ):
        if mode not in MODES:
            raise ValueError(f"SESSIONS_MODE must be one of {', '.join(MODES)}, got {mode!r}")
        if on_check not in ON_CHECK:
            raise ValueError(
                f"SESSIONS_ON_CHECK must be one of {', '.join(ON_CHECK)}, got {on_check!r}"
            )
        self.crawler = crawler
        self._store = store  # or a factory: the Redis client is made on first use
        self.mode = mode
        self.on_check = on_check
        self.scope = scope
        self.poll = float(poll)
        self.auto_after = max(1, int(auto_after))
        self._plain_checked_in_a_row = 0
        self._own_worker = f"w-{uuid.uuid4().hex[:8]}"
        self._checked = mode == "verified"  # auto: learnt from Redis (another worker may know)
        self._checked_looked_at = 0.0
        self.waiting_since: float | None = None
        self._prompting = False
        self._stopping = False
        self._dead: set[str] = set()  # verified sessions this worker saw checked again

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> VerifiedSessions:
        s = crawler.settings
        mode = s.get("SESSIONS_MODE")
        if mode == "plain":
            raise NotConfigured
        ext = cls(
            crawler,
            lambda: SessionStore.from_settings(s),
            mode=mode,
            on_check=s.get("SESSIONS_ON_CHECK"),
            scope=s.get("SCHEDULER_NAMESPACE") or "cnki",
            poll=s.getfloat("SESSIONS_POLL"),
            auto_after=s.getint("SESSIONS_AUTO_AFTER"),
        )
        crawler.signals.connect(ext.round_drained, signal=cnki_signals.round_drained)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    @classmethod
    def of(cls, crawler: Crawler | None) -> VerifiedSessions | None:
        if crawler is None or getattr(crawler, "extensions", None) is None:
            return None
        return crawler.get_extension(cls)

    @property
    def store(self) -> SessionStore:
        if not isinstance(self._store, SessionStore):
            self._store = self._store()
        return self._store

    # -- who and where ------------------------------------------------------------------------

    # Both from the crawl context once flow control opened the task (the only time a request,
    # so a wait, happens under flow control); this worker's own before that and without it.

    @property
    def worker(self) -> str:
        context = context_of(self.crawler)
        return (context.worker_id if context is not None else None) or self._own_worker

    @property
    def task_name(self) -> str:
        name = self.crawler.settings.get("TASKS_NAME") or ""
        context = context_of(self.crawler)
        return (context.task.name if context is not None else None) or name

    def round_key(self, round_id) -> str:
        """The lease name of a round of this task (a request without one: this worker's own)."""
        return f"{self.scope}:{round_id}" if round_id is not None else f"{self.scope}:{self.worker}"

    def _inc_stat(self, key: str, count: float = 1) -> None:
        self.crawler.stats.inc_value(f"sessions/{key}", count)

    # -- the mode -----------------------------------------------------------------------------

    def verified(self) -> bool:
        """Whether requests use verified sessions now (auto: once CNKI checked a plain one)."""
        if self._checked:
            return True
        now = time.monotonic()
        if now - self._checked_looked_at >= self.poll:  # another worker may have switched
            self._checked_looked_at = now
            d = deferred_from_coro(in_thread(lambda: self.store.checked(self.scope)))
            d.addCallback(self._learnt_checked)
            d.addErrback(lambda f: logger.debug("cannot read the session mode: %s", f.value))
        return self._checked

    def _learnt_checked(self, checked: bool) -> None:
        self._checked = self._checked or bool(checked)

    def plain_warmup_checked(self, reason: str) -> bool:
        """CNKI sent a plain session's warm-up page to its check. ``auto_after`` of them in a row
        (no clean warm-up between: a pace that was too fast clears) is CNKI checking for a
        person: every worker moves to verified sessions. True once moved."""
        self._plain_checked_in_a_row += 1
        if self._plain_checked_in_a_row >= self.auto_after:
            self.plain_checked(reason)
        return self._checked

    def plain_warmup_clean(self) -> None:
        self._plain_checked_in_a_row = 0

    def plain_checked(self, reason: str) -> None:
        """CNKI checked a plain session (auto mode): every worker moves to verified sessions."""
        if self._checked:
            return
        self._checked = True
        logger.warning(
            "CNKI checks for a person (%s on %d fresh plain sessions): using the sessions a "
            "person passed from now on (%s)",
            reason,
            self._plain_checked_in_a_row,
            LOGIN_COMMAND,
        )
        d = deferred_from_coro(in_thread(self.store.set_checked, self.scope))
        d.addErrback(lambda f: logger.debug("cannot share the session mode: %s", f.value))

    # -- waiting for a person -------------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        return self.waiting_since is not None

    async def wait_for_person(self) -> None:
        """No usable session: wait one poll (the first caller announces it; see the docstring)."""
        if self.waiting_since is None:
            self._set_waiting(time.monotonic())
            self._inc_stat("waits")
            logger.warning(
                "waiting: %s (or `%s` of a browser's request). The crawl goes on by itself "
                "once a session is added.",
                WAITING_MESSAGE,
                ADD_COMMAND,
            )
            self._notify(
                "waiting",
                _("task %(name)s: waiting: %(what)s")
                % {"name": self.task_name, "what": _(WAITING_MESSAGE)},
                desk_ticket=await in_thread(self._desk_ticket),
            )
            if self.on_check == "fail":
                self._stop()
            elif self.on_check == "prompt" and _console():
                deferred_from_coro(self._prompt())
        await self._publish()
        started = time.monotonic()
        await loop_sleep(self.poll)
        self._inc_stat("waiting_seconds", round(time.monotonic() - started, 3))

    def _set_waiting(self, since: float | None) -> None:
        """Start (a monotonic time) or end (None) the wait, and say so (signal ``person_waiting``:
        the task feeder claims no new round meanwhile)."""
        self.waiting_since = since
        self.crawler.signals.send_catch_log(
            cnki_signals.person_waiting,
            waiting=since is not None,
            spider=getattr(self.crawler, "spider", None),
        )

    @property
    def stopping(self) -> bool:
        """The worker is stopping (on_check = fail, a halt, Ctrl-C): waiting requests give up."""
        if self._stopping or not getattr(self.crawler, "crawling", True):
            return True
        return engineslot.closing(self.crawler)

    async def sleep(self, seconds: float) -> None:
        """Wait on the event loop (a round whose session is busy or cooling)."""
        await loop_sleep(max(0.05, seconds))

    def resumed(self) -> None:
        """A session was leased: the wait (if any) is over."""
        if self.waiting_since is None:
            return
        logger.warning(
            "a verified session is there: the crawl goes on (waited %.0f s)",
            time.monotonic() - self.waiting_since,
        )
        self._set_waiting(None)
        d = deferred_from_coro(in_thread(self.store.clear_waiting, self.worker))
        d.addErrback(lambda f: logger.debug("cannot clear the waiting state: %s", f.value))

    async def _publish(self) -> None:
        try:
            await in_thread(
                self.store.set_waiting,
                self.worker,
                self.task_name,
                for_seconds=max(3 * self.poll, 30.0),
            )
        except Exception as exc:
            logger.debug("cannot publish the waiting state: %s", exc)

    def _stop(self) -> None:
        logger.error(
            "[cnki] on_check = fail: this worker stops (exit status 3); run `%s`, then start it again",
            LOGIN_COMMAND,
        )
        self._stopping = True
        engine = self.crawler.engine
        d = deferred_from_coro(engine.close_spider_async(reason=NEEDS_PERSON))
        d.addErrback(lambda f: logger.debug("closing: %s", f.getErrorMessage()))

    async def _prompt(self) -> None:
        """Ask at the keyboard, then run ``session login`` (waysin's ``cnkispider.sessions.login``)."""
        if self._prompting:
            return
        self._prompting = True
        try:
            await in_thread(self._prompt_blocking)
        except Exception as exc:
            logger.warning("the login did not add a session (%s); run `%s`", exc, LOGIN_COMMAND)
        finally:
            self._prompting = False

    def _prompt_blocking(self) -> None:
        print(
            "\n"
            + _(
                "CNKI wants a person to pass its check. Press Enter to open a browser on CNKI "
                "(or run %(command)s elsewhere; the crawl waits)."
            )
            % {"command": f"`{LOGIN_COMMAND}`"},
            file=sys.stderr,
            flush=True,
        )
        sys.stdin.readline()
        try:
            from cnkispider.sessions import login as login_module  # waysin's, when present
        except ImportError:
            print(_("run: %(command)s") % {"command": LOGIN_COMMAND}, file=sys.stderr, flush=True)
            return
        login = getattr(login_module, "login", None)
        if login is None:
            print(_("run: %(command)s") % {"command": LOGIN_COMMAND}, file=sys.stderr, flush=True)
            return
        from urllib.parse import urlsplit

        from cnkispider.cnki.protocol import protocol_from_settings

        home_url = protocol_from_settings(self.crawler.settings).home_url
        host = urlsplit(home_url).hostname or ""
        paste = login(home_url, (host, "cnki.net"), say=lambda line: print(line, file=sys.stderr))
        session = self.store.add(paste.cookies, source="browser", user_agent=paste.user_agent)
        print(
            _("session %(id)s added; the crawl goes on") % {"id": session.id},
            file=sys.stderr,
            flush=True,
        )

    # -- notifications ------------------------------------------------------------------------

    def _notify(self, event: str, text: str, desk_ticket: str | None = None) -> None:
        from cnkispider.watch.notify import Notifier

        notifier = self.crawler.get_extension(Notifier)
        if notifier is not None:
            notifier.send(event, text, desk_ticket=desk_ticket)

    def _desk_ticket(self) -> str | None:
        """A ticket for the waiting message's desk link (sessions/tickets.py), when a message
        with a link goes out; None if Redis is away (the link then asks for the token).
        Blocking: run in a thread."""
        from cnkispider.watch.notify import Notifier

        notifier = self.crawler.get_extension(Notifier)
        if notifier is None or not notifier.public_url:
            return None
        try:
            return tickets.issue(self.store)
        except Exception as exc:
            logger.warning("no desk ticket for the waiting message: %s", exc)
            return None

    # -- sessions this worker saw die ---------------------------------------------------------

    def died(self, session_id: str | None) -> None:
        """This worker learnt that CNKI checked ``session_id`` again (the pool says so too)."""
        if session_id:
            self._dead.add(session_id)

    def is_dead(self, session_id: str | None) -> bool:
        return bool(session_id) and session_id in self._dead

    # -- listing a page again -------------------------------------------------------------------
    # A session CNKI checked again leaves every detail link it listed dead (links are bound to
    # their session). Listing the page again for each dead link would cost a list request per
    # document, and a pass's worth of them could die again before they are fetched: a page is
    # listed again once for all its dead links (a Redis set of doc keys per page, and a marker
    # that says a re-listing is under way).

    def _relist_keys(self, round_id, page_key: str) -> tuple[str, str]:
        import hashlib

        digest = hashlib.sha1(page_key.encode()).hexdigest()[:16]
        base = f"{self.store.namespace}:relist:{self.round_key(round_id)}:{digest}"
        return f"{base}:docs", f"{base}:under-way"

    def relist_add(self, round_id, page_key: str, doc_key: str) -> bool:
        """Note a dead link of page ``page_key``; True when the page must be listed again (no
        re-listing of it is under way). Blocking."""
        docs, marker = self._relist_keys(round_id, page_key)
        pipe = self.store.client.pipeline()
        pipe.sadd(docs, doc_key)
        pipe.expire(docs, 3600)
        pipe.set(marker, "1", nx=True, ex=3600)
        return bool(pipe.execute()[2])

    def relist_take(self, round_id, page_key: str) -> set[str]:
        """The dead links of page ``page_key`` (doc keys), for the re-listing that runs now;
        links that die after this start another. Blocking."""
        docs, marker = self._relist_keys(round_id, page_key)
        pipe = self.store.client.pipeline()  # MULTI: nothing slips between read and delete
        pipe.smembers(docs)
        pipe.delete(docs, marker)
        members = pipe.execute()[0]
        return {m.decode() if isinstance(m, bytes) else m for m in members}

    # -- rounds -------------------------------------------------------------------------------

    def round_drained(self, round_id, spider=None, epoch=None):
        """The round is over on this worker: its session serves the next round."""
        key = self.round_key(round_id)

        def release():
            session_id = self.store.session_of(key)
            if session_id:
                self.store.release(session_id, key)

        d = deferred_from_coro(in_thread(release))
        d.addErrback(lambda f: logger.debug("cannot release the session of round %s", round_id))

    def spider_closed(self, spider, reason):
        if self.waiting_since is not None:
            try:
                self.store.clear_waiting(self.worker)
            except Exception:
                pass


def _console() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False

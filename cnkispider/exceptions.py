"""One exception hierarchy for the whole crawler.

Everything the crawler raises on purpose derives from :class:`CnkiSpiderError`, so the command
line can print one clear message (never a traceback) for any of them and exit non-zero.
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest


class CnkiSpiderError(Exception):
    """Base of every error the crawler raises on purpose."""


class InputError(CnkiSpiderError, ValueError):
    """What a user typed cannot be used: a bad date, option, rule, paste or category spec.

    Also a ValueError, so that code which took bad input as ValueError before (the web page's
    forms, ``scrapy crawl``'s arguments) still does; the command line prints it as one line.
    """


class UnknownName(CnkiSpiderError, LookupError):
    """A name the user gave (a task, a session) names nothing. Also a LookupError, as above."""


class ConfigError(CnkiSpiderError):
    """A configuration value is missing or malformed.

    The message names the file, the section, the key and what was expected.
    """

    def __init__(self, path, section: str, key: str | None, problem: str):
        # the path as the operator typed it, whatever it came as (a Path's repr is PosixPath(...))
        path = str(path)
        self.path, self.section, self.key, self.problem = path, section, key, problem
        where = f"[{section}] {key}" if key else f"[{section}]"
        super().__init__(f"{path}: {where}: {problem}")


class StorageError(CnkiSpiderError):
    """The database cannot be reached or used. The message holds the URL with its password masked."""


class RedisUnavailable(CnkiSpiderError):
    """Redis cannot be reached, or is configured in a way that could lose the crawl's state."""


class SchedulerClosed(CnkiSpiderError):
    """The scheduler closed (the worker is stopping) before what was written to it was known to
    be in Redis: flow control must not mark a round seeded whose first request may be nowhere."""


class TaskRowError(CnkiSpiderError):
    """A task row holds values the crawler cannot use (edited by hand into nonsense)."""

    def __init__(self, task_id: int, problem: str):
        self.task_id, self.problem = task_id, problem
        super().__init__(f"task {task_id}: {problem}")


class RefusedPage(CnkiSpiderError):
    """CNKI answered, but with one of its ways of saying no (verify page, captcha, blank body,
    JavaScript page, a list without its pager, ...). Always retryable; never "zero results".

    ``reason`` is a short slug used in stats keys and the error tables (``verify``, ``captcha``,
    ``blank``, ``javascript``, ``no-data-retry``, ``no-pager``, ``unexpected``).
    """

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class HaltedRequest(IgnoreRequest):
    """A request dropped because its task halted while it waited for a retry.

    Its lease is held (never acknowledged), so after ``cnkispider task resume`` the lease runs
    out and the request is crawled again; the errback records nothing for it.
    """

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"task halted: {reason}")


class GaveUp(IgnoreRequest):
    """A request failed on every attempt the retry policy allows.

    Raised by the retry middleware so that the request's errback records it in errorCode (list
    stage) or errorLink (detail stage) with ``reason`` and ``attempts``. ``detail`` carries what
    the answer said, when it matters: CNKI's own words for a rejection (reason ``rejected``,
    given up on the first attempt: no retry cures a query CNKI refuses).
    """

    def __init__(self, reason: str, attempts: int, detail: str = ""):
        self.reason, self.attempts, self.detail = reason, attempts, detail
        words = f" ({detail})" if detail else ""
        super().__init__(f"gave up after {attempts} attempts: {reason}{words}")


class SessionLost(IgnoreRequest):
    """A detail request whose verified session can no longer serve it: CNKI checked that
    session again (or its link went stale in it), and a ``v=`` link opens only in the session
    that listed it. Not a failure of the document: the spider lists its page again in the
    round's session now (``RoundSpider.on_error``), and nothing is recorded."""

    reason = "session-lost"

    def __init__(self, session_id: str, why: str):
        self.session_id, self.why = session_id, why
        super().__init__(f"session {session_id}: {why}")

"""When CNKI keeps saying no: the circuit breaker, the shared challenge cool-down, the halt.

Three kinds of no (:func:`cnkispider.cnki.refusals.kind_of`) get three answers:

- a **rejection** (CNKI refused the query itself) is never retried: the task halts at once with
  CNKI's words (the retry middleware gives up, ``errors.middleware`` records the errorCode row and
  asks :meth:`tasks.feeder.RoundFeeder.halt` for it, signal ``halt_requested``);
- a **challenge** is retried with a fresh session and another proxy; when challenges persist
  across fresh sessions (:class:`ChallengeWatch`), every worker of the task pauses for a
  cool-down (:class:`Cooldown`, one Redis key with a TTL in the task's namespace; the leased
  scheduler, which owns that Redis client and namespace, builds it: ``LeasedScheduler.cooldown``);
- a **fault** is retried; when one fault repeats (:class:`Breaker`) the task halts.

A halt is ``task.halt_reason`` (+ ``halted_at``): no round is handed out or marked done while it
is set, and ``cnkispider task resume NAME`` clears it and re-opens what failed for it.

The cores here (:class:`Breaker`, :class:`ChallengeWatch`) are pure: no I/O, no clock. The
feeder and the retry middleware feed them events and act on their verdicts.
"""

from __future__ import annotations

from collections import Counter, deque

from cnkispider import default_settings
from cnkispider.cnki.refusals import CHALLENGE, REJECTION, kind_of
from cnkispider.words import vocabulary
from cnkispider.words.i18n import _

#: ``cnkispider run`` (and the .exe) exit with this status when the task is halted.
EXIT_HALTED = 3

#: Failures of the network itself (the exception's class name is the reason). They are never
#: permanent errorCode rows: the site was not asked, so nothing is known about the page.
NETWORK_REASONS = {
    # Scrapy >= 2.14 wraps the download errors in its own exceptions
    "CannotResolveHostError": "DNS",
    "DownloadConnectionRefusedError": "connection refused",
    "DownloadTimeoutError": "timeout",
    "DownloadFailedError": "connection failed",
    "ResponseDataLossError": "connection lost",
    # Twisted's own (older Scrapy, and what passes through unwrapped)
    "DNSLookupError": "DNS",
    "ConnectionRefusedError": "connection refused",
    "NoRouteError": "no route",
    "TCPTimedOutError": "timeout",
    "TimeoutError": "timeout",
    "ConnectError": "connection failed",
    "ConnectingCancelledError": "connection failed",
    "ConnectionLost": "connection lost",
    "ConnectionDone": "connection lost",
    "ResponseNeverReceived": "no response",
    "ResponseFailed": "no response",
    "PotentialDataLoss": "connection lost",
    "TunnelError": "proxy tunnel failed",
}
#: Of those, the ones that mean "the site cannot be reached from here" when nothing ever worked.
UNREACHABLE_REASONS = frozenset(
    {
        "CannotResolveHostError",
        "DownloadConnectionRefusedError",
        "DownloadTimeoutError",
        "DNSLookupError",
        "ConnectionRefusedError",
        "NoRouteError",
        "TCPTimedOutError",
        "TimeoutError",
        "ConnectError",
    }
)


#: The halt reason of a pause (``cnkispider task pause NAME``): an operator's halt. The task's
#: dates stay as they are; ``task resume NAME`` goes on from the cursor to the same end date.
PAUSED = "paused"
PAUSE_REASON = f"{PAUSED}: by the operator"


def is_paused(halt_reason: str | None) -> bool:
    return slug_of(halt_reason) == PAUSED


def is_network(reason: str | None) -> bool:
    return reason in NETWORK_REASONS


def slug_of(halt_reason: str | None) -> str | None:
    """The refusal slug a halt reason starts with (``rejected``, ``http-500``, ``DNSLookupError``)."""
    if not halt_reason:
        return None
    return halt_reason.split(":", 1)[0].strip()


def unreachable_line(reason: str, *, stored: bool = False) -> str:
    """The one line an operator reads when CNKI cannot be reached at all, in the reader's
    language; ``stored``: in English, as the halt reason keeps it (vocabulary.HALT_PATTERNS
    shows it in the reader's)."""
    what = NETWORK_REASONS.get(reason, reason)
    if stored:
        return f"CNKI is not reachable from here ({what}): try `cnkispider demo`"
    return _("CNKI is not reachable from here (%(what)s): try `cnkispider demo`") % {"what": what}


def halt_line(task_name: str, halt_reason: str) -> str:
    """The one line `cnkispider run` prints for a halted task: the reason and the fix."""
    slug = slug_of(halt_reason)
    if slug == PAUSED:
        return _("task %(name)s is paused; `cnkispider task resume %(name)s` goes on") % {
            "name": task_name
        }
    if slug in UNREACHABLE_REASONS and "not reachable" in halt_reason:
        return (
            unreachable_line(slug)
            + " "
            + _("(task %(name)s halted; when CNKI answers: `cnkispider task resume %(name)s`)")
            % {"name": task_name}
        )
    return _(
        "task %(name)s halted: %(reason)s; fix the cause, then `cnkispider task resume %(name)s`"
    ) % {"name": task_name, "reason": vocabulary.halt_reason(halt_reason)}


#: The finish reason of a worker that stopped itself for a fault of its own (its settings, its
#: network: :attr:`Breaker.local`): `cnkispider run` says so in one line and exits non-zero.
LOCAL_FAULT = "local_fault"
#: The exit status of such a worker (the task goes on with the others: not EXIT_HALTED).
EXIT_LOCAL_FAULT = 4


def local_fault_line(task_name: str, reason: str) -> str:
    """The one line of a worker that stopped itself: why (CNKI never answered it) and that the
    task goes on with the workers that reach CNKI."""
    return (
        unreachable_line(slug_of(reason) or "")
        + " "
        + _("(this worker stopped; task %(name)s is not halted: workers that reach CNKI go on)")
        % {"name": task_name}
    )


class Breaker:
    """The circuit breaker of one worker: a window of list-page outcomes, one verdict per event.

    Trips (returns the halt reason) when

    - a rejection is seen (at once);
    - the first ``unreachable_after`` list outcomes of this worker are all network failures of
      the unreachable kind (DNS, refused, timeout) and no list page ever came back: the site is
      not reachable from here;
    - the last ``consecutive`` outcomes failed for one and the same reason;
    - at least half of the last ``window`` outcomes (once there are that many) failed for one
      reason.

    Outcomes are keyed (by the caller's request) so that a page counted ok when it arrived and
    then found not understood by its parser turns into that failure instead of adding one.
    """

    def __init__(
        self,
        consecutive: int = default_settings.TASKS_HALT_AFTER,
        window: int = default_settings.TASKS_HALT_WINDOW,
        unreachable_after: int = default_settings.TASKS_UNREACHABLE_AFTER,
    ):
        self.consecutive = max(1, consecutive)
        self.window = max(self.consecutive, window)
        self.unreachable_after = max(1, unreachable_after)
        self.outcomes: deque[tuple[object, str | None]] = deque(maxlen=self.window)
        self.ever_ok = False
        self.tripped: str | None = None
        #: The verdict is this worker's own fault (every list request failed for a local cause
        #: before CNKI answered one): the worker stops itself; the task is not halted for others.
        self.local = False

    def ok(self, key: object = None) -> None:
        self.ever_ok = True
        self.outcomes.append((key, None))

    def only_local(self) -> str | None:
        """Every list outcome of this worker so far failed for a local cause (DNS, refused,
        timeout) and CNKI never answered one: the reason of the last, else None. Each such
        outcome already spent its retries, so one is enough for the feeder not to claim a
        round again (a round's attempts are shared by every worker of the task)."""
        reasons = [r for _, r in self.outcomes]
        if self.ever_ok or not reasons or not all(r in UNREACHABLE_REASONS for r in reasons):
            return None
        reason = reasons[-1]
        return f"{reason}: {unreachable_line(reason, stored=True)} (every list request of this worker failed)"

    def failed(self, reason: str, detail: str = "", key: object = None) -> str | None:
        """Record a failure; the halt reason if the breaker trips now (once), else None."""
        if key is not None:
            for i, (k, _) in enumerate(self.outcomes):
                if k == key:  # the page arrived (ok) but was not understood: that is the outcome
                    del self.outcomes[i]
                    break
        self.outcomes.append((key, reason))
        if self.tripped is not None:
            return None
        verdict = self._verdict(reason, detail)
        if verdict is not None:
            self.tripped = verdict
        return verdict

    def _verdict(self, reason: str, detail: str) -> str | None:
        if kind_of(reason) == REJECTION:
            return f"rejected: {detail}" if detail else "rejected"
        reasons = [r for _, r in self.outcomes]
        if (
            not self.ever_ok
            and reason in UNREACHABLE_REASONS
            and len(reasons) >= self.unreachable_after
            and all(r in UNREACHABLE_REASONS for r in reasons)
        ):
            line = unreachable_line(reason, stored=True)
            self.local = True
            return f"{reason}: {line} (every list request of the first rounds failed)"
        recent = reasons[-self.consecutive :]
        if len(recent) == self.consecutive and all(r == reason for r in recent):
            return f"{reason}: the last {self.consecutive} list pages all failed with {reason}"
        common = Counter(r for r in reasons if r is not None).most_common(1)
        if len(reasons) == self.window and common:
            top, count = common[0]
            if 2 * count >= self.window:
                return f"{top}: {count} of the last {self.window} list pages failed with {top}"
        return None


class ChallengeWatch:
    """Challenges that persist across fresh sessions: ``sessions`` challenged answers in a row,
    from that many distinct CNKI sessions, without one clean page in between.

    One session challenged ten times is that session's bad luck (it is retired anyway); several
    fresh sessions challenged one after another mean CNKI is wary of all of us: pause.
    """

    def __init__(self, sessions: int = default_settings.RETRY_CHALLENGE_SESSIONS):
        self.sessions = max(1, sessions)
        self.challenged: set[object] = set()

    def clean(self) -> None:
        self.challenged.clear()

    def seen(self, reason: str | None, session: object) -> bool:
        """Feed one refused answer; True when the task should pause now (the watch restarts)."""
        if kind_of(reason) != CHALLENGE:
            return False
        self.challenged.add(session)
        if len(self.challenged) >= self.sessions:
            self.challenged.clear()
            return True
        return False


class Cooldown:
    """The task's shared pause: the key ``{namespace}:cooldown`` with a TTL, in the task's Redis.

    Every worker of the task reads it: the feeder seeds no round and retries wait while it
    exists. Blocking calls: run them off the reactor.
    """

    def __init__(self, client, namespace: str):
        self.client = client
        self.key = f"{namespace}:cooldown"

    def start(self, seconds: float, why: str = "challenges") -> bool:
        """Start the pause unless one runs already; True for the one caller that started it."""
        if seconds <= 0:
            return False
        return bool(self.client.set(self.key, why, nx=True, px=max(1, int(seconds * 1000))))

    def remaining(self) -> float:
        """Seconds left of the pause, 0 when none runs."""
        left = self.client.pttl(self.key)
        return left / 1000.0 if left and left > 0 else 0.0

"""One message to a webhook when a task starts waiting for a person, halts, or finishes.

Nobody watches a server at night: ``[notify] webhook`` (``NOTIFY_WEBHOOKS``, several allowed)
gets one POST per event, in ``[notify] format`` (``NOTIFY_FORMAT``):

- ``json``: ``{"event": "waiting"|"halted"|"finished", "task": ..., "text": ..., "time": ...}``;
- ``dingtalk`` and ``wecom`` (the group robots' text message):
  ``{"msgtype": "text", "text": {"content": ...}}``;
- ``feishu``: ``{"msg_type": "text", "content": {"text": ...}}``.

Sending runs on a thread of its own with a short timeout (``NOTIFY_TIMEOUT``), never on the
reactor; a webhook that fails is logged once (its URL masked: robot URLs carry their token) and
never stops the crawl. Events: ``waiting`` (:mod:`cnkispider.sessions.runtime` calls
:meth:`Notifier.send`), ``halted`` (signal ``task_halted``), ``finished`` (the spider closed with
reason ``finished``), ``look:N`` (a follow task's look N is over: signal ``look_finished``,
"task X: 37 new documents, 2 days re-opened").

A ``waiting`` message carries the pass desk's link when ``[web] public_url`` (``WEB_PUBLIC_URL``)
is set: the person who gets it passes CNKI's check from the message, on a phone too
(cnkispider/sessions/desk.py).

Stats: ``notify/sent``, ``notify/failed``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from cnkispider import signals as cnki_signals
from cnkispider.config.masking import mask_text, mask_url
from cnkispider.words.i18n import _, ngettext
from cnkispider.words.vocabulary import halt_reason

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("cnkispider.notify")  # its name before the move: log lines keep it

FORMATS = ("json", "dingtalk", "wecom", "feishu")


def payload(fmt: str, event: str, task: str, text: str, now: float | None = None) -> dict:
    """The JSON body of one message in ``fmt``."""
    if fmt in ("dingtalk", "wecom"):
        return {"msgtype": "text", "text": {"content": f"cnkispider: {text}"}}
    if fmt == "feishu":
        return {"msg_type": "text", "content": {"text": f"cnkispider: {text}"}}
    if fmt == "json":
        return {"event": event, "task": task, "text": text, "time": now or time.time()}
    raise ValueError(f"unknown notify format {fmt!r}; one of {', '.join(FORMATS)}")


def post(url: str, body: dict, timeout: float) -> None:
    """POST ``body`` as JSON; raises on a network error or a status >= 400 (blocking)."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json; charset=utf-8"}
    )
    with urllib.request.urlopen(
        request, timeout=timeout
    ) as response:  # http(s) only: config/keys.py checks
        response.read(4096)


class Notifier:
    """Sends one message per event to every webhook; see the module docstring."""

    def __init__(
        self,
        webhooks: list[str],
        fmt: str = "json",
        timeout: float = 5.0,
        stats=None,
        task="",
        public_url: str = "",
    ):
        if fmt not in FORMATS:
            raise ValueError(f"NOTIFY_FORMAT must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.webhooks = list(webhooks)
        self.format = fmt
        self.timeout = timeout
        self.stats = stats
        self.task = task
        self.public_url = (public_url or "").rstrip("/")
        self._failed: set[str] = set()  # webhooks already logged as failing
        self._sent_events: set[str] = set()  # one message per event and task
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Notifier:
        s = crawler.settings
        webhooks = s.getlist("NOTIFY_WEBHOOKS")
        if not webhooks:
            raise NotConfigured
        notifier = cls(
            webhooks,
            s.get("NOTIFY_FORMAT"),
            s.getfloat("NOTIFY_TIMEOUT"),
            stats=crawler.stats,
            task=s.get("TASKS_NAME") or "",
            public_url=s.get("WEB_PUBLIC_URL") or "",
        )
        crawler.signals.connect(notifier.task_halted, signal=cnki_signals.task_halted)
        crawler.signals.connect(notifier.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(notifier.look_finished, signal=cnki_signals.look_finished)
        return notifier

    def _inc_stat(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"notify/{key}")

    def send(self, event: str, text: str, desk_ticket: str | None = None) -> None:
        """Queue one message (once per event) to every webhook; returns at once. A
        ``desk_ticket`` (cnkispider/sessions/tickets.py) goes into the desk's link, which then
        opens the desk without the web page's token."""
        with self._lock:
            if event in self._sent_events:
                return
            self._sent_events.add(event)
        text = mask_text(text)
        if event == "waiting" and self.public_url:
            link = f"{self.public_url}/desk" + (f"?ticket={desk_ticket}" if desk_ticket else "")
            text += _("; pass it here: %(link)s") % {"link": link}
        body = payload(self.format, event, self.task, text)
        for url in self.webhooks:
            thread = threading.Thread(
                target=self._post, args=(url, body), name="cnkispider-notify", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _post(self, url: str, body: dict) -> None:
        try:
            post(url, body, self.timeout)
        except Exception as exc:
            self._inc_stat("failed")
            with self._lock:
                first = url not in self._failed
                self._failed.add(url)
            if first:
                logger.warning(
                    "webhook %s failed (%s); the crawl goes on", mask_url(url), mask_text(str(exc))
                )
            return
        self._inc_stat("sent")

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the messages under way (at most ``timeout`` seconds each)."""
        for thread in list(self._threads):
            thread.join(self.timeout + 1 if timeout is None else timeout)

    def task_halted(self, task_id=None, reason="", spider=None):
        self.send(
            "halted",
            _("task %(name)s halted: %(reason)s (cnkispider task resume)")
            % {"name": self.task, "reason": halt_reason(reason)},
        )

    def look_finished(self, task="", number=0, gained=0, days=0, spider=None):
        """One message a look of a task that follows today (docs/FOLLOW.md)."""
        text = ngettext(
            "task {task}: {gained} new documents, {days} day re-opened",
            "task {task}: {gained} new documents, {days} days re-opened",
            days,
        ).format(task=task or self.task, gained=gained, days=days)
        self.send(f"look:{number}", text)

    def spider_closed(self, spider, reason):
        if reason == "finished":
            self.send("finished", _("task %(name)s finished") % {"name": self.task})
        self.wait()

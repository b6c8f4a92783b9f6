"""One browser User-Agent per CNKI session.

A real browser keeps its User-Agent for as long as it keeps its cookies; a session whose
requests change browser is a robot. Requests with a session (meta ``cnki_session``, set by the
session middleware, which runs first) get that session's User-Agent; others get a random one.

The User-Agents come from fake-useragent's packaged data (no network), read once and filtered
once; when that fails, a small built-in list is used.

Settings:
- ``USERAGENT_ENABLED`` (True): off -> NotConfigured (Scrapy's own USER_AGENT is then what is
  sent, if Scrapy's UserAgentMiddleware is enabled).
- ``USERAGENT_BROWSERS`` (Chrome, Edge, Firefox, Safari), ``USERAGENT_OS`` (Windows, Mac OS X,
  Linux), ``USERAGENT_PLATFORMS`` (desktop): fake-useragent filters; CNKI's pages are the
  desktop ones.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

from cnkispider.middlewares import Recent

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

FALLBACK_USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
)


class UserAgentChooser:
    """Random desktop User-Agents, weighted by how common they are. Built once: filtering
    fake-useragent's data on every call (what its ``.random`` does) costs milliseconds."""

    def __init__(
        self,
        user_agents: Sequence[str],
        weights: Sequence[float] | None = None,
        rng: random.Random | None = None,
    ):
        if not user_agents:
            raise ValueError("no User-Agent to choose from")
        self.user_agents = list(user_agents)
        self.cum_weights = list(itertools.accumulate(weights)) if weights else None
        self.rng = rng or random.Random()

    def __call__(self) -> str:
        return self.rng.choices(self.user_agents, cum_weights=self.cum_weights)[0]

    def __len__(self) -> int:
        return len(self.user_agents)

    @classmethod
    def from_fake_useragent(
        cls,
        browsers: Sequence[str],
        os: Sequence[str],
        platforms: Sequence[str],
        rng: random.Random | None = None,
    ) -> UserAgentChooser:
        try:
            from fake_useragent import UserAgent

            data = UserAgent(browsers=browsers, os=os, platforms=platforms).data_browsers
            weights: dict[str, float] = {}
            for record in data:
                if (
                    record.get("browser") in browsers
                    and record.get("os") in os
                    and record.get("type") in platforms
                    and record.get("useragent")
                ):
                    ua = record["useragent"]
                    weights[ua] = weights.get(ua, 0.0) + max(
                        float(record.get("percent") or 0), 0.01
                    )
            if not weights:
                raise ValueError(f"no User-Agent matches {browsers} / {os} / {platforms}")
            return cls(list(weights), list(weights.values()), rng)
        except Exception as exc:  # any failure of an optional data source: fall back
            logger.warning(
                "fake-useragent unusable (%s); using %d built-in User-Agents",
                exc,
                len(FALLBACK_USER_AGENTS),
            )
            return cls(FALLBACK_USER_AGENTS, rng=rng)


class UserAgentMiddleware:
    """Sets ``User-Agent``: the session's own, or a random one for requests without a session."""

    def __init__(self, choose: Callable[[], str], max_sessions: int = 4096):
        self.choose = choose
        self._by_session: Recent = Recent(max_sessions)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UserAgentMiddleware:
        settings = crawler.settings
        if not settings.getbool("USERAGENT_ENABLED"):
            raise NotConfigured
        chooser = UserAgentChooser.from_fake_useragent(
            settings.getlist("USERAGENT_BROWSERS"),
            settings.getlist("USERAGENT_OS"),
            settings.getlist("USERAGENT_PLATFORMS"),
        )
        return cls(chooser)

    def user_agent_for(self, session_id: str | None) -> str:
        if session_id is None:
            return self.choose()
        ua = self._by_session.get(session_id)
        if ua is None:
            ua = self._by_session[session_id] = self.choose()
        return ua

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        # Always set, never setdefault: a retried request is a copy that still carries the User-Agent
        # of its old session.
        # A session a person passed keeps the User-Agent of the browser it was passed in.
        known = request.meta.get("cnki_user_agent")
        request.headers["User-Agent"] = known or self.user_agent_for(
            request.meta.get("cnki_session")
        )

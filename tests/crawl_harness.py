"""Run real crawls in tests: a config.ini pointing at the stand-in, worker subprocesses, and a
field-by-field comparison of the database with the stand-in's ground truth."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis
import sqlalchemy as sa

from cnkispider.cnki.protocol import CLIENT_ID_PATH
from cnkispider.db import open_database
from cnkispider.items import FIELDS
from cnkispider.schema import round_
from cnkispider.storage import fetch_all
from standin.catalogue import UNTRUE_FIELDS
from tests import launcher

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("CNKI_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: A crawl's time limit is a safety net against a hang, never what a test asserts: a busy
#: two-core machine (load 15 to 20) took twice what an idle one takes, so every limit a test
#: gives ``run`` is doubled.
SAFETY = 2


@dataclass
class CrawlSetup:
    tmp_path: Path
    site: object
    db_url: str
    doc_type: str
    start: str
    end: str
    categories: str
    task: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    redis_url: str = REDIS_URL
    redis: dict = field(default_factory=dict)  # more [redis] keys (prefix)
    cnki: dict = field(default_factory=dict)
    crawl: dict = field(default_factory=dict)
    proxy: dict = field(default_factory=dict)
    # [task] day_census: the crawl tests written before the census (issue 21) count a round per
    # (day x root category), so they run with it off; tests/test_census.py turns it on. None:
    # not written (the code's own default: the benchmark, whose baseline may not know the key).
    day_census: str | None = "off"
    # [task] depth (issue 27): None = not written (detail, the default)
    depth: str | None = None
    # [task] query (issue 39): the task's professional-search expression; None = not written
    search_query: str | None = None
    # more [task] keys (issue 38: follow, look_back_days, follow_every)
    task_keys: dict = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        return self.tmp_path / "config.ini"

    def write(self) -> Path:
        cnki = {
            "base_url": self.site.base_url,
            # the stand-in issues Ecp_ClientId on its own host (CONTRACT-2026 point 2)
            "client_id_url": self.site.base_url + CLIENT_ID_PATH,
            "page_size": 50,
            **self.cnki,
        }
        crawl = {
            "data_dir": "data",
            "concurrent_requests": 16,
            "lease_seconds": 20,
            "heartbeat_seconds": 1,
            "round_lease_seconds": 15,
            "log_level": "info",
            "log_file": "crawl.log",
            **self.crawl,
        }
        sections = {
            "database": {"url": self.db_url},
            "redis": {"url": self.redis_url, **self.redis},
            "task": {
                "name": self.task,
                "type": self.doc_type,
                "start_date": self.start,
                "end_date": self.end,
                "categories": self.categories,
                **({"day_census": self.day_census} if self.day_census else {}),
                **({"depth": self.depth} if self.depth else {}),
                **({"query": self.search_query} if self.search_query else {}),
                **self.task_keys,
            },
            "cnki": cnki,
            "crawl": crawl,
            "proxy": self.proxy,
        }
        text = "".join(
            f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
            for name, values in sections.items()
            if values
        )
        self.config_path.write_text(text, encoding="utf-8")
        return self.config_path

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cnkispider.cli", "--config", str(self.config_path), *args]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run `cnkispider run` (or the given subcommand) to the end (``timeout``: see
        SAFETY)."""
        self.write()
        return launcher.run(
            self.command(*(args or ("run",))),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout * SAFETY,
        )

    def run_ok(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """``run``, and assert it exited 0, with the tails of its output and log if not."""
        result = self.run(*args, timeout=timeout)
        assert result.returncode == 0, (
            result.stdout[-3000:] + result.stderr[-3000:] + self.log()[-3000:]
        )
        return result

    def scrapy_crawl(
        self, *settings: str, env: dict | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        """Scrapy's own `scrapy crawl TYPE` (config.ini through CNKI_CONFIG) to the end, with
        ``-s NAME=value`` for each of ``settings`` and ``env`` added to the environment."""
        self.write()
        return launcher.run(
            [sys.executable, "-m", "scrapy", "crawl", self.doc_type]
            + [arg for setting in settings for arg in ("-s", setting)],
            cwd=ROOT,
            env={**os.environ, "CNKI_CONFIG": str(self.config_path), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout * SAFETY,
        )

    def spawn(self, *args: str) -> subprocess.Popen:
        self.write()
        return launcher.Popen(
            self.command(*(args or ("run",))),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def log(self) -> str:
        path = self.tmp_path / "crawl.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def truth(self) -> list[dict]:
        if self.search_query:  # the documents the task's expression finds in its scope
            return self.site.truth(
                self.doc_type,
                self.start,
                self.end,
                self.categories.split(","),
                query=self.search_query,
            )
        return self.site.truth(self.doc_type, self.start, self.end, self.categories.split(","))

    def stored(self) -> list[dict]:
        engine = open_database(self.db_url)
        try:
            return fetch_all(engine, self.doc_type)
        finally:
            engine.dispose()

    def query(self, statement) -> list:
        engine = open_database(self.db_url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(statement))
        finally:
            engine.dispose()

    def state(self) -> str:
        """The rounds' rows and the task's Redis keys, for a test's failure message: where a
        crawl that stopped moving stands (which round, whose, in which state; what Redis holds)."""
        lines = ["rounds (id day category state worker lease_until epoch attempts):"]
        columns = (round_.c.id, round_.c.day, round_.c.category, round_.c.state, round_.c.worker)
        more = (round_.c.lease_until, round_.c.epoch, round_.c.attempts)
        for row in self.query(sa.select(*columns, *more).order_by(round_.c.id)):
            lines.append("  " + " ".join(str(v) for v in row))
        client = redis.Redis.from_url(self.redis_url)
        prefix = self.redis.get("prefix", "cnki:")
        match = f"{prefix}*" if prefix != "cnki:" else f"cnki:{self.task}*"
        lines.append(f"redis {match}:")
        sizes = {"zset": client.zcard, "hash": client.hlen, "set": client.scard}
        for key in sorted(client.scan_iter(match=match, count=1000)):
            kind = client.type(key).decode()
            if key.endswith((b":drained", b":leases")):  # which, and until when (ms)
                value = client.zrange(key, 0, 20, withscores=True)
            elif kind in sizes:
                value = sizes[kind](key)
            else:  # a count or an epoch; a Bloom filter's bits only by their length
                raw = client.get(key) if kind == "string" else b""
                value = raw.decode() if len(raw) < 40 else f"{len(raw)} bytes"
            lines.append(f"  {key.decode()} = {value}"[:300])
        client.close()
        return "\n".join(lines)

    def cleanup_redis(self) -> None:
        client = redis.Redis.from_url(self.redis_url)
        prefix = self.redis.get("prefix", "cnki:")
        # a prefix of the test's own: every key under it (the pace and the session pool too)
        match = f"{prefix}*" if prefix != "cnki:" else f"cnki:{self.task}*"
        keys = list(client.scan_iter(match=match, count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def _as_text(value) -> str:
    """A stored value as the truth writes it: counts are integers in the database, strings in
    the truth; NULL and "" are both absent."""
    return "" if value is None else str(value)


# What a crawl at each depth stores, per type (the truth's names): compare(fields=...) on these
# (issue 27; detail depth compares every field)
LIST_DEPTH_FIELDS = {
    "paper": ("title", "authors", "source", "date", "database", "cited", "downloads", "export_id"),
    "patent": ("title", "inventors", "date", "database", "application_date", "export_id"),
    "achievement": ("title", "completers", "source", "date", "database", "cited", "export_id"),
}
EXPORT_DEPTH_FIELDS = {
    "paper": LIST_DEPTH_FIELDS["paper"]
    + ("abstract", "keywords", "doi", "year", "volume", "issue", "page_range", "issn")
    + ("supervisor", "degree"),
    "patent": LIST_DEPTH_FIELDS["patent"] + ("abstract", "address", "publication_date"),
    "achievement": LIST_DEPTH_FIELDS["achievement"] + ("summary", "keywords", "first_unit"),
}


def depth_fields(depth: str | None, doc_type: str) -> tuple[str, ...] | None:
    """The fields a crawl at ``depth`` must equal the truth on (None: every field)."""
    return {"list": LIST_DEPTH_FIELDS, "export": EXPORT_DEPTH_FIELDS}.get(depth or "", {}).get(
        doc_type
    )


def compare(
    stored: list[dict], truth: list[dict], doc_type: str, fields: tuple[str, ...] | None = None
) -> dict:
    """Missing, extra and differing documents, keyed on (dbname, filename), every field compared
    (or only ``fields``)."""
    have = {(d["dbname"], d["filename"]): d for d in stored}
    want = {(d["dbname"], d["filename"]): d for d in truth}
    differing = {}
    for key in have.keys() & want.keys():
        diffs = {
            f: (have[key].get(f), want[key].get(f))
            for f in fields or FIELDS[doc_type]
            if f not in UNTRUE_FIELDS and _as_text(have[key].get(f)) != _as_text(want[key].get(f))
        }
        if diffs:
            differing[key] = diffs
    return {
        "missing": sorted(want.keys() - have.keys()),
        "extra": sorted(have.keys() - want.keys()),
        "differing": differing,
    }


def count_rows(setup: CrawlSetup, table) -> int:
    return setup.query(sa.select(sa.func.count()).select_from(table))[0][0]

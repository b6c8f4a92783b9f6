"""The optional raw-HTML archive: every detail page CNKI served, kept as gzip files.

With ``[crawl] archive_html = true`` each usable detail page is written to
``ARCHIVE_DIR/<dbname>/<filename>.html.gz`` before the spider parses it, so fields can be
re-parsed later (after a parser fix) without crawling CNKI again. A page that is a refusal is
never archived: the retry middleware, above this one, has already turned it into a retry.

Settings: ``ARCHIVE_DIR`` (empty or unset: off).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from scrapy.exceptions import NotConfigured

from cnkispider.runtime.offload import in_thread

SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class HtmlArchiveMiddleware:
    def __init__(self, directory: str, stats=None):
        self.directory = Path(directory)
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        directory = crawler.settings.get("ARCHIVE_DIR")
        if not directory:
            raise NotConfigured
        return cls(directory, crawler.stats)

    def path_for(self, doc_key: str) -> Path:
        dbname, _, filename = doc_key.partition("/")
        return self.directory / SAFE.sub("_", dbname) / f"{SAFE.sub('_', filename)}.html.gz"

    def _write(self, path: Path, body: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        partial.write_bytes(gzip.compress(body))
        partial.replace(path)  # a reader never sees half a file

    async def process_response(self, request, response):
        doc_key = request.meta.get("doc_key")
        if request.meta.get("cnki_kind") == "detail" and doc_key and response.status == 200:
            await in_thread(self._write, self.path_for(doc_key), response.body)
            if self.stats is not None:
                self.stats.inc_value("archive/pages")
        return response

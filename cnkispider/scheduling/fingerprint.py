"""The request fingerprinter: a detail document by its ``doc_key``, everything else as Scrapy does.

A detail link's ``v=`` token expires and names the session that listed it, so the same document
reached twice (two sort orders, a replayed list page) has two URLs. Its meta ``doc_key``
(``dbname/filename``) is what identifies it, so that is what is fingerprinted. Requests without a
``doc_key`` get Scrapy's default fingerprint (canonical URL, method, body).

Enable with ``REQUEST_FINGERPRINTER_CLASS = "cnkispider.scheduling.fingerprint.DocKeyFingerprinter"``.

Settings: those of Scrapy's default fingerprinter (it is built with the crawler).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from scrapy.utils.request import RequestFingerprinter

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class DocKeyFingerprinter:
    """SHA1 of ``doc_key:<dbname/filename>`` when meta ``doc_key`` is set, else Scrapy's default."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DocKeyFingerprinter:
        return cls(crawler)

    def __init__(self, crawler: Crawler | None = None):
        self._default = RequestFingerprinter(crawler)

    def fingerprint(self, request: Request) -> bytes:
        doc_key = request.meta.get("doc_key")
        if doc_key:
            return hashlib.sha1(b"doc_key:" + str(doc_key).encode()).digest()
        return self._default.fingerprint(request)

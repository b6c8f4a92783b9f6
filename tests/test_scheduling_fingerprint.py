"""The fingerprinter: detail documents by doc_key, everything else as Scrapy does."""

from __future__ import annotations

import scrapy
from scrapy.utils.request import RequestFingerprinter

from cnkispider.scheduling.fingerprint import DocKeyFingerprinter


def test_a_document_is_one_fingerprint_whatever_its_expiring_url():
    fp = DocKeyFingerprinter()
    a = scrapy.Request("https://x/kcms2/article/abstract?v=AAA", meta={"doc_key": "SCPD/CN1"})
    b = scrapy.Request("https://x/kcms2/article/abstract?v=BBB", meta={"doc_key": "SCPD/CN1"})
    c = scrapy.Request("https://x/kcms2/article/abstract?v=AAA", meta={"doc_key": "SCPD/CN2"})
    assert fp.fingerprint(a) == fp.fingerprint(b) != fp.fingerprint(c)


def test_without_doc_key_it_is_scrapys_fingerprint():
    request = scrapy.Request("https://x/kns8s/brief/grid?b=2&a=1", method="POST", body=b"q=1")
    assert DocKeyFingerprinter().fingerprint(request) == RequestFingerprinter().fingerprint(request)

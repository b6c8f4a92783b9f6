"""The local stand-in of the CNKI site: kns8s protocol, CNKI's markup, limits and faults.

No machine here reaches cnki.net, so the crawler is proven against this site: the test bed of
every other part, the offline demo and the target of the benchmarks. Modules:

  corpus    the deterministic corpus (counts, documents, orders, ground truth) from a seed
  vocab     the word lists titles, people and institutions are drawn from
  markup    CNKI's list fragment and the hand-made detail pages, rendered once per document
  limits    sessions, detail tokens, the per-IP rate limit, the fault plan, the proxy provider
  site      routes and CNKI's rules (cap, turn limit, token checks), control endpoints
  server    the asyncio HTTP/1.1 server and the proxy ports
  client    start a site in a subprocess, and a browser-like http.client of the protocol
  fixture   the ``cnki_site`` pytest factory fixture
  __main__  ``python -m tests.cnki_site [options]`` and ``python -m tests.cnki_site truth ...``
"""

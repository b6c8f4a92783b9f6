"""Throughput of the CNKI stand-in site: pages served per second on one core, faults off.

    python bench/site_throughput.py [--seconds 10] [--connections 16] [--seed 1] [--target 800]

Starts the site (``python -m standin``) pinned to one core (``os.sched_setaffinity`` in
the child, where the platform has it), pins this process (the load generator) to another core,
and drives a crawl-like mix over persistent HTTP/1.1 connections: each connection warms up a
session (the warm-up page, then an Ecp_ClientId from GenerateClientID, which is not counted as a
page), walks a round's list pages (50 rows each, renewing the session before the turn limit)
and fetches every detail page a list page links to, as a crawler does. Rounds are taken from the
site's own /_rounds so that every list page is a real one (cold documents are generated on the
way, as in a real crawl). The load generator is raw asyncio protocols, cheaper per request than
the site, so the figure measures the site.

Prints a table: scenario, requests, seconds, pages/s, the target and PASS/FAIL. The target is
the issue's: at least 800 pages a second with faults off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from standin.client import CLIENT_ID_PATH, grid_form, start_site

TOKEN = re.compile(rb'href="[^"]*?(/kcms2/article/abstract\?v=[^"&]+)')
TURN_LIMIT = 15


class HttpClient(asyncio.Protocol):
    """One keep-alive connection, one request in flight (as Scrapy uses a connection)."""

    def __init__(self):
        self.transport = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.need = -1
        self.head_end = -1

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            i = head.find(b"content-length:")
            length = int(
                head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]
            )
            self.head_end = end + 4
            self.need = self.head_end + length
        if len(self.buf) >= self.need:
            head = bytes(self.buf[: self.head_end])
            body = bytes(self.buf[self.head_end : self.need])
            del self.buf[: self.need]
            self.need = -1
            if self.waiter and not self.waiter.done():
                self.waiter.set_result((head, body))

    def connection_lost(self, exc):
        if self.waiter and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    async def send(self, raw: bytes) -> tuple[bytes, bytes]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter


def request(method: str, host: str, path: str, cookie: str = "", body: bytes = b"") -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        "User-Agent: bench",
        "Accept-Encoding: identity",
    ]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    if method == "POST":
        lines += [
            "Content-Type: application/x-www-form-urlencoded; charset=UTF-8",
            "X-Requested-With: XMLHttpRequest",
            f"Content-Length: {len(body)}",
        ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def lane(
    base: str,
    rounds: list[tuple[str, str, str, int]],
    start: int,
    deadline: float,
    counts: dict,
    list_only: bool,
) -> None:
    parts = urlsplit(base)
    host = parts.netloc
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(HttpClient, parts.hostname, parts.port)
    k = start
    cookie, used = "", TURN_LIMIT + 1
    while time.perf_counter() < deadline:
        doc_type, day, code, total = rounds[k % len(rounds)]
        k += 1
        for page in range(1, min(120, -(-total // 50)) + 1):
            if time.perf_counter() >= deadline:
                break
            if used > TURN_LIMIT:  # renew the session before CNKI stops turning pages
                head, _ = await client.send(request("GET", host, "/kns8s/defaultresult/index"))
                counts["warmup"] += 1
                cookie = "; ".join(m.decode() for m in re.findall(rb"Set-Cookie: ([^;]+);", head))
                # the 2026 site refuses grid POSTs without an Ecp_ClientId it issued
                _, answer = await client.send(request("GET", host, CLIENT_ID_PATH))
                counts["client_id"] += 1
                cookie += f"; Ecp_ClientId={json.loads(answer)['Data']}"
                used = 0
            body = grid_form(doc_type, day, code=code, page=page, size=50)
            head, page_body = await client.send(
                request("POST", host, "/kns8s/brief/grid", cookie, body)
            )
            used += 1
            if not head.startswith(b"HTTP/1.1 200") or b"pagerTitleCell" not in page_body:
                counts["errors"] += 1
                continue
            counts["list"] += 1
            if list_only:
                continue
            for path in TOKEN.findall(page_body):
                head, _ = await client.send(
                    request("GET", host, path.decode() + "&uniplatform=NZKPT&language=CHS")
                )
                counts["detail" if head.startswith(b"HTTP/1.1 200") else "errors"] += 1
    client.transport.close()


async def drive(
    base: str, rounds, seconds: float, connections: int, list_only: bool
) -> tuple[dict, float]:
    counts = {"warmup": 0, "client_id": 0, "list": 0, "detail": 0, "errors": 0}
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(
        *(lane(base, rounds, i * 7, deadline, counts, list_only) for i in range(connections))
    )
    return counts, time.perf_counter() - t0


def pick_rounds(site, days: list[str]) -> list[tuple[str, str, str, int]]:
    rounds = []
    for doc_type in ("patent", "paper", "achievement"):
        for day in days:
            for r in site.rounds(doc_type, day):
                if 50 <= r["count"] <= 6000:
                    rounds.append((doc_type, r["date"], r["category"], r["count"]))
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", type=float, default=800.0)
    args = parser.parse_args(argv)

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    site_cpu = cpus[0] if cpus else None
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[1]})  # the load generator stays off the site's core
    site = start_site(cpu=site_cpu, seed=args.seed)
    try:
        rounds = pick_rounds(site, [f"2024-03-{d:02d}" for d in range(1, 29)])
        results = []
        for name, list_only in (
            ("crawl mix (warm-up, lists of 50, details)", False),
            ("list pages of 50 only", True),
        ):
            counts, seconds = asyncio.run(
                drive(site.base_url, rounds, args.seconds, args.connections, list_only)
            )
            served = counts["warmup"] + counts["list"] + counts["detail"]
            results.append((name, served, seconds, served / seconds, counts))
    finally:
        site.stop()

    pinned = f"site pinned to cpu {site_cpu}" if site_cpu is not None else "site not pinned"
    print(
        f"CNKI stand-in throughput ({pinned}, {args.connections} keep-alive connections, faults off)"
    )
    print(f"{'scenario':<44}{'requests':>10}{'seconds':>9}{'pages/s':>10}{'target':>8}  result")
    ok = True
    for i, (name, served, seconds, rate, counts) in enumerate(results):
        decides = i == 0  # the crawl mix is the measure; list-only is for information
        verdict = ("PASS" if rate >= args.target else "FAIL") if decides else "(info)"
        ok = ok and (rate >= args.target or not decides) and counts["errors"] == 0
        print(f"{name:<44}{served:>10}{seconds:>9.1f}{rate:>10.0f}{args.target:>8.0f}  {verdict}")
        print(
            f"{'':<4}warm-ups {counts['warmup']} (+{counts['client_id']} client ids), "
            f"list pages {counts['list']}, "
            f"details {counts['detail']}, errors {counts['errors']}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

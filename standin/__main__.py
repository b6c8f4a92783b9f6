"""Command line of the CNKI stand-in site.

Serve (the first stdout line is exactly ``CNKI stand-in at http://HOST:PORT``, then one line
per proxy and one for the provider; it serves until SIGTERM or SIGINT)::

    python -m standin [--host 127.0.0.1] [--port 0] [--seed 1] [--scale 1.0]
        [--no-human-check] [--session-requests 300] [--session-minutes 30]
        [--session-pace 1.5 --session-pace-window 10] [--session-burst 4]
        [--zero-as-soft-block] [--no-dbname-years] [--export-batch 0]
        [--cap-rows 6000 | --max-pages N] [--turn-limit 15|0] [--token-ttl 600] [--session-ttl 1200]
        [--pace-limit RPS --pace-block-seconds 30]
        [--collect-missing 0.3] [--rows-without-keys] [--header-rows 0] [--break NAME ...]
        [--latency 0|0.05|0.02-0.08] [--proxies N] [--dead-proxies K] [--proxy-auth user:pass]
        [--provider-interval 5] [--provider-batch 5]
        [--rate-limit R --burst B --ban-seconds S]
        [--throttle R --throttle-seconds S --throttle-date --throttle-silent]
        [--fault NAME=RATE ...] [--slow-seconds 3] [--doomed N]
        [--overflow TYPE:YYYY-MM-DD:CODE:COUNT ...] [--categories-file TYPE=PATH ...]
        [--span YYYY-MM-DD:YYYY-MM-DD] [--profile realistic-year [--surge-rows 7500]]

The human check is ON here (as on the live site of late 2026): every kns request of a session
no person passed is challenged; a browser passes it on /verify/home (drag the slider's piece
onto the gap). ``--no-human-check`` restores the plain site. The Python API
(``standin.client.start_site``, the ``cnki_site`` fixture) defaults to the plain site.

Faults: reset, e500, e502, e503, verify, captcha, blank, javascript, slow (rates 0..1).
Breaks (each makes one assumption of ``cnkispider probe`` false): client-id, date-filter,
category-filter, turn-token, detail-fields, patent-keys, census-short.

Ground truth (JSON lines, one document per line with every item field)::

    python -m standin truth --type patent --start 2024-01-01 --end 2024-01-03
        [--categories H04,G06] [--seed 1] [--scale ...] [--overflow ...] [--categories-file ...]
        [--no-dbname-years] [--profile realistic-year --surge-rows N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date

from standin.catalogue import DOC_TYPES, CorpusOptions
from standin.corpus import PROFILES, Corpus
from standin.limits import ALL_FAULTS
from standin.options import BREAKS, SiteOptions, parse_latency
from standin.site import Site


def _pair(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"{what}: expected NAME=VALUE, got {text!r}")
    return key, value


def _fault(text: str) -> tuple[str, float]:
    name, rate = _pair(text, "--fault")
    if name not in ALL_FAULTS:
        raise argparse.ArgumentTypeError(
            f"--fault: unknown fault {name!r} (known: {', '.join(ALL_FAULTS)})"
        )
    try:
        value = float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fault {text!r}: rate is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"--fault {text!r}: rate must be within 0..1")
    return name, value


def _tree(text: str) -> tuple[str, str]:
    doc_type, path = _pair(text, "--categories-file")
    if doc_type not in DOC_TYPES:
        raise argparse.ArgumentTypeError(f"--categories-file: unknown type {doc_type!r}")
    return doc_type, path


def _latency(text: str) -> str:
    try:
        parse_latency(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_corpus_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the natural counts")
    parser.add_argument(
        "--overflow", action="append", default=[], metavar="TYPE:YYYY-MM-DD:CODE:COUNT"
    )
    parser.add_argument(
        "--categories-file", action="append", type=_tree, default=[], metavar="TYPE=PATH"
    )
    parser.add_argument(
        "--doomed", type=int, default=0, help="documents per (type, day) whose detail always fails"
    )
    parser.add_argument(
        "--title-variety",
        type=int,
        default=0,
        help="distinct titles per (type, day); 0: every document its own (a small number makes a "
        "title search list many documents, as CNKI's does for a common title)",
    )
    parser.add_argument(
        "--span",
        default="2024-01-01:2024-12-31",
        help="days a search without a PT range covers (START:END)",
    )
    parser.add_argument(
        "--dbname-years",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="database names with their year, as CNKI's rows show them (SCPD2024, "
        "CJFDLAST2024, CMFD202401, ...; the default); --no-dbname-years: the bare family names "
        "(SCPD, CJFQ, ...)",
    )

    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="",
        help="realistic-year: patents only on Tuesdays and Fridays (CNIPA's publication days), "
        "papers every day (fewer at weekends), Zipf-skewed class sizes, a few surge days over "
        "the cap; --scale scales the ordinary days (default: the hash spread of every day)",
    )
    parser.add_argument(
        "--surge-rows",
        type=int,
        default=7500,
        help="realistic-year: documents of a surge day, not scaled (some are 3 or 4 times it)",
    )
    parser.add_argument(
        "--late-arrivals",
        action="store_true",
        help="each document is entered days to months after its own date, as on CNKI (most "
        "within a week, a tail of weeks to four months)",
    )
    parser.add_argument(
        "--as-of",
        type=_day,
        default=None,
        metavar="DAY",
        help="the site's today: a document entered after DAY is not there yet (/_control "
        "as_of moves it)",
    )


def _day(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


def _corpus_options(args) -> CorpusOptions:
    start, _, end = args.span.partition(":")
    return CorpusOptions(
        seed=args.seed,
        scale=args.scale,
        overflow=list(args.overflow),
        trees=dict(args.categories_file),
        doomed=args.doomed,
        title_variety=args.title_variety,
        span=(start, end or start),
        dbname_years=args.dbname_years,
        profile=args.profile,
        surge_rows=args.surge_rows,
        late=args.late_arrivals,
        as_of=args.as_of or "",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m standin", description="The local CNKI stand-in site."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--cap-rows", type=int, default=6000, help="rows a search reaches, whatever the page size"
    )
    parser.add_argument(
        "--max-pages", type=int, default=None, help="the older cap spelling: cap-rows = N * 50"
    )
    parser.add_argument(
        "--turn-limit",
        type=int,
        default=None,
        help="grid requests a session allows after its first (0: no limit; default 15, "
        "or 0 with the human check, whose hidden per-session limits take its place)",
    )
    parser.add_argument(
        "--human-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="challenge every request of a session no person passed on /verify/home "
        "(default: on; --no-human-check: the plain site)",
    )
    parser.add_argument(
        "--session-requests",
        type=int,
        default=300,
        help="hidden: requests a passed session answers before it is checked again (0: no limit)",
    )
    parser.add_argument(
        "--session-minutes",
        type=float,
        default=30.0,
        help="hidden: minutes a pass lasts (0: no limit)",
    )
    parser.add_argument(
        "--session-pace",
        type=float,
        default=1.5,
        help="hidden: a passed session making more than this many requests/s over "
        "--session-pace-window seconds is checked again (0: off)",
    )
    parser.add_argument("--session-pace-window", type=float, default=10.0)
    parser.add_argument(
        "--session-burst",
        type=int,
        default=4,
        help="hidden: this many requests of a passed session within 2 s draw the check (0: off)",
    )
    parser.add_argument(
        "--zero-as-soft-block",
        action="store_true",
        help="a search with no results answers the soft block's 105 bytes",
    )
    parser.add_argument(
        "--export-batch",
        type=int,
        default=0,
        help="hidden: export ids GetExport answers per request, the rest left out (0: all)",
    )
    parser.add_argument(
        "--pace-limit",
        type=float,
        default=0.0,
        help="hidden requests/s per session and per IP over 2 s before a challenge (0: off)",
    )
    parser.add_argument("--pace-block-seconds", type=float, default=30.0)
    parser.add_argument(
        "--collect-missing",
        type=float,
        default=0.3,
        help="share of patent rows without a.icon-collect (key in the link instead)",
    )
    parser.add_argument(
        "--rows-without-keys", action="store_true", help="patent rows carry no key at all"
    )
    parser.add_argument(
        "--header-rows",
        type=float,
        default=0.0,
        help="share of list pages whose table starts with a header row in <td> cells",
    )
    parser.add_argument(
        "--break",
        dest="breaks",
        action="append",
        choices=BREAKS,
        default=[],
        metavar="NAME",
        help=f"make one probe assumption false ({', '.join(BREAKS)}); repeatable",
    )
    parser.add_argument(
        "--token-ttl", type=float, default=600.0, help="seconds a detail token lives"
    )
    parser.add_argument(
        "--session-ttl", type=float, default=1200.0, help="idle seconds before a session expires"
    )
    parser.add_argument(
        "--latency", type=_latency, default="0", help="seconds, fixed (0.05) or uniform (0.02-0.08)"
    )
    parser.add_argument("--proxies", type=int, default=0, help="proxy ports to open")
    parser.add_argument("--dead-proxies", type=int, default=0, help="how many of them are dead")
    parser.add_argument("--proxy-auth", default=None, metavar="USER:PASS")
    parser.add_argument("--provider-interval", type=float, default=5.0)
    parser.add_argument("--provider-batch", type=int, default=5)
    parser.add_argument(
        "--rate-limit", type=float, default=0.0, help="requests per second per IP (0: off)"
    )
    parser.add_argument("--burst", type=float, default=10.0)
    parser.add_argument("--ban-seconds", type=float, default=60.0)
    parser.add_argument(
        "--throttle",
        type=float,
        default=0.0,
        help="requests per second per IP past which CNKI answers 429 (0: off)",
    )
    parser.add_argument(
        "--throttle-seconds", type=float, default=3.0, help="seconds a 429 window stays closed"
    )
    parser.add_argument(
        "--throttle-date", action="store_true", help="Retry-After as an HTTP date, not seconds"
    )
    parser.add_argument(
        "--throttle-silent", action="store_true", help="429 without Retry-After (clients back off)"
    )
    parser.add_argument("--fault", action="append", type=_fault, default=[], metavar="NAME=RATE")
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    _add_corpus_options(parser)
    return parser


def build_truth_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m standin truth",
        description="Print the ground truth of a task's rounds as JSON lines.",
    )
    parser.add_argument("--type", required=True, choices=DOC_TYPES)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    parser.add_argument(
        "--categories", default="", help="comma-separated codes (prefixes); empty: all"
    )
    _add_corpus_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["truth"]:
        args = build_truth_parser().parse_args(argv[1:])
        try:
            corpus = Corpus(_corpus_options(args))
            categories = [c.strip() for c in args.categories.split(",") if c.strip()]
            rows = corpus.truth(args.type, args.start, args.end, categories)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        out = sys.stdout
        if hasattr(out, "reconfigure"):
            out.reconfigure(encoding="utf-8")  # the Windows console default is not UTF-8
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        return 0
    args = build_parser().parse_args(argv)
    options = SiteOptions(
        host=args.host,
        port=args.port,
        cap_rows=args.cap_rows,
        max_pages=args.max_pages,
        turn_limit=args.turn_limit,
        human_check=args.human_check,
        session_requests=args.session_requests,
        session_minutes=args.session_minutes,
        session_pace=args.session_pace,
        session_pace_window=args.session_pace_window,
        session_burst=args.session_burst,
        zero_as_soft_block=args.zero_as_soft_block,
        export_batch=args.export_batch,
        pace_limit=args.pace_limit,
        pace_block_seconds=args.pace_block_seconds,
        collect_missing=args.collect_missing,
        rows_without_keys=args.rows_without_keys,
        header_rows=args.header_rows,
        breaks=list(args.breaks),
        token_ttl=args.token_ttl,
        session_ttl=args.session_ttl,
        latency=args.latency,
        proxies=args.proxies,
        dead_proxies=args.dead_proxies,
        proxy_auth=args.proxy_auth,
        provider_interval=args.provider_interval,
        provider_batch=args.provider_batch,
        rate_limit=args.rate_limit,
        burst=args.burst,
        ban_seconds=args.ban_seconds,
        throttle=args.throttle,
        throttle_seconds=args.throttle_seconds,
        throttle_date=args.throttle_date,
        throttle_silent=args.throttle_silent,
        faults=dict(args.fault),
        slow_seconds=args.slow_seconds,
        corpus=_corpus_options(args),
    )
    try:
        site = Site(options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from standin.server import serve

    try:
        asyncio.run(serve(site, args.host, args.port, args.proxies))
    except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rendering the status report: the plain dict of :mod:`cnkispider.status.collecting` in, the
text of ``cnkispider status`` (or its JSON) out, and the summary printed when a run ends.

Pure: no database, no Redis, no clock; every age and time is in the report already.
"""

from __future__ import annotations

import json
import re

from cnkispider.durations import duration
from cnkispider.i18n import _
from tasks.categories import round_label

BAR_WIDTH = 30

# Scrapy records a finish reason when the spider closes; a second Ctrl-C stops the reactor first
FORCED_STOP = "forced stop (a second Ctrl-C; its rounds are taken over when their leases end)"


def run_command(name: str) -> str:
    """The command that starts a worker of task ``name`` (`cnkispider run` alone crawls
    config.ini's task, maybe another): the name in double quotes where a shell would split it
    (double quotes: the same in cmd.exe, PowerShell and a POSIX shell)."""
    shown = name if re.fullmatch(r"[\w.~+-]+", name) else '"' + name.replace('"', '\\"') + '"'
    return f"cnkispider run --task {shown}"


def render(report: dict) -> str:
    """The text of ``cnkispider status``."""
    redis_info = report["redis"]
    if redis_info["reachable"]:
        redis_text = redis_info["url"]
    elif redis_info.get("state") == "idle":
        redis_text = f"{redis_info['url']}: {redis_info['error']}; queue unknown"
    else:
        redis_text = f"{redis_info['url']} UNREACHABLE: {redis_info['error']}"
    lines = [
        f"cnkispider status at {_clock(report['generated_at'])} (database clock, UTC)",
        f"database {report['database']}",
        f"redis    {redis_text}",
    ]
    if not report["tasks"]:
        lines += ["", "no tasks yet: `cnkispider run` registers the task of config.ini"]
    for entry in report["tasks"]:
        lines.append("")
        lines += _render_task(entry, report)
    return "\n".join(lines) + "\n"


def _render_task(t: dict, report: dict) -> list[str]:
    head = f"task {t['id']} {t['name']!r}"
    if not t["ok"]:
        lines = [f"{head}: BAD ROW, skipped by workers: {t['problem']}"]
    else:
        end = t["end_date"] or f"(today: {t['until']})"
        lines = [
            f"{head}  {t['type']}  {t['start_date']} .. {end}  depth {t.get('depth') or 'detail'}"
            f"  phase {t['phase']}  [{t['activity']}]"
        ]
        if t.get("query"):
            lines.append(f"  {_('query')} {t['query']}")
    if t.get("halted"):
        what = "paused" if t["activity"] == "paused" else f"halted: {t['halted']}"
        lines.append(
            f"  {what}  (since {_clock(t['halted_at'])} UTC; "
            f"`cnkispider task resume {t['name']}` goes on)"
        )
    if t.get("waiting"):
        lines.append(f"  waiting: {t['waiting']}")
    r = t["rounds"]
    cursor = t["cursor"]
    seen = _ago(t["last_heartbeat_age_seconds"])
    lines.append(
        f"  cursor     {cursor['date'] or '-'} {round_label(cursor['category'])}   last heartbeat {seen}"
    )
    if r["total"] is not None:
        failed = f", {r['failed']} failed" if r["failed"] else ""
        lines.append(
            f"  rounds     {_bar(t['progress'])} {t['progress'] * 100:5.1f}%  "
            f"{r['finished']:,} of {r['total']:,} finished ({r['done']:,} done{failed}), {r['in_flight']} in flight"
        )
        rate = t["rate"]["rounds_per_hour"]
        if r["remaining"] == 0:
            eta = "ETA -: nothing left" + ("" if t["end_date"] else " until tomorrow")
        elif t["activity"] in ("halted", "paused"):
            eta = f"no ETA: {t['activity']}"
        elif t["activity"] != "running":
            eta = "no ETA: no worker is alive"
            if t["activity"] == "no live worker":
                eta += _(" (start one: `{command}`)").format(command=run_command(t["name"]))
        elif rate and t["eta_seconds"] is not None:
            eta = f"ETA {duration(t['eta_seconds'])} ({_clock(t['eta_at'])} UTC)"
        else:
            eta = "ETA unknown until a round finishes"
        lines.append(f"  rate       {_per_hour(rate)}; {eta}")
    else:
        states = ", ".join(f"{k} {v}" for k, v in sorted(r["by_state"].items())) or "none"
        lines.append(f"  rounds     {states}")
    current = ", ".join(f"{c['day']} {round_label(c['category'])}" for c in t["current_rounds"][:6])
    if len(t["current_rounds"]) > 6:
        current += f", ... ({len(t['current_rounds'])} in all)"
    lines.append(f"  now        {current or '-'}")
    docs = "-" if t["documents"] is None else f"{t['documents']:,}"
    lines.append(f"  documents  {docs}")
    if t.get("ledger"):
        lines += [f"  {line}" for line in ledger_lines(t["ledger"])]
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        if not e["total"]:
            lines.append(f"  {name:<10} 0")
            continue
        states = ", ".join(f"{k} {v}" for k, v in sorted(e["by_state"].items()))
        reasons = ", ".join(
            f"{k} {v}"
            for k, v in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        )
        lines.append(f"  {name:<10} {e['total']:,} ({states}); by reason: {reasons}")
    queue = t.get("queue")
    if queue is not None:
        lines.append(f"  queue      {queue['queued']:,} queued, {queue['leased']:,} leased")
    elif report["redis"].get("state") == "idle":
        lines.append("  queue      unknown (the embedded Redis is not running)")
    else:
        lines.append("  queue      ? (Redis unreachable)")
    c = t["worker_counts"]
    pages = sum(_rate(w) or 0 for w in t["workers"] if w["state"] == "alive")
    lines.append(
        f"  workers    {c['alive']} alive, {c['gone']} gone, {c['stopped']} stopped"
        + (f"; {pages:,.0f} pages/min together" if c["alive"] else "")
    )
    if t["workers"]:
        lines.append(
            f"    {'HOST':<20} {'PID':>7}  {'STATE':<7} {'LAST SEEN':>10} {'PAGES/MIN':>9} {'PAGES':>8} {'ITEMS':>8} {'ERRORS':>6}  ROUNDS"
        )
        for w in t["workers"]:
            rate = _rate(w)
            lines.append(
                f"    {w['host'][:20]:<20} {w['pid']:>7}  {w['state']:<7} {_ago(w['last_seen_age_seconds']):>10} "
                f"{'-' if rate is None else f'{rate:,.1f}':>9} {w['pages']:>8,} {w['items']:>8,} {w['errors']:>6,}  "
                f"{', '.join(w['rounds']) or '-'}"
            )
        sizes = sorted({w["export_batch"] for w in t["workers"] if w.get("export_batch")})
        if sizes:  # export depth: the batch size learned from CNKI's answers (docs/DEPTH.md)
            lines.append(
                f"    export batch size reached: {', '.join(map(str, sizes))} ids a request"
            )
    return lines


def _rate(w: dict) -> float | None:
    recent = w.get("recent_pages_per_minute")
    return recent if recent is not None else w["pages_per_minute"]


def _bar(fraction: float) -> str:
    # ASCII: a Chinese Windows console (GBK) or a log file shows it as well as a terminal does.
    filled = int(round(max(0.0, min(fraction, 1.0)) * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _clock(iso: str | None) -> str:
    return iso.replace("T", " ").rstrip("Z") if iso else "-"


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return duration(seconds) + " ago"


def _per_verified_session(stats: dict, items: int) -> list[str]:
    """What a person's pass bought this run (issue 19): documents per verified session and CNKI
    requests per stored document (every request this worker sent: list, detail, client id)."""
    used = stats.get("session/verified/used", 0)
    if not used:
        return []
    requests = stats.get("downloader/request_count", 0)
    per_doc = f"{requests / items:.2f}" if items else "-"
    return [
        f"verified        {used} sessions used; {items / used:.0f} documents per verified "
        f"session; {per_doc} CNKI requests per stored document"
    ]


def ledger_lines(ledger: dict) -> list[str]:
    """The task's ledger sums (``ledger  listed N = stored + in errorLink + dropped + beyond``)
    and its rounds out of balance, one line each (the first few)."""
    drops = ", ".join(f"{rule} {n:,}" for rule, n in sorted(ledger["dropped"].items()))
    lines = [
        f"ledger     listed {ledger['listed']:,} = stored {ledger['stored']:,} + in errorLink "
        f"{ledger['in_error']:,} + dropped {sum(ledger['dropped'].values()):,}"
        f"{f' ({drops})' if drops else ''} + beyond {ledger['beyond']:,} "
        f"({ledger['rounds']:,} rounds closed)"
    ]
    if ledger["unbalanced"]:
        lines.append(f"           {ledger['unbalanced']:,} rounds out of balance:")
        for r in ledger["out_of_balance"][:5]:
            lines.append(
                f"             round {r['id']} {r['day']} {round_label(r['category'])}: {r['note']}"
            )
    return lines


def _per_hour(rate: float | None) -> str:
    """The task's round rate, in every view's words (``round_rate_eta`` defines it)."""
    return f"{rate:,.1f} rounds/h" if rate else "- rounds/h"


def to_json(report: dict) -> str:
    return json.dumps(report, ensure_ascii=False, indent=2) + "\n"


def render_summary(t: dict, stats: dict) -> str:
    """The summary printed when a run ends, from the task's entry of the report and the run's
    Scrapy stats (plus ``elapsed_seconds``): rounds, documents, errors by reason, time and rates."""
    r = t["rounds"]
    elapsed = float(stats.get("elapsed_seconds") or 0.0)
    pages = stats.get("response_received_count", 0)
    items = stats.get("item_scraped_count", 0)
    done_here = stats.get("rounds/done", 0)
    minutes = elapsed / 60 if elapsed else 0
    total = f" of {r['total']:,}" if r["total"] is not None else ""
    failed = f", {r['failed']} failed" if r["failed"] else ""
    lines = [
        "",
        f"== cnkispider summary: task {t['name']!r} ({t['type']}), phase {t['phase']} ==",
        f"finish reason   {stats.get('finish_reason') or FORCED_STOP}",
        *([f"halted          {t['halted']}"] if t.get("halted") else []),
        f"rounds          {r['finished']:,}{total} finished ({r['done']:,} done{failed}, {r['in_flight']} in flight); "
        f"{done_here} completed by this worker",
        f"documents       {t['documents']} stored for this task ({items} this run)",
        f"time            {duration(elapsed)} ({elapsed:.1f} s)",
        f"rate            {pages / elapsed if elapsed else 0:.1f} pages/s, "
        f"{items / minutes if minutes else 0:.0f} items/min (this worker); "
        f"{_per_hour(t['rate']['rounds_per_hour'])} (the task's, as status shows it)",
        *_per_verified_session(stats, items),
    ]
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        states = ", ".join(f"{k} {v}" for k, v in sorted(e["by_state"].items()))
        lines.append(f"{name:<15} {e['total']} rows" + (f" ({states})" if states else ""))
        for reason, n in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n}")
    if t.get("ledger"):
        lines += ledger_lines(t["ledger"])
        for rule, n in sorted(t["ledger"]["dropped"].items()):
            lines.append(f"  dropped {rule:<20} {n}")
    this_run = {k.split("/", 1)[1]: v for k, v in stats.items() if k.startswith("errors/")}
    if this_run:
        lines.append("errors this run (by stage/reason, before retries from the error tables)")
        for reason, n in sorted(this_run.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n}")
    return "\n".join(lines) + "\n"

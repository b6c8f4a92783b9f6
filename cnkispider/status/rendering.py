"""Rendering the status report: the plain dict of :mod:`cnkispider.status.collecting` in, the
text of ``cnkispider status`` (or its JSON) out, and the summary printed when a run ends.

Pure: no database, no Redis, no clock; every age and time is in the report already.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import unicodedata

from cnkispider.items import DEFAULT_DEPTH
from cnkispider.status.following import clock as _clock
from cnkispider.status.following import counts_line, follow_line, lag_line, tiers_line
from cnkispider.words import i18n
from cnkispider.words.i18n import N_, _, ngettext
from cnkispider.words.vocabulary import halt_reason, ledger_note, word
from tasks.categories import round_label

BAR_WIDTH = 30

# Scrapy records a finish reason when the spider closes; a second Ctrl-C stops the reactor first
FORCED_STOP = N_("forced stop (a second Ctrl-C; its rounds are taken over when their leases end)")


def _pad(text: str, width: int) -> str:
    """``text`` padded to ``width`` columns as a terminal shows it (a Chinese character takes
    two), so the labels of a Chinese status line up as the English ones do."""
    shown = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(width - shown, 1)


def _label(text: str) -> str:
    return "  " + _pad(text, 11)


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
        idle = redis_info["error"]  # EMBEDDED_IDLE, a marked word (a name, not a call: extracted)
        redis_text = _("%(url)s: %(error)s; queue unknown") % {
            "url": redis_info["url"],
            "error": _(idle),
        }
    else:
        redis_text = _("%(url)s UNREACHABLE: %(error)s") % {
            "url": redis_info["url"],
            "error": redis_info["error"],
        }
    lines = [
        _("cnkispider status at %(when)s (database clock, UTC)")
        % {"when": _clock(report["generated_at"])},
        _pad(_("database"), 9) + report["database"],
        _pad("Redis", 9) + redis_text,
    ]
    lines += window_lines(report.get("windows"))
    if not report["tasks"]:
        lines += ["", _("no tasks yet: `cnkispider run` registers the task of config.ini")]
    for entry in report["tasks"]:
        lines.append("")
        lines += _render_task(entry, report)
    return "\n".join(lines) + "\n"


def rounds_line(t: dict) -> str:
    """The task's rounds in words: done of all, the failed ones apart (a failed round stored
    nothing: it is never "finished"), the ones in flight."""
    r = t["rounds"]
    text = _("%(done)s of %(total)s done") % {
        "done": i18n.number(r["done"]),
        "total": i18n.number(r["total"]),
    }
    if r["failed"]:
        text += i18n.mark("clause") + _("%(n)s failed") % {"n": i18n.number(r["failed"])}
    return text + i18n.mark("clause") + _("%(n)s in flight") % {"n": i18n.number(r["in_flight"])}


def eta_words(t: dict) -> str:
    """The task's ETA, or why it has none, as every view says it."""
    r = t["rounds"]
    if r["remaining"] == 0:
        if t["end_date"]:
            return _("ETA -: nothing left")
        return _("ETA -: nothing left until tomorrow")
    if t["activity"] in ("halted", "paused"):
        return _("no ETA: %(state)s") % {"state": word(t["activity"])}
    if t["activity"] != "running":
        if t["activity"] == "no live worker":
            return _("no ETA: no worker is alive") + _(" (start one: `{command}`)").format(
                command=run_command(t["name"])
            )
        return _("no ETA: no worker is alive")
    if t["rate"]["rounds_per_hour"] and t["eta_seconds"] is not None:
        return _("ETA %(left)s (%(when)s UTC)") % {
            "left": i18n.duration(t["eta_seconds"]),
            "when": _clock(t["eta_at"]),
        }
    return _("ETA unknown until a round is done")


def skipped_words(t: dict) -> str:
    """The days the operator skipped, by command: "1 day skipped by move (2024-03-01)"."""
    skipped = t.get("skipped") or {}
    parts = [
        ngettext("%(n)d day skipped by %(command)s", "%(n)d days skipped by %(command)s", n)
        % {"n": n, "command": command}
        for command, n in sorted(skipped.get("by", {}).items())
    ]
    days = skipped.get("days") or []
    shown = i18n.mark("list").join(days[:5]) + (i18n.mark("list") + "…" if len(days) > 5 else "")
    return _("%(skipped)s (%(days)s)") % {
        "skipped": i18n.mark("semicolon").join(parts),
        "days": shown,
    }


def skipped_days_line(t: dict) -> str | None:
    """Every day of the task skipped and why, for the run's closing lines ("skipped days
    2024-03-01 (by move), 2024-02-30 (not a date)"): a day a hand-edited ``task_skip`` row holds
    that is no date is said so, never dropped. None when no day is skipped."""
    skipped = t.get("skipped") or {}
    days = skipped.get("days") or []
    if not days:
        return None
    commands = skipped.get("command") or {}
    said = []
    for day in days:
        try:
            dt.date.fromisoformat(day)
        except (TypeError, ValueError):
            why = _("not a date")
        else:
            why = _("by %(command)s") % {"command": commands.get(day) or "move"}
        said.append(_("%(day)s (%(why)s)") % {"day": day, "why": why})
    return _pad(_("skipped days"), 16) + i18n.mark("list").join(said)


def activity_words(t: dict) -> str:
    """What the task is doing, in the reader's words; a finished task with days its operator
    skipped says so ("finished, 1 day skipped by move"): never "finished" alone for a day
    never crawled."""
    if t["activity"] == "finished" and (t.get("skipped") or {}).get("days"):
        return _("%(state)s, %(skipped)s") % {
            "state": word("finished"),
            "skipped": skipped_words(t),
        }
    return word(t["activity"])


def _render_task(t: dict, report: dict) -> list[str]:
    head = _("task %(id)s %(name)r") % {"id": t["id"], "name": t["name"]}
    if not t["ok"]:
        lines = [
            _("%(task)s: BAD ROW, skipped by workers: %(problem)s")
            % {"task": head, "problem": t["problem"]}
        ]
    else:
        end = t["end_date"] or _("(today: %(day)s)") % {"day": t["until"]}
        lines = [
            f"{head}  {word(t['type'])}  {t['start_date']} .. {end}  "
            + _("depth %(depth)s") % {"depth": word(t.get("depth") or DEFAULT_DEPTH)}
            + "  "
            + _("phase %(phase)s") % {"phase": word(t["phase"])}
            + f"  [{activity_words(t)}]"
        ]
        if t.get("skipped", {}).get("days") and t["activity"] != "finished":
            lines.append("  " + skipped_words(t))
        if t.get("query"):
            lines.append(f"  {_('query')} {t['query']}")
    if t.get("halted"):
        if t["activity"] == "paused":
            what = word("paused")
        else:
            what = _("halted: %(reason)s") % {"reason": halt_reason(t["halted"])}
        lines.append(
            "  "
            + what
            + "  "
            + _("(since %(when)s UTC; `cnkispider task resume %(name)s` goes on)")
            % {"when": _clock(t["halted_at"]), "name": t["name"]}
        )
    if t.get("follow"):
        lines.append("  " + follow_line(t["follow"]))
        if t["follow"].get("tiers"):
            lines.append("  " + tiers_line(t["follow"]))
        if t["follow"].get("entry_lag"):
            lines.append("  " + lag_line(t["follow"]["entry_lag"]))
        if t["follow"].get("last_counts_refresh"):
            lines.append("  " + counts_line(t["follow"]))
    waiting = t.get("waiting")  # WAITING_MESSAGE, a marked word
    if waiting:
        lines.append("  " + _("waiting: %(what)s") % {"what": _(waiting)})
    r = t["rounds"]
    cursor = t["cursor"]
    lines.append(
        _label(_("cursor"))
        + f"{cursor['date'] or '-'} {word(round_label(cursor['category']))}   "
        + _("last heartbeat %(ago)s") % {"ago": i18n.ago(t["last_heartbeat_age_seconds"])}
    )
    if r["total"] is not None:
        lines.append(
            _label(_("rounds")) + f"{_bar(t['progress'])} {i18n.percent(t['progress']):>6}  "
            f"{rounds_line(t)}"
        )
        lines.append(
            _label(_("rate"))
            + _per_hour(t["rate"]["rounds_per_hour"])
            + i18n.mark("semicolon")
            + eta_words(t)
        )
    else:
        states = i18n.mark("list").join(
            f"{word(k)} {i18n.number(v)}" for k, v in sorted(r["by_state"].items())
        )
        lines.append(_label(_("rounds")) + (states or _("none")))
    current = i18n.mark("list").join(
        f"{c['day']} {word(round_label(c['category']))}" for c in t["current_rounds"][:6]
    )
    if len(t["current_rounds"]) > 6:
        current += ", ... " + _("(%(n)s in all)") % {"n": len(t["current_rounds"])}
    lines.append(_label(_("now")) + (current or "-"))
    lines.append(_label(_("documents")) + i18n.number(t["documents"]))
    if t.get("ledger"):
        lines += [f"  {line}" for line in ledger_lines(t["ledger"])]
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        if not e["total"]:
            lines.append(_label(name) + "0")
            continue
        states = i18n.mark("list").join(
            f"{word(k)} {i18n.number(v)}" for k, v in sorted(e["by_state"].items())
        )
        reasons = i18n.mark("list").join(
            f"{k} {i18n.number(v)}"
            for k, v in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        )
        lines.append(
            _label(name)
            + _("%(total)s (%(states)s); by reason: %(reasons)s")
            % {"total": i18n.number(e["total"]), "states": states, "reasons": reasons}
        )
    queue = t.get("queue")
    if queue is not None:
        lines.append(
            _label(_("queue"))
            + _("%(queued)s queued, %(leased)s leased")
            % {"queued": i18n.number(queue["queued"]), "leased": i18n.number(queue["leased"])}
        )
    elif report["redis"].get("state") == "idle":
        lines.append(_label(_("queue")) + _("unknown (the embedded Redis is not running)"))
    else:
        lines.append(_label(_("queue")) + _("? (Redis unreachable)"))
    c = t["worker_counts"]
    pages = sum(_rate(w) or 0 for w in t["workers"] if w["state"] == "alive")
    lines.append(
        _label(_("workers"))
        + _("%(alive)s alive, %(gone)s gone, %(stopped)s stopped")
        % {"alive": c["alive"], "gone": c["gone"], "stopped": c["stopped"]}
        + (
            i18n.mark("semicolon")
            + _("%(pages)s pages/min together") % {"pages": i18n.number(pages)}
            if c["alive"]
            else ""
        )
    )
    if t["workers"]:
        lines.append(
            "    "
            + _pad(_("HOST"), 21)
            + _pad(_("PID"), 9)
            + _pad(_("STATE"), 8)
            + _pad(_("LAST SEEN"), 14)
            + _pad(_("PAGES/MIN"), 10)
            + _pad(_("PAGES"), 9)
            + _pad(_("ITEMS"), 9)
            + _pad(_("ERRORS"), 8)
            + _("ROUNDS")
        )
        for w in t["workers"]:
            rate = _rate(w)
            lines.append(
                "    "
                + _pad(w["host"][:20], 21)
                + _pad(str(w["pid"]), 9)
                + _pad(word(w["state"]), 8)
                + _pad(i18n.ago(w["last_seen_age_seconds"]), 14)
                + _pad(i18n.number(rate, 1), 10)
                + _pad(i18n.number(w["pages"]), 9)
                + _pad(i18n.number(w["items"]), 9)
                + _pad(i18n.number(w["errors"]), 8)
                + (", ".join(w["rounds"]) or "-")
            )
        sizes = sorted({w["export_batch"] for w in t["workers"] if w.get("export_batch")})
        if sizes:  # export depth: the batch size learned from CNKI's answers (docs/DEPTH.md)
            lines.append(
                "    "
                + _("export batch size reached: %(sizes)s ids a request")
                % {"sizes": ", ".join(map(str, sizes))}
            )
    return lines


def _rate(w: dict) -> float | None:
    recent = w.get("recent_pages_per_minute")
    return recent if recent is not None else w["pages_per_minute"]


def _bar(fraction: float) -> str:
    # ASCII: a Chinese Windows console (GBK) or a log file shows it as well as a terminal does.
    filled = int(round(max(0.0, min(fraction, 1.0)) * BAR_WIDTH))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


def _per_verified_session(stats: dict, items: int) -> list[str]:
    """What a person's pass bought this run (issue 19): documents per verified session and CNKI
    requests per stored document (every request this worker sent: list, detail, client id)."""
    used = stats.get("session/verified/used", 0)
    if not used:
        return []
    requests = stats.get("downloader/request_count", 0)
    return [
        _pad(_("verified"), 16)
        + _(
            "%(used)s sessions used; %(per_session)s documents per verified session; "
            "%(per_doc)s CNKI requests per stored document"
        )
        % {
            "used": used,
            "per_session": i18n.number(items / used),
            "per_doc": i18n.number(requests / items, 2) if items else "-",
        }
    ]


def _too_many(stats: dict) -> list[str]:
    """The run's 429s ("come back later"), and how they were honoured."""
    answers = stats.get("ratelimit/window/429", 0)
    if not answers:
        return []
    return [
        _pad("429", 16)
        + ngettext(
            "CNKI said to come back later %(n)d time; %(held)d waits held, %(again)d sent again "
            "with no retry spent",
            "CNKI said to come back later %(n)d times; %(held)d waits held, %(again)d sent again "
            "with no retry spent",
            answers,
        )
        % {
            "n": answers,
            "held": stats.get("ratelimit/window/held", 0),
            "again": stats.get("retry/window", 0),
        }
    ]


def ledger_lines(ledger: dict) -> list[str]:
    """The task's ledger sums (``ledger  listed N = stored + in errorLink + dropped + beyond``)
    and its rounds out of balance, one line each (the first few)."""
    n = i18n.number
    drops = ", ".join(f"{rule} {n(count)}" for rule, count in sorted(ledger["dropped"].items()))
    lines = [
        _pad(_("ledger"), 11)
        + _(
            "listed %(listed)s = stored %(stored)s + in errorLink %(in_error)s + dropped "
            "%(dropped)s%(drops)s + beyond %(beyond)s (%(rounds)s rounds closed)"
        )
        % {
            "listed": n(ledger["listed"]),
            "stored": n(ledger["stored"]),
            "in_error": n(ledger["in_error"]),
            "dropped": n(sum(ledger["dropped"].values())),
            "drops": f" ({drops})" if drops else "",
            "beyond": n(ledger["beyond"]),
            "rounds": n(ledger["rounds"]),
        }
    ]
    if ledger["unbalanced"]:
        lines.append(" " * 11 + _("%(n)s rounds out of balance:") % {"n": n(ledger["unbalanced"])})
        for r in ledger["out_of_balance"][:5]:
            lines.append(
                " " * 13
                + _("round %(id)s %(day)s %(category)s: %(note)s")
                % {
                    "id": r["id"],
                    "day": r["day"],
                    "category": word(round_label(r["category"])),
                    "note": ledger_note(r["note"]),
                }
            )
    return lines


def _per_hour(rate: float | None) -> str:
    """The task's round rate, in every view's words (``round_rate_eta`` defines it)."""
    return _("%(rate)s rounds/h") % {"rate": i18n.number(rate, 1) if rate else "-"}


def window_lines(windows: dict | None) -> list[str]:
    """CNKI's "come back later": each window closed now, and the 429s counted."""
    if not windows or not (windows["answers"] or windows["closed"]):
        return []
    lines = [
        ngettext(
            "429      CNKI said to come back later %(n)d time (kept an hour after each window)",
            "429      CNKI said to come back later %(n)d times (kept an hour after each window)",
            windows["answers"],
        )
        % {"n": windows["answers"]}
    ]
    for w in windows["closed"]:
        what = _("address") if w["what"] == "ip" else _("session")
        lines.append(
            "  "
            + _("%(what)s %(name)s at %(site)s closed for %(left)s more (%(strikes)d in a row)")
            % {
                "what": what,
                "name": w["name"],
                "site": w["site"],
                "left": i18n.duration(w["seconds_left"]),
                "strikes": w["strikes"],
            }
        )
    return lines


def to_json(report: dict) -> str:
    return json.dumps(report, ensure_ascii=False, indent=2) + "\n"


def _plan_beside_taken(stats: dict) -> list[str]:
    """The plan made when the run started (``task plan``'s figures for the days then left, at
    the task's depth) beside the requests this worker sent and the days still left: the
    person's side as planned and as it went (issue 40). Nothing when no plan could be made (no
    census total seen yet)."""
    plan = stats.get("plan/at_start") or {}
    figures = (plan.get("depths") or {}).get(plan.get("depth") or "")
    if not figures:
        return []
    sent = stats.get("downloader/request_count", 0)
    planned = figures["requests"]
    return [
        _pad(_("plan"), 16)
        + _(
            "%(planned)s requests at %(depth)s depth for the %(days)s days left at the start; "
            "this worker sent %(sent)s (%(share)s of the plan), %(left)s days left"
        )
        % {
            "planned": i18n.number(planned),
            "depth": word(plan["depth"]),
            "days": i18n.number(plan["days"]),
            "sent": i18n.number(sent),
            "share": i18n.percent(sent / planned if planned else None, 0),
            "left": i18n.number(stats.get("plan/days_left_at_end", plan["days"])),
        }
    ]


def render_summary(t: dict, stats: dict) -> str:
    """The summary printed when a run ends, from the task's entry of the report and the run's
    Scrapy stats (plus ``elapsed_seconds``): rounds, documents, errors by reason, time and rates."""
    n = i18n.number
    elapsed = float(stats.get("elapsed_seconds") or 0.0)
    pages = stats.get("response_received_count", 0)
    items = stats.get("item_scraped_count", 0)
    done_here = stats.get("rounds/done", 0)
    minutes = elapsed / 60 if elapsed else 0
    r = t["rounds"]
    rounds = (
        rounds_line(t) if r["total"] is not None else _("%(done)s done") % {"done": n(r["done"])}
    )
    lines = [
        "",
        "== "
        + _("cnkispider summary: task %(name)r (%(type)s), phase %(phase)s")
        % {"name": t["name"], "type": word(t["type"]), "phase": word(t["phase"])}
        + " ==",
        _pad(_("finish reason"), 16)
        + (word(stats["finish_reason"]) if stats.get("finish_reason") else _(FORCED_STOP)),
        *([_pad(_("halted"), 16) + halt_reason(t["halted"])] if t.get("halted") else []),
        _pad(_("rounds"), 16)
        + rounds
        + i18n.mark("semicolon")
        + _("%(n)s completed by this worker") % {"n": n(done_here)},
        _pad(_("documents"), 16)
        + _("%(documents)s stored for this task (%(items)s this run)")
        % {"documents": n(t["documents"]), "items": n(items)},
        _pad(_("time"), 16)
        + i18n.duration(elapsed)
        + i18n.mark("open")
        + f"{n(elapsed, 1)} s"
        + i18n.mark("close"),
        _pad(_("rate"), 16)
        + _(
            "%(pages)s pages/s, %(items)s items/min (this worker); %(rounds)s (the task's, "
            "as status shows it)"
        )
        % {
            "pages": n(pages / elapsed if elapsed else 0, 1),
            "items": n(items / minutes if minutes else 0),
            "rounds": _per_hour(t["rate"]["rounds_per_hour"]),
        },
        *_per_verified_session(stats, items),
        *_too_many(stats),
        *_plan_beside_taken(stats),
        *filter(None, [skipped_days_line(t)]),
    ]
    for name in ("errorCode", "errorLink"):
        e = t["errors"][name]
        states = i18n.mark("list").join(
            f"{word(k)} {n(v)}" for k, v in sorted(e["by_state"].items())
        )
        lines.append(
            _pad(name, 16)
            + _("%(n)s rows") % {"n": n(e["total"])}
            + (i18n.mark("open") + states + i18n.mark("close") if states else "")
        )
        for reason, count in sorted(e["by_reason"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n(count)}")
    if t.get("ledger"):
        lines += ledger_lines(t["ledger"])
        for rule, count in sorted(t["ledger"]["dropped"].items()):
            lines.append("  " + _pad(_("dropped %(rule)s") % {"rule": rule}, 28) + n(count))
    this_run = {k.split("/", 1)[1]: v for k, v in stats.items() if k.startswith("errors/")}
    if this_run:
        lines.append(_("errors this run (by stage/reason, before retries from the error tables)"))
        for reason, count in sorted(this_run.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason:<28} {n(count)}")
    return "\n".join(lines) + "\n"

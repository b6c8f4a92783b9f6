"""A task of the status report in the page's words: its state (paused, halted and why, waiting
for a person, or its activity), its rounds done of how many with the failed ones apart, and the
banners of what needs a person. The templates call :func:`state_of` and :func:`rounds_done`;
the pages put :func:`banners` on top.
"""

from __future__ import annotations

from cnkispider.status.rendering import activity_words, run_command
from cnkispider.words import i18n
from cnkispider.words.i18n import _
from cnkispider.words.vocabulary import halt_reason, word
from tasks.phase import Phase


def state_of(t: dict) -> str:
    """A task's state in the reader's words (a halt's reason is the breaker's own text)."""
    if t["halted"]:
        if t["halted"].startswith("paused"):
            return word("paused")
        return _("halted: %(reason)s") % {"reason": halt_reason(t["halted"])}
    if t.get("waiting"):
        return word("waiting for a person")
    return activity_words(t)  # "finished, 1 day skipped by move" (issue 47)


def rounds_done(t: dict) -> str:
    """The task's rounds done, of how many, and its failed ones apart: a failed round stored
    nothing and is never counted as done ("0 of 7 done, 6 failed", never "6 of 7 finished")."""
    r = t["rounds"]
    if r["total"] is None:
        text = i18n.number(r["done"])
    else:
        text = _("%(done)s of %(total)s (%(percent)s)") % {
            "done": i18n.number(r["done"]),
            "total": i18n.number(r["total"]),
            "percent": i18n.percent(t["progress"] or 0),
        }
    if r["failed"]:
        text += ", " + _("%(n)s failed") % {"n": i18n.number(r["failed"])}
    return text


def banners(report: dict) -> list[dict]:
    """What needs a person: a halt, CNKI's check, a task with work and no live worker."""
    out = []
    for t in report["tasks"]:
        if t["halted"]:
            out.append({"task": t["name"], "kind": "halted", "text": state_of(t)})
        if t.get("waiting"):
            out.append(
                {
                    "task": t["name"],
                    "kind": "person",
                    "text": _("CNKI wants a person to pass its check"),
                }
            )
        has_work = (
            t["phase"] != Phase.DONE and (t["rounds"]["remaining"] or 0) + t["rounds"]["in_flight"]
        )
        if t["activity"] == "no live worker" and has_work and not t["halted"]:
            out.append(
                {
                    "task": t["name"],
                    "kind": "idle",
                    "text": _("has work but no live worker"),
                    "command": run_command(t["name"]),  # this task's worker, not config.ini's
                }
            )
    return out

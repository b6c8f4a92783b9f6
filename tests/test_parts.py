"""Walk only what grew (issue 46.2): a look recounts a split day's parts with one group/result.

The pieces on the round rows (which rounds a look re-opens with ``facets``, how a recount
decides each part), then real looks on the stand-in with late arrivals: a look equals the truth
with facets on and off, sends one group/result per split day and no list request for a part
whose count did not change (the site's own /_stats, against the count the truth predicts), and
falls back to each part's first page when group/result is refused or answered oddly."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter

import pytest
import sqlalchemy as sa

from cnkispider.clock import cnki_today
from cnkispider.store.db import open_database
from cnkispider.store.schema import round_
from tasks.categories import DAY
from tasks.flow import TaskStore
from tasks.parts import facet_codes
from tasks.roundstate import CATEGORIES_NOTE
from tests.fixtures.crawl_harness import compare, depth_fields
from tests.fixtures.crawls import IPC
from tests.fixtures.gate import REJECTION_PAGE, RefusingGate

TODAY = cnki_today()

# -- the pieces -------------------------------------------------------------------------------


def _split_day(engine, task_id: int, day: str, totals: dict[str, int]) -> dict[str, int]:
    """The rows of a day split by its categories, done: its census (total 0) and its parts."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=1)
    ids = {}
    with engine.begin() as conn:
        for code, total in {DAY: 0, **totals}.items():
            ids[code] = conn.execute(
                round_.insert().values(
                    task_id=task_id,
                    day=day,
                    category=code,
                    state="done",
                    total=total,
                    note=f"{CATEGORIES_NOTE}: census 99" if code == DAY else None,
                    attempts=1,
                    created_at=now,
                    updated_at=now,
                )
            ).inserted_primary_key[0]
    return ids


def _rows(engine, ids: dict[str, int]) -> dict[str, tuple]:
    with engine.connect() as conn:
        got = conn.execute(
            sa.select(round_.c.id, round_.c.state, round_.c.look, round_.c.listed_before).where(
                round_.c.id.in_(list(ids.values()))
            )
        ).all()
    by_id = {r.id: (r.state, r.look, r.listed_before) for r in got}
    return {code: by_id[rid] for code, rid in ids.items()}


def test_a_look_with_facets_holds_a_split_day_s_parts_for_their_recount(db_url):
    """With facets a look re-opens a split day's census alone (its parts stay done, held);
    the recount leaves a part whose count equals its total done, counted by the look, and
    re-opens the others (a changed count, a code the facet does not count, one it leaves out
    though the part listed rows); without counts every part is re-opened. Without facets
    the look re-opens every round of the day, as before."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    start = TODAY - dt.timedelta(days=1)
    current, _ = store.register("parts", "patent", start.isoformat(), "", "G,H,A,B06", follow=True)
    day = start.isoformat()
    with engine.begin() as conn:  # the cursor at today: the crawl is done
        conn.execute(
            sa.text("UPDATE task SET cur_date = :d, cur_code = '*' WHERE id = :i"),
            {"d": TODAY.isoformat(), "i": current.id},
        )
    ids = _split_day(engine, current.id, day, {"G": 7, "H": 5, "A": 3, "B06": 2})
    look = store.claim_look(current.id, 5, 60, store.database_now(), facets=True)
    assert look is not None and look.reopened == 1
    rows = _rows(engine, ids)
    assert rows[DAY] == ("claimed", look.number, 0)
    assert all(rows[c][0] == "done" and rows[c][1] is None for c in ("G", "H", "A", "B06"))
    parts = {p.code: p.total for p in store.look_parts(ids[DAY])}
    assert parts == {"G": 7, "H": 5, "A": 3, "B06": 2}
    assert "B06" not in facet_codes("patent") and {"G", "H", "A"} <= facet_codes("patent")
    # G unchanged; H grew; A left out by the facet though it listed 3; B06 not a facet value
    same, other = store.recount_parts(ids[DAY], {"G": 7, "H": 6, "B06": 2}, facet_codes("patent"))
    assert (same, other) == (1, 3)
    rows = _rows(engine, ids)
    assert rows["G"] == ("done", look.number, 7)
    assert {rows[c] for c in ("H", "A", "B06")} == {("claimed", look.number, 5)} | {
        ("claimed", look.number, 3),
        ("claimed", look.number, 2),
    }
    assert [p.code for p in store.look_parts(ids[DAY])] == ["G"]  # still held
    # no counts (refused, odd): every part still held is re-opened
    assert store.recount_parts(ids[DAY], None) == (0, 1)
    assert _rows(engine, ids)["G"] == ("claimed", look.number, 7)

    # facets off: a look re-opens the day whole
    day2 = TODAY.isoformat()
    ids2 = _split_day(engine, current.id, day2, {"G": 4, "H": 1})
    with engine.begin() as conn:  # the first look's rounds done; the next look due
        conn.execute(round_.update().where(round_.c.day == day).values(state="done"))
        conn.execute(sa.text("UPDATE task SET look_at = NULL WHERE id = :i"), {"i": current.id})
    look2 = store.claim_look(current.id, 5, 60, store.database_now(), facets=False)
    assert look2 is not None
    assert {r[0] for r in _rows(engine, ids2).values()} == {"claimed"}
    engine.dispose()


def _lapse(engine, round_id: int) -> None:
    """The census's holder stops renewing its lease: any worker may take it over."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE round SET lease_until = :t WHERE id = :i"),
            {"t": dt.datetime(2000, 1, 1), "i": round_id},
        )


def _note(engine, round_id: int) -> str | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(round_.c.note).where(round_.c.id == round_id)).scalar()


def test_a_late_recount_of_an_earlier_seeding_moves_nothing(db_url):
    """A look's census seeded by worker 1, whose group/result answer is handled late (its
    handler retried through a database outage); meanwhile worker 2 took the census over, seeded
    it again and its answer decided the parts. The late answer of the first seeding, with its
    older counts, moves no part (G would have been re-opened by them) and leaves the census's
    note to the seeding that owns it, while the census is in flight, and again after it closed
    and the next look re-opened it. Its holder's own answer, handled before the census is
    marked seeded, is decided (the token is written before the request leaves)."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    start = TODAY - dt.timedelta(days=1)
    current, _ = store.register("late", "patent", start.isoformat(), "", "G,H", follow=True)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE task SET cur_date = :d, cur_code = '*' WHERE id = :i"),
            {"d": TODAY.isoformat(), "i": current.id},
        )
    ids = _split_day(engine, current.id, start.isoformat(), {"G": 7, "H": 5})
    counted = facet_codes("patent")
    look = store.claim_look(current.id, 5, 60, store.database_now(), facets=True)
    assert look is not None and look.reopened == 1
    first = store.claim(current.id, "worker-1", "epoch")
    assert first is not None and first.id == ids[DAY]
    assert store.bind_seeding(first.id, "worker-1", "seeding-1")
    assert store.bind_seeding(first.id, "worker-1", "seeding-1")  # run again: still its own

    # worker 1's lease lapses before its answer is handled: worker 2 takes the census over
    _lapse(engine, first.id)
    second = store.claim(current.id, "worker-2", "epoch")
    assert second is not None and second.id == first.id
    assert not store.bind_seeding(first.id, "worker-1", "seeding-1b")  # no longer its claim
    assert store.bind_seeding(first.id, "worker-2", "seeding-2")
    # worker 2's own answer, handled before it marks the census seeded: decided
    assert store.recount_parts(
        first.id, {"G": 7, "H": 6}, counted, seeding="seeding-2", note="by seeding 2"
    ) == (1, 1)
    assert store.mark_seeded(first.id, "worker-2", "epoch", "seeding-2")
    after = _rows(engine, ids)
    assert after["G"] == ("done", look.number, 7) and after["H"][0] == "claimed"

    # the first seeding's late answer (G 8: it would re-open G): nothing moves
    late = {"G": 8, "H": 5}
    assert store.recount_parts(first.id, late, counted, seeding="seeding-1", note="x") is None
    assert _rows(engine, ids) == after
    assert _note(engine, first.id) == "by seeding 2"
    assert store.recount_parts(first.id, None, seeding="seeding-1", note="x") is None
    assert _rows(engine, ids) == after

    # the day closes; the next look re-opens its census; the old answer comes later still
    yesterday = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=1)
    with engine.begin() as conn:
        conn.execute(
            round_.update()
            .where(round_.c.id.in_(list(ids.values())))
            .values(state="done", updated_at=yesterday)
        )
        conn.execute(sa.text("UPDATE task SET look_at = NULL WHERE id = :i"), {"i": current.id})
    look2 = store.claim_look(current.id, 5, 60, store.database_now(), facets=True)
    assert look2 is not None and look2.number > look.number
    held = _rows(engine, ids)
    assert held[DAY][0] == "claimed" and held["G"][0] == held["H"][0] == "done"
    assert store.recount_parts(first.id, late, counted, seeding="seeding-1", note="x") is None
    assert store.recount_parts(first.id, late, counted, seeding="seeding-2", note="x") is None
    assert _rows(engine, ids) == held
    engine.dispose()


def test_a_late_split_of_an_earlier_seeding_splits_nothing(db_url):
    """A census over the cap seeded by worker 1 (its split answer handled late), taken over by
    worker 2 before the answer came: worker 1's answer, whose counts may be older, neither
    closes the census as split nor closes a root as an empty part; worker 2's does, once (run
    again, it changes nothing); and the first seeding's answer after that still does nothing."""
    engine = open_database(db_url)
    store = TaskStore(engine, day_census=True)
    day = (TODAY - dt.timedelta(days=3)).isoformat()
    current, _ = store.register("split", "patent", day, day, "A,B,C,D,E,F,G,H")
    census = store.claim(current.id, "worker-1", "epoch")
    assert census is not None and census.category == DAY
    assert store.bind_seeding(census.id, "worker-1", "seeding-1")
    _lapse(engine, census.id)
    assert store.claim(current.id, "worker-2", "epoch").id == census.id
    assert store.bind_seeding(census.id, "worker-2", "seeding-2")

    def day_rows():
        with engine.connect() as conn:
            return {
                r.category: (r.state, r.total, r.note)
                for r in conn.execute(
                    sa.select(round_.c.category, round_.c.state, round_.c.total, round_.c.note)
                )
            }

    before = day_rows()
    assert not store.split_day(census.id, 700, ["C", "D", "E"], seeding="seeding-1")
    assert day_rows() == before  # nothing split, no empty part
    assert store.split_day(census.id, 700, ["D"], seeding="seeding-2")
    after = day_rows()
    assert after["*"] == ("claimed", 0, "categories: census 700: split by group/result")
    assert after["D"] == ("done", 0, "empty part") and set(after) == {"*", "D"}
    assert store.split_day(census.id, 700, ["D"], seeding="seeding-2")  # again: the same
    assert not store.split_day(census.id, 690, ["C", "D", "E"], seeding="seeding-1")
    assert day_rows() == after
    engine.dispose()


def test_facet_counts_in_config_ini(tmp_path):
    from cnkispider.config import load_config
    from cnkispider.exceptions import ConfigError

    path = tmp_path / "config.ini"
    path.write_text("[task]\nname = t\ntype = patent\n", encoding="utf-8")
    assert load_config(path, environ={}).task.facet_counts is True
    path.write_text("[task]\nname = t\ntype = patent\nfacet_counts = off\n", encoding="utf-8")
    assert load_config(path, environ={}).task.facet_counts is False
    path.write_text("[task]\nname = t\ntype = patent\nfacet_counts = sometimes\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert str(path) in str(raised.value) and "[task] facet_counts" in str(raised.value)


# -- looks on the stand-in --------------------------------------------------------------------

START = TODAY - dt.timedelta(days=14)
AS_OF = TODAY - dt.timedelta(days=4)
#: the task's categories: not the whole IPC tree, so a day's census searches them OR'd and a
#: day over the cap is split into a round per category (its parts)
CATS = ["A", "B", "C", "D", "F", "G", "H"]
#: ~20 patents a day of those categories when all are in, entered late
SITE = {"seed": 5, "scale": 0.005, "late_arrivals": True, "as_of": AS_OF.isoformat()}
FOLLOW = {"follow": "on", "look_back_days": 15, "follow_every": "0", "look_tiers": "off"}
PAGE = 10


def _parts(site, as_of: dt.date, cats=CATS) -> dict[str, Counter]:
    """The truth as of ``as_of``: each day's documents by category (a patent's codes stay
    under one top-level class on the stand-in)."""
    site.control(as_of=as_of.isoformat())
    rows = site.truth("patent", START.isoformat(), TODAY.isoformat(), cats)
    per: dict[str, Counter] = {}
    for r in rows:
        per.setdefault(str(r["date"])[:10], Counter())[r["main_ipc"][0]] += 1
    return per


def _plan(site, cats=CATS) -> tuple[int, dict, dict]:
    """The cap (pages of 10) that keeps every part within it as of today, and the parts as of
    the first crawl and as of the look."""
    before, after = _parts(site, AS_OF, cats), _parts(site, TODAY, cats)
    biggest = max(n for day in after.values() for n in day.values())
    cap = PAGE * max(2, math.ceil(biggest / PAGE))
    return cap, before, after


def _expected(cap: int, before: dict, after: dict, facets: bool, cats=CATS) -> dict[str, int]:
    """What the look sends, by the truth: a day split at the first crawl costs one group/result
    and a first page per part whose count changed (facets), or its census and every part (no
    facets); any other day its census, and its parts when it grew over the cap since."""
    days = [(START + dt.timedelta(days=n)).isoformat() for n in range((TODAY - START).days + 1)]
    group = first = unchanged = 0
    for day in days:
        was, now = before.get(day, Counter()), after.get(day, Counter())
        if sum(was.values()) > cap:
            changed = sum(1 for c in cats if was[c] != now[c])
            unchanged += len(cats) - changed
            if facets:
                group, first = group + 1, first + changed
            else:
                first += 1 + len(cats)
        else:
            first += 1 + (len(cats) if sum(now.values()) > cap else 0)
    return {"group": group, "first": first, "unchanged": unchanged}


def _setup(crawl_setup, site, cap: int, facets: str, name: str, cats=CATS):
    setup = crawl_setup(
        "patent",
        ",".join(cats),
        "sqlite",
        START.isoformat(),
        "",
        site=site,
        day_census="on",
        depth="list",
        cnki={"page_size": PAGE, "max_pages": cap // PAGE},
        task_keys={**FOLLOW, "facet_counts": facets},
    )
    setup.db_url = f"sqlite:///{setup.tmp_path / f'{name}.db'}"
    return setup


def _look(setup, site, cats=CATS, look_keys=None) -> dict:
    """The first crawl as of AS_OF, then a look as of today (``look_keys``: [task] keys changed
    for it): the look's requests by kind."""
    site.control(as_of=AS_OF.isoformat())
    setup.run_ok("run", "--until-idle", timeout=240)
    setup.task_keys.update(look_keys or {})
    site.control(as_of=TODAY.isoformat(), reset_stats=True)
    setup.run_ok("run", "--until-idle", timeout=240)
    stats = site.stats()
    truth = {
        r["filename"]: r
        for r in setup.site.truth("patent", START.isoformat(), TODAY.isoformat(), cats)
    }
    stored = setup.stored()
    assert compare(stored, list(truth.values()), "patent", depth_fields("list", "patent")) == {
        "missing": [],
        "extra": [],
        "differing": {},
    }
    states = {r.state for r in setup.query(sa.select(round_.c.state))}
    assert states == {"done"}, setup.state()
    return {"group": stats["kinds"]["group"], "first": stats["searches"]["first"]}


@pytest.mark.slow  # four crawls in worker subprocesses
def test_a_look_walks_only_the_parts_that_grew_and_equals_the_truth(crawl_setup, cnki_site):
    """The same follow task crawled as of day A then looked at as of today, facets on and
    off: both end equal to the truth; with facets the look sends one group/result per day
    split at the first crawl and a first page only for its parts whose count changed (none
    for an unchanged part); without, the census and every part, as before."""
    site = cnki_site(**SITE)
    cap, before, after = _plan(site)
    on, off = (_expected(cap, before, after, f) for f in (True, False))
    assert on["group"] >= 2 and on["unchanged"] >= 3, (cap, on)  # the test means something
    with_facets = _look(_setup(crawl_setup, site, cap, "on", "on"), site)
    assert with_facets == {"group": on["group"], "first": on["first"]}, (cap, on)
    without = _look(_setup(crawl_setup, site, cap, "off", "off"), site)
    assert without == {"group": 0, "first": off["first"]}, (cap, off)
    assert with_facets["first"] + with_facets["group"] < without["first"]


@pytest.mark.slow  # two crawls in worker subprocesses
def test_a_day_split_by_facets_is_looked_at_as_its_parts_by_a_worker_without_them(
    crawl_setup, cnki_site
):
    """A task of the whole tree crawled with facets (its days over the cap split into their
    root rounds by the counts), then looked at by a worker whose config.ini turns facets off:
    every part is walked from its first page and the census closes as split again, never walked
    inside its round as well (the day once, not twice); equal to the truth."""
    site = cnki_site(**SITE)
    roots = IPC.split(",")
    cap, before, after = _plan(site, roots)
    off = _expected(cap, before, after, False, roots)
    assert sum(1 for day in before.values() if sum(day.values()) > cap) >= 2, cap
    setup = _setup(crawl_setup, site, cap, "on", "mixed", roots)
    got = _look(setup, site, roots, look_keys={"facet_counts": "off"})
    assert got == {"group": 0, "first": off["first"]}, (cap, off, got)
    census = setup.query(sa.select(round_.c.total, round_.c.note).where(round_.c.category == DAY))
    split = [c for c in census if (c.note or "").startswith(CATEGORIES_NOTE)]
    assert len(split) >= 2 and {c.total for c in split} == {0}, census


@pytest.mark.slow  # two crawls in worker subprocesses
@pytest.mark.parametrize(
    "answer,reason",
    [(REJECTION_PAGE, "rejected"), (b'<div class="resultlist"></div>', "")],
    ids=["refused", "odd"],
)
def test_a_refused_or_odd_group_result_falls_back_to_each_part(
    crawl_setup, cnki_site, answer, reason
):
    """group/result refused (CNKI's rejection: it never halts the task) or answered oddly (no
    facet in it): the look walks every part from its first page, ends equal to the truth, and
    says so (an INFO line, a stat), never reading the answer as zero rows."""
    site = cnki_site(**SITE)
    cap, before, after = _plan(site)
    on, off = (_expected(cap, before, after, f) for f in (True, False))
    gate = RefusingGate(site, answer)
    try:
        setup = _setup(crawl_setup, gate, cap, "on", "gate")
        got = _look(setup, site)
    finally:
        gate.close()
    # each split day asked (a refusal at once, an odd answer after its retries), then walked
    # the old way: every part from its first page, the census's page 1 not sent
    assert gate.group_posts >= on["group"] >= 2, (gate.group_posts, on)
    assert got == {"group": 0, "first": off["first"] - on["group"]}, (cap, off, got)
    log = setup.log()
    assert "group/result refused or odd (" + reason in log, log[-3000:]
    assert "'facets/fallback/" + reason in log, log[-3000:]

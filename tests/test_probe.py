"""`cnkispider probe` against the stand-in: PASS on a faithful site, FAIL naming the assumption
on a site that breaks exactly one (the stand-in's ``break_`` modes)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import sys

import pytest

from cnkispider.cnki.protocol import protocol_from_settings
from cnkispider.probe import FAIL, PASS, Probe, category_samples, default_day
from tasks.categories import load_tree
from tests.fixtures import launcher

DAY = dt.date(2024, 1, 10)
CLIENT_ID_PATH = "/RCDService/api/UtilityOpenApi/GenerateClientID"


def make_probe(site, lines, **kw) -> Probe:
    protocol = protocol_from_settings({"CNKI_BASE_URL": site.base_url})
    categories = {
        t: category_samples(load_tree("builtin", t)) for t in ("patent", "paper", "achievement")
    }
    return Probe(
        protocol,
        client_id_url=site.base_url + CLIENT_ID_PATH,
        day=DAY,
        delay=0,
        categories=categories,
        out=lines.append,
        **kw,
    )


def verdicts(probe: Probe) -> dict[str, str]:
    return {c.name: c.verdict for c in probe.checks}


@pytest.mark.slow  # over a second alone: the probe's every check against a stand-in
def test_every_assumption_passes_on_the_stand_in(cnki_site, tmp_path):
    site = cnki_site()
    lines: list[str] = []
    probe = make_probe(site, lines, save_dir=tmp_path / "raw")
    assert probe.run() == 0, "\n".join(lines)
    found = verdicts(probe)
    assert set(found.values()) == {PASS}, "\n".join(lines)
    # every assumption of docs/PROBE.md was checked, for every type
    for name in (
        "session: warm-up",
        "session: Ecp_ClientId",
        "page turn: page 2",
        "detail: link from another session",
        "references: paper",
        "export: GetExport, 2 ids",
        "query: professional search",
        "query: a malformed expression",
    ):
        assert name in found
    for t in ("patent", "paper", "achievement"):
        for prefix in ("search", "date: one day", "category: prefix", "detail"):
            key = f"{prefix}: {t}" if prefix in ("search", "detail") else f"{prefix} ({t})"
            assert key in found, key
    # about 30, plus one export and one reference request, the two query searches, and
    # (issue 46.4) three group/result counts and the update-time try
    assert probe.requests <= 52
    for t in ("patent", "paper", "achievement"):  # group/result adds up to the grid's total
        assert found[f"facet counts: {t}"] == PASS
    update = next(c for c in probe.checks if c.name == "update time: last week (unconfirmed)")
    assert "ignored" in update.evidence, update.evidence  # the stand-in has no such control
    index = json.loads((tmp_path / "raw" / "index.json").read_text(encoding="utf-8"))
    assert len(index) == probe.requests
    first = gzip.decompress((tmp_path / "raw" / index[0]["file"]).read_bytes())
    assert first, "the warm-up page was saved"


@pytest.mark.parametrize(
    "broken, assumption",
    [
        ("client-id", "session: Ecp_ClientId"),
        ("date-filter", "date: one day (paper)"),
        ("category-filter", "category: prefix (paper)"),
        ("turn-token", "page turn: page 2"),
        ("detail-fields", "detail: patent"),
        ("patent-keys", "search: patent"),
        ("references-html", "references: paper"),
        ("expert-ignored", "query: professional search"),
    ],
)
@pytest.mark.slow  # over a second alone: the probe's every check against a stand-in
def test_a_site_that_breaks_one_assumption_fails_that_line(cnki_site, broken, assumption):
    site = cnki_site(break_=[broken])
    lines: list[str] = []
    probe = make_probe(site, lines)
    assert probe.run() == 1
    found = verdicts(probe)
    assert found[assumption] == FAIL, "\n".join(lines)
    failed_line = next(line for line in lines if assumption in line)
    assert failed_line.startswith("FAIL"), failed_line


def test_probe_paces_its_requests():
    """At most one request per delay, measured on an injected clock."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    probe = Probe(
        protocol_from_settings({}), delay=3.0, clock=lambda: now[0], sleep=sleep, out=lambda s: None
    )
    for _ in range(4):
        probe.pace()
        now[0] += 0.5
    assert slept == [2.5, 2.5, 2.5]
    assert probe.requests == 4


def test_default_day_is_a_wednesday_weeks_back():
    day = default_day(dt.date(2026, 11, 23))
    assert day.weekday() == 2
    assert dt.timedelta(days=28) <= dt.date(2026, 11, 23) - day < dt.timedelta(days=35)


@pytest.mark.slow  # a command in a subprocess
def test_probe_command_prints_one_line_per_assumption(cnki_site, tmp_path):
    site = cnki_site()
    config = tmp_path / "config.ini"
    config.write_text(
        f"[cnki]\nbase_url = {site.base_url}\nclient_id_url = {site.base_url}{CLIENT_ID_PATH}\n",
        encoding="utf-8",
    )
    done = launcher.run(
        [
            sys.executable,
            "-m",
            "cnkispider.cli",
            "probe",
            "--config",
            str(config),
            "--day",
            DAY.isoformat(),
            "--delay",
            "0",
            "--save",
            str(tmp_path / "raw"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [
        line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL", "UNKNOWN"))
    ]
    assert len(lines) >= 15 and all(line.startswith("PASS") for line in lines), done.stdout
    assert (tmp_path / "raw" / "index.json").is_file()


@pytest.mark.slow  # over a second alone: the probe's every check against a stand-in
def test_on_a_site_that_checks_for_a_person_the_probe_says_so_and_uses_a_passed_session(cnki_site):
    """The three checks of issue 19: a plain session is checked (PASS: the check is there), a
    detail link opens only in its own session, and how long a verified session lasts."""
    from urllib.parse import urlsplit

    from cnkispider.sessions import VerifiedSession

    site = cnki_site(human_check=True, session_pace=0, session_burst=0, session_requests=60)
    host = urlsplit(site.base_url).hostname
    cookies = [
        {"name": k, "value": v, "domain": host, "path": "/"} for k, v in site.pass_check().items()
    ]
    verified = VerifiedSession(id="s-probe1", source="standin", cookies=cookies)
    lines: list[str] = []
    probe = make_probe(site, lines, verified=verified, session_pace=100, session_budget=200)
    assert probe.run() == 0, "\n".join(lines)
    found = verdicts(probe)
    assert found["session: a plain session is checked"] == PASS
    assert found["session: verified session"] == PASS
    assert found["detail: a link opens only in its own session"] == PASS
    assert found["search: patent"] == PASS and found["detail: paper"] == PASS
    lasts = next(c for c in probe.checks if c.name == "session: a verified session lasts")
    # 60 a pass: the browser's own page after the pass was the first of them
    assert lasts.verdict == PASS and lasts.evidence.startswith("59 requests /"), lasts.evidence
    assert "checked again" in lasts.evidence
    assert not any(c["value"] in "\n".join(lines) for c in cookies)  # no cookie value shown


def test_without_a_passed_session_the_probe_says_what_to_run(cnki_site):
    site = cnki_site(human_check=True)
    lines: list[str] = []
    probe = make_probe(site, lines)
    assert probe.run() == 0
    found = verdicts(probe)
    assert found["session: a plain session is checked"] == PASS
    assert found["session: verified session"] == "UNKNOWN"
    assert any("cnkispider session login" in line for line in lines)


@pytest.mark.parametrize(("batch", "matched"), [(0, "2 matched"), (1, "1 matched")])
@pytest.mark.slow  # over a second alone: the probe's every check against a stand-in
def test_the_export_line_measures_how_many_ids_one_request_answers(cnki_site, batch, matched):
    site = cnki_site(export_batch=batch)
    lines: list[str] = []
    probe = make_probe(site, lines)
    probe.run()
    line = next(line for line in lines if "export: GetExport, 2 ids" in line)
    assert line.startswith("PASS") and matched in line, line
    assert site.stats()["kinds"]["export"] == 1


class _Marked:
    """A catalogue that brackets every word it is asked for (tests/test_cli_words.py): a word
    printed without going through gettext shows no bracket."""

    def gettext(self, message):
        return f"«{message}»"

    def ngettext(self, singular, plural, n):
        return f"«{singular if n == 1 else plural}»"


TYPE_WORDS = ("«patent»", "«paper»", "«achievement»")


def _clauses(shown: str) -> list[str]:
    """The sentences of a bracketed name or evidence, each checked to be one whole «...»."""
    for word in TYPE_WORDS:  # a document type is a word of the vocabulary: bracketed too
        shown = shown.replace(word, word.strip("«»"))
    clauses = shown.split("; «")
    clauses = [clauses[0]] + ["«" + c for c in clauses[1:]]
    for clause in clauses:
        assert clause.startswith("«") and clause.endswith("»"), shown
        assert "«" not in clause[1:-1] and "»" not in clause[1:-1], shown
    return [c[1:-1] for c in clauses]


@pytest.mark.slow  # over a second alone: the probe's every check against a stand-in
def test_every_check_line_is_looked_up_in_the_catalogue_and_its_record_stays_english(
    cnki_site, monkeypatch
):
    """Issue 41: a check's name and evidence are read through gettext, whole sentences with
    the values (days, counts, URLs, keys) as written; PASS/FAIL/UNKNOWN are not words to
    translate (docs/PROBE.md and scripts grep them); the record (``Check.name``) stays English."""
    from cnkispider.words import i18n

    monkeypatch.setattr(i18n, "translation", lambda language: _Marked())
    checks = []
    for site in (cnki_site(), cnki_site(human_check=True)):  # every PASS; the pool's UNKNOWN
        lines: list[str] = []
        probe = make_probe(site, lines)
        probe.run()
        printed = [line for line in lines if line.startswith(("PASS", "FAIL", "UNKNOWN"))]
        assert printed == [c.line() for c in probe.checks]
        assert lines[0].startswith("«probing ") and lines[-1].startswith("«"), lines
        checks += probe.checks
    names = {c.name for c in checks}
    assert {"session: warm-up", "search: patent", "session: verified session"} <= names
    assert {c.verdict for c in checks} == {PASS, "UNKNOWN"}
    for check in checks:
        line = check.line()
        assert line[:8].rstrip() == check.verdict and line[8] == "«", line
        assert _clauses(check.shown_name) == [check.name], line
        assert "; ".join(_clauses(check.shown_evidence)) == check.evidence, line
        assert "«" not in check.line(english=True), check.line(english=True)
    search = next(c for c in checks if c.name == "search: patent")
    assert search.shown_name == "«search: «patent»»"
    assert search.shown_evidence.startswith(f"«{DAY}: "), search.shown_evidence  # a value
    pool = next(c for c in checks if c.name == "session: verified session")
    assert "«no ready session in the pool: run `cnkispider session login`" in pool.line()

"""The command line's words in Chinese (issue 48.3): a run's finish reason is said, not shown
as its code (``结束原因 up_to_date``), and the words of issue 48's refusals are Chinese."""

from __future__ import annotations

import re

import pytest

from cnkispider import i18n
from cnkispider.vocabulary import WORDS, word
from tests.crawl_harness import ROOT

LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def _finish_reasons() -> set[str]:
    # every reason the feeder closes a run with, read from its source: a new one needs a word
    source = (ROOT / "tasks" / "feeder.py").read_text("utf-8")
    return set(re.findall(r'_close\("([a-z_]+)"', source)) | {"shutdown", "finished"}


@pytest.mark.parametrize("reason", sorted(_finish_reasons()))
def test_every_finish_reason_has_a_chinese_word(reason):
    assert reason in WORDS
    i18n.activate("zh_CN")
    try:
        said = word(reason)
    finally:
        i18n.activate("en")
    assert not LATIN_WORD.search(said), said


def test_the_run_summary_says_its_finish_reason_in_chinese(tmp_path):
    from cnkispider.db import open_database
    from cnkispider.status import run_summary
    from tasks.flow import TaskStore

    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        TaskStore(engine).register("t1", "paper", "2024-01-01", "2024-01-05")
        i18n.activate("zh_CN")
        try:
            text = run_summary(engine, "t1", {"finish_reason": "up_to_date", "elapsed_seconds": 1})
        finally:
            i18n.activate("en")
    finally:
        engine.dispose()
    assert "up_to_date" not in text and "已是最新" in text

"""Issue 47, point 6: an errorLink row is closed when its document is stored, by any holder, in
any round, and the ledger follows (SQLite and MariaDB). Each failed before the fix: a slow
holder's stored document kept an open errorLink row written after it (progress said
``error_link 1``; with ``recrawl = false`` the task ended with it), and a document listed by two
rounds stayed ``error`` in the second round's ledger once the replay of the first stored it."""

from __future__ import annotations

import sqlalchemy as sa

from cnkispider.store import ledger
from cnkispider.store.db import open_database
from cnkispider.store.schema import error_link
from cnkispider.store.schema import ledger as ledger_rows
from errors.recorder import ErrorRecorder
from tasks.flow import TaskStore

DAY = "2024-01-01"
DBNAME, FILENAME = "CJFQ", "DOC1"
KEY = ledger.doc_key(DBNAME, FILENAME)


def _task(db_url, categories="A,B"):
    engine = open_database(db_url)
    store = TaskStore(engine, round_lease=60)
    task, _ = store.register("t", "paper", DAY, DAY, categories)
    rounds = []
    while (r := store.claim(task.id, "w")) is not None:
        rounds.append(r)
    return engine, store, task.id, rounds


def _fail(recorder, task_id, round_id):
    recorder.record_link(
        task_id, round_id, "paper", f"https://x/abstract?v={round_id}", DBNAME, FILENAME, "timeout"
    )


def _outcomes(engine) -> dict:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                sa.select(ledger_rows.c.round_id, ledger_rows.c.outcome).where(
                    ledger_rows.c.doc_key == KEY
                )
            ).all()
        )


def _links(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(error_link)).scalar()


def test_a_failure_after_the_document_was_stored_opens_no_error_link(db_url):
    """The slow holder stored the document; the lease it had lost was abandoned by another
    worker, whose handler records the failure afterwards: no errorLink row, the ledger stays
    stored."""
    engine, store, task_id, (first, *_) = _task(db_url, categories="A")
    recorder = ErrorRecorder(engine)
    store.note_listed(first.id, [KEY], {})
    with engine.begin() as conn:  # the slow holder's store (the pipeline's transaction)
        ledger.note_stored(conn, [(first.id, KEY)])
    recorder.resolve_links(task_id, [(DBNAME, FILENAME)])
    _fail(recorder, task_id, first.id)  # the abandon handler, late
    assert _links(engine) == 0
    assert _outcomes(engine) == {first.id: "stored"}
    engine.dispose()


def test_a_document_of_two_rounds_stored_once_settles_both_ledgers(db_url):
    """Listed by two rounds (two categories), failed in both: one errorLink row (the first
    round's). The replay stores it: the row goes and both rounds' ledger rows say stored."""
    engine, store, task_id, rounds = _task(db_url)
    first, second = rounds[0], rounds[1]
    recorder = ErrorRecorder(engine)
    for r in (first, second):
        store.note_listed(r.id, [KEY], {})
        _fail(recorder, task_id, r.id)
    assert _links(engine) == 1
    assert _outcomes(engine) == {first.id: "error", second.id: "error"}
    with engine.begin() as conn:  # the replay of the errorLink row (its round: the first)
        ledger.note_stored(conn, [(first.id, KEY)])
    recorder.resolve_links(task_id, [(DBNAME, FILENAME)])
    assert _links(engine) == 0
    assert _outcomes(engine) == {first.id: "stored", second.id: "stored"}
    engine.dispose()


def test_a_failure_in_another_task_is_still_recorded(db_url):
    """Stored by one task is not stored for another (its own rounds, its own depth): only the
    task's own ledger decides."""
    engine, store, task_id, (first, *_) = _task(db_url, categories="A")
    other, _ = store.register("u", "paper", DAY, DAY, "A")
    theirs = store.claim(other.id, "w")
    recorder = ErrorRecorder(engine)
    store.note_listed(first.id, [KEY], {})
    with engine.begin() as conn:
        ledger.note_stored(conn, [(first.id, KEY)])
    store.note_listed(theirs.id, [KEY], {})
    _fail(recorder, other.id, theirs.id)
    assert _links(engine) == 1
    assert _outcomes(engine) == {first.id: "stored", theirs.id: "error"}
    engine.dispose()


def test_a_failure_recorded_while_the_store_commits_waits_for_it(mysql_url):
    """MariaDB, the race itself: the slow holder's store holds its transaction open (the row it
    marks stored locked) while the abandon handler records the failure; the failure waits for
    the store, then sees the document stored and writes no errorLink row (before: it read the
    old snapshot and wrote its row after the store's clean-up had run)."""
    import threading

    from tests.fixtures.waiting import wait_until

    engine, store, task_id, (first, *_) = _task(mysql_url, categories="A")
    recorder = ErrorRecorder(engine)
    store.note_listed(first.id, [KEY], {})
    conn = engine.connect()
    # The crawler's connections end a transaction idle for 20 s (cnkispider/store/db.py
    # IDLE_TRANSACTION_SECONDS): on a loaded machine this test's held "store" could sit longer
    # than that before the failure's transaction is seen waiting, and MariaDB ended it, its lock
    # with it (the failure then went by without waiting: "Connection reset by peer" on the
    # held connection). The held store here is the test's, not a stalled worker's.
    conn.exec_driver_sql("SET SESSION idle_transaction_timeout = 0")
    conn.commit()  # (the SET began SQLAlchemy's transaction: the store's begins below)
    held = conn.begin()
    ledger.note_stored(conn, [(first.id, KEY)])  # the store's transaction, not committed yet
    raised: list[BaseException] = []

    def fail() -> None:
        try:
            _fail(recorder, task_id, first.id)
        except BaseException as exc:  # told below, not lost in the thread
            raised.append(exc)

    failing = threading.Thread(target=fail)
    failing.start()

    def waiting() -> bool:
        assert failing.is_alive(), (
            f"the failure was recorded without waiting for the store: raised {raised}, "
            f"errorLink rows {_links(engine)}, ledger {_outcomes(engine)}"
        )
        with engine.connect() as look:
            return bool(
                look.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx "
                    "WHERE trx_state = 'LOCK WAIT'"
                ).scalar()
            )

    # (well under innodb_lock_wait_timeout, 50 s, yet long for a loaded machine's first connect)
    wait_until(waiting, 45, what="the failure's transaction waiting on the store's row")
    held.commit()
    conn.close()
    recorder.resolve_links(task_id, [(DBNAME, FILENAME)])  # the pipeline's, after its commit
    failing.join(30)
    assert not failing.is_alive()
    assert not raised, raised
    assert _links(engine) == 0
    assert _outcomes(engine) == {first.id: "stored"}
    engine.dispose()

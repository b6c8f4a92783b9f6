"""``/metrics``: the status report as Prometheus text, through the official ``prometheus_client``.

Every family but one is a gauge of the report at scrape time (``cnkispider_`` prefix, labelled
by task); ``cnkispider_challenges_total`` is a counter (use ``rate()``):

    cnkispider_documents{task,type}          documents stored by the task
    cnkispider_rounds{task,state}            round rows by state (claimed, seeded, done, failed)
    cnkispider_rounds_planned{task}          rounds the task plans (start .. until x categories)
    cnkispider_pages{task}                   pages fetched by the task's listed workers
    cnkispider_errors{task,table,reason}     errorCode / errorLink rows by reason
    cnkispider_workers{task,state}           alive, gone, stopped
    cnkispider_queue{task,kind}              requests queued and leased in Redis
    cnkispider_halted{task}                  1 while the task is halted
    cnkispider_rounds_per_hour{task}         the task's round rate, as status shows it (absent:
                                             none known)
    cnkispider_eta_seconds{task}             its ETA, as status shows it (absent: finished or
                                             unknown)
    cnkispider_waiting_for_person{task}      1 while a worker waits for a person (CNKI's check)
    cnkispider_challenges_total{task}        CNKI's challenges the task's workers met (the sum of
                                             their ``worker.challenges``; it falls back only when
                                             old worker rows are removed: a counter reset)
    cnkispider_sessions{state}               the pool of sessions a person passed, by state
    cnkispider_windows_closed{what}          CNKI's "come back later" windows closed now, by
                                             what they close (ip: an address, session)
    cnkispider_too_many_total                CNKI's 429s the windows counted (each window's
                                             count is kept an hour after it last opened)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class ReportCollector:
    """A collector over one report (a fresh one per scrape: nothing is kept between them)."""

    def __init__(self, report: dict):
        self.report = report

    def collect(self):
        tasks = self.report["tasks"]

        def family(name, doc, labels):
            return GaugeMetricFamily(f"cnkispider_{name}", doc, labels=labels)

        documents = family("documents", "Documents stored by the task", ["task", "type"])
        rounds = family("rounds", "Round rows by state", ["task", "state"])
        planned = family("rounds_planned", "Rounds the task plans", ["task"])
        pages = family("pages", "Pages fetched by the task's listed workers", ["task"])
        errors = family(
            "errors", "errorCode and errorLink rows by reason", ["task", "table", "reason"]
        )
        workers = family("workers", "Workers by state", ["task", "state"])
        queue = family("queue", "Requests in Redis", ["task", "kind"])
        halted = family("halted", "1 while the task is halted", ["task"])
        # the task's round rate and ETA, as status defines them; absent when unknown or finished
        per_hour = family("rounds_per_hour", "Rounds finished an hour, as status shows", ["task"])
        eta = family("eta_seconds", "Seconds to the task's last round, as status shows", ["task"])
        waiting = family("waiting_for_person", "1 while CNKI wants a person", ["task"])
        challenges = CounterMetricFamily(
            "cnkispider_challenges",
            "CNKI's challenges met by the task's workers (verify, captcha, soft block, ...)",
            labels=["task"],
        )
        for t in tasks:
            name = t["name"]
            if t.get("documents") is not None:
                documents.add_metric([name, t["type"]], t["documents"])
            for state, n in sorted(t["rounds"]["by_state"].items()):
                rounds.add_metric([name, state], n)
            if t["rounds"]["total"] is not None:
                planned.add_metric([name], t["rounds"]["total"])
            pages.add_metric([name], sum(w["pages"] or 0 for w in t["workers"]))
            for table in ("errorCode", "errorLink"):
                for reason, n in sorted(t["errors"][table]["by_reason"].items()):
                    errors.add_metric([name, table, reason], n)
            for state, n in sorted(t["worker_counts"].items()):
                workers.add_metric([name, state], n)
            if t.get("queue"):
                for kind, n in sorted(t["queue"].items()):
                    queue.add_metric([name, kind], n)
            halted.add_metric([name], 1 if t["halted"] else 0)
            if t["rate"]["rounds_per_hour"] is not None:
                per_hour.add_metric([name], t["rate"]["rounds_per_hour"])
            if t.get("eta_seconds") is not None:
                eta.add_metric([name], t["eta_seconds"])
            waiting.add_metric([name], 1 if t.get("waiting") else 0)
            challenges.add_metric([name], t.get("challenges") or 0)
        yield from (documents, rounds, planned, pages, errors, workers, queue, halted, waiting)
        yield from (per_hour, eta)
        yield challenges
        sessions = family("sessions", "Sessions a person passed, by state", ["state"])
        for state, n in sorted((self.report.get("sessions") or {}).items()):
            sessions.add_metric([state], n)
        yield sessions
        windows = self.report.get("windows")
        if windows is not None:
            closed = family("windows_closed", "CNKI's come-back-later windows closed now", ["what"])
            for what in ("ip", "session"):
                closed.add_metric([what], sum(1 for w in windows["closed"] if w["what"] == what))
            yield closed
            too_many = CounterMetricFamily(
                "cnkispider_too_many", "CNKI's 429s (come back later) the windows counted"
            )
            too_many.add_metric([], windows["answers"])
            yield too_many


def metrics_text(report: dict) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReportCollector(report))
    return generate_latest(registry)

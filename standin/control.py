"""The stand-in's control and inspection endpoints: what tests and benchmarks change (faults,
latency, limits, the site's today, ...) and read (counters, the ground truth, the proxies).
"""

from __future__ import annotations

import json
from datetime import date
from urllib.parse import parse_qs

from standin.catalogue import DOC_TYPES, parse_day
from standin.export import CONTROLS as EXPORT_CONTROLS
from standin.limits import ALL_FAULTS
from standin.options import BREAKS, parse_latency
from standin.query import ExpertError
from standin.wire import JSON, Request, Response


class ControlDesk:
    """The test-only endpoints: ``/_control`` (state and changes), ``/_stats``, the ground truth
    (``/_truth``, ``/_rounds``, ``/_doomed``, ``/_references``) and the proxy provider
    (``/proxy-api``). A part of :class:`standin.site.Site`."""

    def state(self) -> dict:
        o = self.options
        return {
            "base_url": self.base,
            "seed": o.corpus.seed,
            "scale": o.corpus.scale,
            "cap_rows": o.cap_rows,
            "turn_limit": self.sessions.turn_limit,
            "pace_limit": self.session_pace.limit,
            "pace_block_seconds": self.session_pace.block_seconds,
            "pace_blocked": {
                "sessions": len(self.session_pace.blocked(self.clock())),
                "ips": self.ip_pace.blocked(self.clock()),
            },
            "collect_missing": o.collect_missing,
            "rows_without_keys": o.rows_without_keys,
            "header_rows": o.header_rows,
            "break": sorted(self.breaks),
            "human_check": self.human.on,
            **self.human.limits(),
            "zero_as_soft_block": o.zero_as_soft_block,
            **self.exports.state(),
            "dbname_years": o.corpus.dbname_years,
            "profile": o.corpus.profile,
            "surge_rows": o.corpus.surge_rows,
            "late": o.corpus.late,
            "as_of": o.corpus.as_of,
            "withdrawn": sorted(o.corpus.withdrawn),
            "token_ttl": o.token_ttl,
            "session_ttl": self.sessions.ttl,
            "latency": list(self.latency),
            "faults": dict(self.faults.rates),
            "slow_seconds": o.slow_seconds,
            "rate_limit": self.limiter.rate,
            "burst": self.limiter.burst,
            "ban_seconds": self.limiter.ban_seconds,
            "banned": self.limiter.banned(self.clock()),
            "throttle": self.throttle.rate,
            "throttle_seconds": self.throttle.seconds,
            "throttled": self.throttle.closed_now(self.clock()),
            "doomed_count": o.corpus.doomed,
            "doomed": sorted(self.doomed_extra),
            "stale": sorted(self.stale_links),
            "proxies": [
                {
                    "index": i,
                    "url": f"http://127.0.0.1:{p}",
                    "ip": self.proxy_ip(i),
                    "dead": i in self.dead,
                }
                for i, p in enumerate(self.proxy_ports)
            ],
            "proxy_auth": bool(self._proxy_auth),
            "provider_url": f"{self.base}/proxy-api",
            "provider_interval": self.provider.interval,
            "provider_batch": self.provider.batch,
        }

    def apply(self, changes: dict) -> None:
        """Apply a /_control request; raises ValueError naming the first bad key."""
        o = self.options
        faults = dict(changes.pop("faults", None) or {})
        faults.update({k: changes.pop(k) for k in list(changes) if k in ALL_FAULTS})
        self.faults.update(faults)
        limiter = {
            k: changes.pop(k) for k in ("rate_limit", "burst", "ban_seconds") if k in changes
        }
        if limiter:
            self.limiter.rate = float(limiter.get("rate_limit", self.limiter.rate))
            self.limiter.burst = max(1.0, float(limiter.get("burst", self.limiter.burst)))
            self.limiter.ban_seconds = float(limiter.get("ban_seconds", self.limiter.ban_seconds))
        for key, value in changes.items():
            if key in ("pace_limit", "pace_block_seconds"):
                for guard in (self.session_pace, self.ip_pace):
                    if key == "pace_limit":
                        guard.limit = float(value)
                    else:
                        guard.block_seconds = float(value)
            elif key == "unblock":
                if value:
                    self.session_pace.clear()
                    self.ip_pace.clear()
            elif key == "collect_missing":
                o.collect_missing = float(value)
            elif key == "rows_without_keys":
                o.rows_without_keys = bool(value)
            elif key == "header_rows":
                o.header_rows = float(value)
            elif key == "break":
                names = [value] if isinstance(value, str) else list(value)
                unknown = set(names) - set(BREAKS)
                if unknown:
                    raise ValueError(f"unknown break {sorted(unknown)[0]!r}")
                self.breaks = set(names)
            elif key == "cap_rows":
                o.cap_rows = int(value)
            elif key == "latency":
                self.latency = parse_latency(value)
            elif key == "slow_seconds":
                o.slow_seconds = float(value)
            elif key == "unban":
                if value:
                    self.limiter.unban()
                    self.throttle.clear()
            elif key == "throttle":
                self.throttle.rate = float(value)
            elif key == "throttle_seconds":
                self.throttle.seconds = float(value)
            elif key in ("throttle_date", "throttle_silent"):
                setattr(o, key, bool(value))
            elif key == "doomed":
                self.doomed_extra = set(value)
            elif key == "stale":
                self.stale_links = set(value)
            elif key == "doomed_count":
                o.corpus.doomed = int(value)
                self.corpus.doomed_refs.cache_clear()
            elif key == "turn_limit":
                self.sessions.turn_limit = int(value)
            elif key == "token_ttl":
                o.token_ttl = float(value)
            elif key == "session_ttl":
                self.sessions.ttl = float(value)
            elif key == "max_pages":  # the older spelling of the cap
                o.cap_rows = int(value) * 50
            elif key == "dead_proxies":
                self.dead = {int(i) for i in value}
            elif key == "provider_interval":
                self.provider.interval = float(value)
            elif key == "provider_batch":
                self.provider.batch = int(value)
            elif key == "human_check":
                self.human.on = bool(value)
            elif key in ("session_requests", "session_burst"):
                setattr(self.human, key.removeprefix("session_"), int(value))
            elif key in ("session_minutes", "session_pace", "session_pace_window"):
                setattr(self.human, key.removeprefix("session_"), float(value))
            elif key == "expire_session":  # a session id (the SID_kns_new value) or a list
                for sid in [value] if isinstance(value, str) else list(value):
                    if not self.human.expire(sid, self.clock()):
                        raise ValueError(f"expire_session: no person passed session {sid!r}")
            elif key == "check_after":  # {session id: requests it still answers}
                for sid, more in dict(value).items():
                    if not self.human.check_after(sid, int(more)):
                        raise ValueError(f"check_after: session {sid!r} is not passed and live")
            elif key == "drop_field":  # issue 26: the drift alarm's markup change
                self.drop_field = str(value or "")
            elif key == "count_shift":  # issue 26: the counts change (refresh-counts)
                o.corpus.count_shift = int(value)
                self.corpus.document.cache_clear()  # documents (and their rows) are made anew
                self.corpus.results.cache_clear()
            elif key == "as_of":  # the site's today moves: late documents come in
                o.corpus.as_of = date.fromisoformat(str(value)).isoformat() if value else ""
                self.corpus.results.cache_clear()
            elif key == "withdrawn":  # filenames no longer listed
                o.corpus.withdrawn = frozenset(value or ())
                self.corpus.results.cache_clear()
            elif key == "late":
                o.corpus.late = bool(value)
                self.corpus.results.cache_clear()
            elif key == "zero_as_soft_block":
                o.zero_as_soft_block = bool(value)
            elif key in EXPORT_CONTROLS:
                self.exports.apply(key, value)
            elif key == "reset_stats":
                if value:
                    self.reset_stats()
            else:
                raise ValueError(f"unknown control key {key!r}")

    def control(self, req: Request) -> Response:
        if req.method == "POST":
            try:
                changes = json.loads(req.body or b"{}")
                if not isinstance(changes, dict):
                    raise ValueError("expected a JSON object")
                self.apply(changes)
            except (ValueError, TypeError) as exc:
                return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        return Response(200, json.dumps(self.state(), ensure_ascii=False).encode(), JSON)

    def stats_page(self, req: Request) -> Response:
        return Response(200, json.dumps(self.stats_view(), ensure_ascii=False).encode(), JSON)

    def _scope(self, req: Request) -> tuple[str, str, str, list[str]]:
        params = parse_qs(req.query)
        doc_type = params.get("type", [""])[0]
        if doc_type not in DOC_TYPES:
            raise ValueError(f"type must be one of {', '.join(DOC_TYPES)}")
        start = params.get("start", [""])[0]
        end = params.get("end", [start])[0]
        parse_day(start), parse_day(end)
        categories = [c for c in ",".join(params.get("categories", [])).split(",") if c.strip()]
        return doc_type, start, end, [c.strip() for c in categories]

    def truth(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        expert = parse_qs(req.query).get("query", [""])[0]
        try:
            rows = self.corpus.truth(*scope, expert=expert)
        except ExpertError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return Response(200, "".join(lines).encode(), "application/x-ndjson; charset=utf-8")

    def rounds(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        rows = self.corpus.rounds(*scope)
        body = {"type": scope[0], "rounds": rows, "cap": self.options.cap_rows}
        return Response(200, json.dumps(body, ensure_ascii=False).encode(), JSON)

    def doomed(self, req: Request) -> Response:
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        by_rule = self.corpus.doomed_in(*scope)
        extra = (
            [
                row["filename"]
                for row in self.corpus.truth(*scope)
                if row["filename"] in self.doomed_extra
            ]
            if self.doomed_extra
            else []
        )
        return Response(200, json.dumps(sorted(set(by_rule) | set(extra))).encode(), JSON)

    def references_truth(self, req: Request) -> Response:
        """Each paper of a scope with its whole reference list (JSON lines)."""
        try:
            scope = self._scope(req)
        except ValueError as exc:
            return Response(400, json.dumps({"error": str(exc)}).encode(), JSON)
        lines = (
            json.dumps(
                {
                    "dbname": row["dbname"],
                    "filename": row["filename"],
                    "references": self.reference_list(row["dbname"], row["filename"]),
                },
                ensure_ascii=False,
            )
            + "\n"
            for row in self.corpus.truth(*scope)
        )
        return Response(200, "".join(lines).encode(), "application/x-ndjson; charset=utf-8")

    def proxy_api(self, req: Request) -> Response:
        params = parse_qs(req.query)
        fmt = params.get("format", ["text"])[0]
        try:
            num = int(params.get("num", [str(self.provider.batch)])[0])
        except ValueError:
            num = self.provider.batch
        ports = self.provider.take(num, self.clock())
        if fmt == "json":
            if ports is None:
                body = {"code": 1, "msg": "请求过于频繁"}
            else:
                body = {"code": 0, "data": [{"ip": "127.0.0.1", "port": p} for p in ports]}
            return Response(200, json.dumps(body, ensure_ascii=False).encode(), JSON)
        text = (
            "ERROR 请求过于频繁" if ports is None else "".join(f"127.0.0.1:{p}\r\n" for p in ports)
        )
        return Response(200, text.encode(), "text/plain; charset=utf-8")

"""CNKI's citation export on the stand-in: ``POST /dm8/API/GetExport`` (PROTOCOL.md, 2026
evidence point 16), at least as strict as CNKI's evidence.

Form: ``filename=<id>[,<id>...]&uniplatform=NZKPT&displaymode=GBTREFER,elearning,EndNote``, the
ids being list rows' ``input.cbItem`` values (opaque: the site resolves only ids its own list
pages showed, never a dbname!filename). The answer::

    {"code":1,"data":[{"key":"GB/T 7714-2015 格式引文","mode":"GBTREFER","value":[...]},
                      {"key":"知网研学（原E-Study）","mode":"ELEARNING","value":[...]},
                      {"key":"EndNote","mode":"ENDNOTE","value":["%0 Journal Article<br>%A ..."]}]}

one value per record, records in an order of the site's own (never the ids' order: a crawler
must match records to ids by content).

Rules, in the order they are applied:

- the grid's session rules: with the human check, a session a person passed and within its
  hidden limits (every request counts against the pass, like a grid request); without it, a live
  session cookie and an issued ``Ecp_ClientId``. A refusal is HTTP 403 with
  ``{"message":"<verify url>"}`` (jasminum 78b9b12, 2026-01); so is the pace guard's and a
  request whose ids the site never listed;
- the three-mode rule: fewer than the three display modes is answered ``暂无数据``
  (66666-design/cnki-citation, tested 2026-10-08);
- the hidden batch limit (``--export-batch N``, control ``export_batch``; 0: none): ids past
  the first N are silently left out, as are the documents named in control ``export_missing``
  (filenames whose record never comes);
- faults and latency as on the grid.

Records by type: papers ``%0 Journal Article`` (authors one ``%A`` line each on some documents,
``;``-joined on others: both forms are public), theses ``%0 Thesis`` with ``%Y``/``%9``, patents
``%0 Patent`` with ``%8``/``%@``/``%+``, achievements ``%0 Generic``. Fields the corpus does not
generate (volume, supervisor, ...) are written when a document has them.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qs

from standin.wire import JSON, Request, Response

EXPORT_PATH = "/dm8/API/GetExport"
MODES = ("GBTREFER", "ELEARNING", "ENDNOTE")
GBT_KEY = "GB/T 7714-2015 格式引文"
ELEARNING_KEY = "知网研学（原E-Study）"
ENDNOTE_KEY = "EndNote"
NO_DATA = {"code": 0, "msg": "暂无数据", "data": None}
CONTROLS = ("export_batch", "export_missing")


def _dump(body) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _draw(*parts) -> int:
    text = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def endnote_record(doc) -> str:
    """One document's EndNote record, ``<br>``-joined as GetExport writes it."""
    f = doc.fields
    # a paper's year is its source line's (none for a thesis or a 网络首发 paper: the truth's);
    # patents and achievements: their date's
    year = f["year"] if "year" in f else f.get("date", "")[:4]
    issue = f.get("issue", "")
    if issue.isdigit():
        issue = issue.zfill(2)  # as CNKI writes an issue: (04)
    lines: list[str] = []

    def add(tag: str, value: str) -> None:
        if value:
            lines.append(f"%{tag} {value}")

    def people(names: str) -> None:
        names_list = [n for n in names.split(";") if n]
        if _draw("endnote-people", f["filename"]) % 2:
            for name in names_list:  # Refer's form: one %A a name
                add("A", name)
        else:  # the documented one-line form
            add("A", ";".join(names_list))

    if doc.doc_type == "patent":
        add("0", "Patent")
        add("T", f["title"])
        people(f.get("inventors", ""))
        add("+", f.get("address", ""))
        add("I", f.get("applicant", ""))
        add("8", f.get("publication_date") or f.get("date", ""))
        add("@", f.get("grant_no") or f.get("publication_no") or f["filename"])
        add("9", f.get("patent_type", ""))
        add("X", f.get("abstract", ""))
    elif doc.doc_type == "achievement":
        add("0", "Generic")
        add("T", f["title"])
        people(f.get("completers", ""))
        add("+", f.get("first_unit", ""))
        add("K", f.get("keywords", ""))
        add("X", f.get("summary", ""))
        add("D", year)
        add("8", f.get("entry_date", ""))
        add("9", f.get("achievement_type", ""))
    elif f.get("database") in ("硕士", "博士"):
        add("0", "Thesis")
        people(f.get("authors", ""))
        add("T", f["title"])
        add("Y", f.get("supervisor", ""))
        add("I", f.get("source", ""))
        add("9", f.get("degree") or f["database"])
        add("D", year)
        add("K", f.get("keywords", ""))
        add("X", f.get("abstract", ""))
        add("R", f.get("doi", ""))
    else:
        add("0", "Journal Article")
        people(f.get("authors", ""))
        institutions = f.get("institutions", "")
        add("+", institutions + ";" if institutions else "")
        add("T", f["title"])
        add("J", f.get("source", ""))
        add("K", f.get("keywords", ""))
        add("X", f.get("abstract", ""))
        add("D", year)
        add("V", f.get("volume", ""))
        add("N", issue)
        add("P", f.get("page_range", ""))
        add("@", f.get("issn", ""))
        add("R", f.get("doi", ""))
    add("W", "CNKI")
    return "<br>".join(lines)


def gbt_citation(doc) -> str:
    f = doc.fields
    who = f.get("authors") or f.get("inventors") or f.get("completers") or ""
    mark = {"patent": "P", "achievement": "R"}.get(doc.doc_type, "J")
    return f"[1]{who.replace(';', ',')}.{f['title']}[{mark}].{f.get('source', '')},{f['date'][:4]}."


class ExportDesk:
    """The export ids the site's list pages showed, and the hidden export rules.

    ``site`` in the route's methods is the :class:`standin.site.Site` that holds this desk: the
    desk uses its sessions, guards and corpus as handed in, and never imports the site."""

    def __init__(self, batch: int = 0):
        self.batch = int(batch)  # ids answered per request (0: all)
        self.missing: set[str] = set()  # filenames whose record never comes
        self._ids: dict[str, tuple[str, tuple]] = {}  # export id -> (doc type, ref)

    def remember(self, doc, export_id: str) -> None:
        """A list page showed ``doc`` with ``export_id`` in its ``input.cbItem``."""
        self._ids[export_id] = (doc.doc_type, doc.ref)

    def apply(self, key: str, value) -> None:
        if key == "export_batch":
            if int(value) < 0:
                raise ValueError("export_batch: expected 0 (no limit) or more")
            self.batch = int(value)
        elif key == "export_missing":
            self.missing = {value} if isinstance(value, str) else set(value)
        else:
            raise ValueError(f"unknown control key {key!r}")

    def state(self) -> dict:
        return {"export_batch": self.batch, "export_missing": sorted(self.missing)}

    # -- the route ------------------------------------------------------------------------

    @staticmethod
    def stats(site) -> dict:
        return site.stats.setdefault(
            "export",
            {"requests": 0, "answered": 0, "records": 0, "left_out": 0, "refused": 0},
        )

    def refuse(self, site, req: Request, cause: str) -> Response:
        referer = req.headers.get("referer") or f"{site.base}/kns8s/defaultresult/index"
        self.stats(site)["refused"] += 1
        site._challenge("json_403", cause)
        return Response(403, _dump({"message": site._verify_url(referer, puzzle=True)}), JSON)

    def handle(self, site, req: Request) -> Response:
        if req.method != "POST":
            return Response(405, b"POST only", "text/plain")
        stats = self.stats(site)
        stats["requests"] += 1
        lo, hi = site.latency
        delay = lo if hi <= lo else site._random.uniform(lo, hi)
        resp = self._answer(site, req)
        resp.delay = delay + resp.delay
        return resp

    def _answer(self, site, req: Request) -> Response:
        now = site.clock()
        sid = site._cookie(req, "SID_kns_new")
        if site.human.on:
            if site.sessions.get(sid, now) is None:
                site.human.lapse(sid, now)
                sid = None
            verdict = site.human.admit(sid, now, "export")
            if verdict != "ok":
                site.stats["human_check_refusals"][verdict] += 1
                return self.refuse(site, req, "human_check")
            site.sessions.touch(sid, now)
        else:
            if not site.client_ids.valid(site._cookie(req, "Ecp_ClientId")):
                site.stats["no_client_id_refusals"] += 1
                return self.refuse(site, req, "session")
            if not site.sessions.touch(sid, now):
                site.stats["no_session_refusals"] += 1
                return self.refuse(site, req, "session")
        if site.limiter.active and not site.limiter.allow(req.ip, now):
            site.stats["banned_responses"] += 1
            return self.refuse(site, req, "ip")
        if site.session_pace.active:
            if site.ip_pace.hit(req.ip, now):
                return self.refuse(site, req, "ip")
            if sid is not None and site.session_pace.hit(sid, now):
                return self.refuse(site, req, "session")
        if site.faults.active:
            fault, slow = site.faults.draw(site._identity(req))
            if slow:
                site.stats["faults"]["slow"] += 1
            if fault is not None:
                site.stats["faults"][fault] += 1
                resp = site._fault(fault, req)
                if slow:
                    resp.delay += site.options.slow_seconds
                return resp
        form = parse_qs(req.body.decode("utf-8", "replace"))
        modes = {
            m.strip().upper() for m in ",".join(form.get("displaymode", [])).split(",") if m.strip()
        }
        if not set(MODES) <= modes:
            return Response(200, _dump(NO_DATA), JSON)
        ids = [i.strip() for i in ",".join(form.get("filename", [])).split(",") if i.strip()]
        if not any(i in self._ids for i in ids):
            # no id, or only ids no list page showed: refused as CNKI refuses a bad id
            return self.refuse(site, req, "session")
        # the hidden limit: ids past the first N are left out without a word
        kept = ids[: self.batch] if self.batch > 0 else ids
        known = [self._ids[i] for i in kept if i in self._ids]
        docs = [site.corpus.document(t, *ref) for t, ref in known]
        answered = [d for d in docs if d.fields["filename"] not in self.missing]
        # the site's own order: a crawler that matches by position gets it wrong
        answered.sort(key=lambda d: _draw("export-order", site.options.corpus.seed, d.key))
        stats = self.stats(site)
        stats["answered"] += 1
        stats["records"] += len(answered)
        stats["left_out"] += len(ids) - len(answered)
        body = {
            "code": 1,
            "data": [
                {"key": GBT_KEY, "mode": "GBTREFER", "value": [gbt_citation(d) for d in answered]},
                {
                    "key": ELEARNING_KEY,
                    "mode": "ELEARNING",
                    "value": [f"{d.fields['title']}" for d in answered],
                },
                {
                    "key": ENDNOTE_KEY,
                    "mode": "ENDNOTE",
                    "value": [endnote_record(d) for d in answered],
                },
            ],
        }
        return Response(200, _dump(body), JSON)

"""The stand-in's document pages: the detail page (``/kcms2/article/abstract?v=``) and a paper's
reference list (standin/references.py), both behind the token's signature, age and session.
"""

from __future__ import annotations

from standin import markup
from standin import references as reference_api
from standin.wire import JSON, Request, Response


class DocumentPages:
    """A document's own pages, opened by a list row's ``v=`` token. A part of
    :class:`standin.site.Site`."""

    def detail(self, req: Request) -> Response:
        info = self.tokens.check(self._token(req))
        refusals = self.stats["token_refusals"]
        if info is None:
            refusals["bad"] += 1
            return self._verify_redirect(req)
        sid, issued_ms, dbname, filename = info
        now = self.clock()
        if now * 1000 - issued_ms > self.options.token_ttl * 1000:
            refusals["expired"] += 1
            return self._verify_redirect(req)
        if not self.sessions.touch(sid, now):
            refusals["session"] += 1
            return self._verify_redirect(req)
        if self.human.on and self._cookie(req, "SID_kns_new") != sid:
            # v= links answer only in the session that listed them (a passed one: the gate)
            refusals["session"] += 1
            self.stats["foreign_session_details"] += 1
            return self._verify_redirect(req)
        doc = self.corpus.locate(dbname, filename)
        if doc is None:
            return Response(404, b"not found", "text/plain")
        if filename in self.doomed_extra or self.corpus.is_doomed(doc):
            self.stats["doomed_responses"] += 1
            return Response(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
        self.stats["pages"]["detail"] += 1
        if self.human.on:
            self.human.current(sid).documents += 1  # the gate admitted this passed session
        return Response(
            200, markup.detail_page(doc, "detail-fields" in self.breaks, drop=self.drop_field)
        )

    def references(self, req: Request) -> Response:
        """A paper's reference list: the detail page's token and session rules, in JSON."""
        params, words = reference_api.check(req.query)
        if words is not None:
            self.stats["references_malformed"] += 1
            return Response(400, reference_api.refused(words), JSON)
        info = self.tokens.check(params["v"])
        refusals = self.stats["token_refusals"]
        if info is None:
            refusals["bad"] += 1
            return self._json_403(req)
        sid, issued_ms, dbname, filename = info
        now = self.clock()
        if now * 1000 - issued_ms > self.options.token_ttl * 1000:
            refusals["expired"] += 1
            return self._json_403(req)
        if not self.sessions.touch(sid, now):
            refusals["session"] += 1
            return self._json_403(req)
        if self.human.on and self._cookie(req, "SID_kns_new") != sid:
            refusals["session"] += 1
            return self._json_403(req)
        doc = self.corpus.locate(dbname, filename)
        if doc is None or doc.doc_type != "paper":
            return Response(404, b"not found", "text/plain")
        if "references-html" in self.breaks:
            # the API answers a page instead of JSON (CNKI changed it): never "no references"
            return Response(200, markup.HOME_PAGE)
        entries = self.reference_list(dbname, filename)
        if reference_api.type_of(dbname) != params["type"]:
            entries = []
        self.stats["pages"]["references"] += 1
        return Response(200, reference_api.answer(entries, params["start"], params["size"]), JSON)

    def reference_list(self, dbname: str, filename: str) -> list[dict]:
        return reference_api.reference_list(self.corpus.h, dbname, filename)

"""Start a stand-in site in a subprocess and talk to it (stdlib only: http.client, no crawler code).

``start_site(**options)`` runs ``python -m standin --port 0 ...`` and returns a
:class:`SiteHandle` once the site has printed its base URL (well under a second). Options are the
command line's, in Python spelling: ``seed=2``, ``max_pages=3``, ``turn_limit=2``,
``faults={"captcha": 1.0}``, ``overflow=["patent:2024-01-01:H04:9000"]``, ``latency="0.02-0.08"``,
``categories_file={"patent": path}``, ``proxies=3, dead_proxies=1``, ``pace_limit=5``,
``rows_without_keys=True``, ``break_="turn-token"`` or ``break_=["client-id", "date-filter"]``,
``human_check=True, session_requests=50``, ``dbname_years=False`` (bare database names), ``zero_as_soft_block=True``, ...
Unlike ``python -m standin``, the Python API starts the plain site unless ``human_check=True``
(the callers written before the check, benchmarks and tests, keep their behaviour).

With the human check, :meth:`SiteHandle.pass_check` plays a person passing CNKI's slider in a
browser and returns that session's cookies; :meth:`SiteHandle.expire_session` and
:meth:`SiteHandle.check_after` make the site check a passed session again (now, or after N more
requests), for tests of a session that expires mid-round.

:class:`CnkiClient` speaks the kns8s protocol the way a browser would (warm-up, cookies, grid
form, detail link), for tests and the benchmark: its defaults are the 2026 contract's correct
requests (Ecp_ClientId, the resource table, SUFFIX), and each can be made wrong on purpose. It uses ``http.client`` directly, so proxy
environment variables never reroute it.
"""

from __future__ import annotations

import base64
import html
import http.client
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parents[1]
# doc type -> (Resource, Classid, KuaKuCode, Rlang): the 2026 contract's resource table
SEARCH_RESOURCES = {
    "patent": ("PATENT", "VUDIXAIY", "", "Both"),
    "paper": ("CROSSDB", "WD0FTY92", "YSTT4HG0,LSTPFY1C", "CHINESE"),
    "achievement": ("ACHIEVEMENTS", "BLZOG7CK", "", "CHINESE"),
}
# the browser's full 总库 list (a crawler sending it gets rows of other databases too)
FULL_KUAKU = (
    "YSTT4HG0,LSTPFY1C,JUP3MUPD,MPMFIG1A,EMRPGLPA,WQ0UVIAA,BLZOG7CK,PWFIRAGL,NN3FJMUV,NLBO1Z6R"
)
CLIENT_ID_PATH = "/RCDService/api/UtilityOpenApi/GenerateClientID"


def site_argv(**options) -> list[str]:
    """Command-line arguments for the given options (see the module docstring).

    ``human_check`` defaults to False here, unlike the command line's default (on): the
    benchmarks, ``tests/`` and every caller written before the check keep the plain site;
    ``human_check=True`` asks for the person's check."""
    argv: list[str] = ["--human-check" if options.pop("human_check", False) else "--no-human-check"]
    # year-suffixed database names are the stand-in's default, as on CNKI's real pages
    if options.pop("dbname_years", True) is False:
        argv.append("--no-dbname-years")
    for key, value in options.items():
        if value is None:
            continue
        flag = "--" + key.rstrip("_").replace("_", "-")  # break_ -> --break
        if value is True:
            argv.append(flag)
        elif value is False:
            continue
        elif key == "faults":
            for name, rate in value.items():
                argv += ["--fault", f"{name}={rate}"]
        elif key == "categories_file":
            for doc_type, path in value.items():
                argv += ["--categories-file", f"{doc_type}={path}"]
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def _request(
    base_url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict | None = None,
    timeout: float = 30.0,
) -> tuple[int, dict, bytes]:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


class SiteHandle:
    """A running stand-in: its URLs, its control endpoints, and stop()."""

    def __init__(self, process: subprocess.Popen, base_url: str):
        self.process = process
        self.base_url = base_url
        state = self.state()
        self.proxies = state["proxies"]
        self.proxy_urls = [p["url"] for p in self.proxies]
        self.provider_url = state["provider_url"]

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ):
        return _request(self.base_url, method, path, body, headers)

    def _json(self, method: str, path: str, body: bytes | None = None):
        status, _, data = self.request(
            method, path, body, {"Content-Type": "application/json"} if body else None
        )
        if status != 200:
            raise RuntimeError(f"{method} {path}: {status} {data[:200]!r}")
        return json.loads(data)

    def state(self) -> dict:
        return self._json("GET", "/_control")

    def control(self, **changes) -> dict:
        """Change the running site (fault rates, latency, limits, doomed, ...); returns its state."""
        return self._json("POST", "/_control", json.dumps(changes).encode())

    def stats(self) -> dict:
        return self._json("GET", "/_stats")

    # -- the person's check ------------------------------------------------------------------

    def pass_check(self, proxy: str | None = None, proxy_auth: str | None = None) -> dict[str, str]:
        """The cookies (name -> value) of a fresh session a person passed, got over HTTP the
        way a browser gets them: a page GET, its 302 to /verify/home (which sets the session
        cookies and Ecp_ClientId), the slider's form posted as a person's drag
        posts it (the piece on the gap, in 0.7 s), and the 302 back to the page, which then answers. Without the human check
        the page answers at once and this is the plain warm-up plus a client id."""
        client = self.client(proxy, proxy_auth)
        try:
            status, headers, _ = client.get("/kns8s/defaultresult/index")
            if status == 200:  # no check on this site: a plain session is a session
                client.client_id()
                return dict(client.cookies)
            location = headers.get("Location", "")
            if status != 302 or "/verify/home?" not in location:
                raise RuntimeError(f"pass_check: the search page answered {status} {location!r}")
            status, _, page = client.get(location)
            form = _pass_form(page)
            if status != 200 or form is None:
                raise RuntimeError(f"pass_check: no pass control on the verify page ({status})")
            action, fields = form
            status, headers, _ = client.request(
                "POST",
                action,
                urlencode(fields).encode(),
                {"Content-Type": "application/x-www-form-urlencoded"},
            )
            back = headers.get("Location", "")
            if status != 302 or not back:
                raise RuntimeError(f"pass_check: the pass control answered {status}")
            status, headers, _ = client.get(back)
            if status != 200:
                raise RuntimeError(
                    f"pass_check: still checked after the pass ({status} {headers.get('Location')})"
                )
            return dict(client.cookies)
        finally:
            client.close()

    @staticmethod
    def _sid(session) -> str:
        return session["SID_kns_new"] if isinstance(session, dict) else str(session)

    def expire_session(self, session) -> dict:
        """Check a passed session again now (``session``: its cookies or its SID_kns_new)."""
        return self.control(expire_session=self._sid(session))

    def check_after(self, session, requests: int) -> dict:
        """Check a passed session again once it has answered ``requests`` more requests."""
        return self.control(check_after={self._sid(session): int(requests)})

    @staticmethod
    def _scope(doc_type, start, end, categories) -> str:
        return urlencode(
            {
                "type": doc_type,
                "start": start,
                "end": end or start,
                "categories": ",".join(categories or ()),
            }
        )

    def truth(
        self, doc_type: str, start: str, end: str | None = None, categories=(), query: str = ""
    ) -> list[dict]:
        """Every document of the scope (with ``query``, those its expression finds)."""
        scope = self._scope(doc_type, start, end, categories)
        if query:
            scope += "&" + urlencode({"query": query})
        status, _, data = self.request("GET", "/_truth?" + scope)
        if status != 200:
            raise RuntimeError(f"/_truth: {status} {data[:200]!r}")
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line]

    def references(
        self, doc_type: str, start: str, end: str | None = None, categories=()
    ) -> list[dict]:
        """Each document of the scope with its whole reference list (``/_references``)."""
        status, _, data = self.request(
            "GET", "/_references?" + self._scope(doc_type, start, end, categories)
        )
        if status != 200:
            raise RuntimeError(f"/_references: {status} {data[:200]!r}")
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line]

    def rounds(
        self, doc_type: str, start: str, end: str | None = None, categories=()
    ) -> list[dict]:
        return self._json("GET", "/_rounds?" + self._scope(doc_type, start, end, categories))[
            "rounds"
        ]

    def doomed(self, doc_type: str, start: str, end: str | None = None, categories=()) -> list[str]:
        return self._json("GET", "/_doomed?" + self._scope(doc_type, start, end, categories))

    def client(self, proxy: str | None = None, proxy_auth: str | None = None) -> CnkiClient:
        return CnkiClient(self.base_url, proxy=proxy, proxy_auth=proxy_auth)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_site(
    cpu: int | None = None, timeout: float = 15.0, popen=subprocess.Popen, **options
) -> SiteHandle:
    """Start ``python -m standin --port 0`` with the options; ``cpu`` pins it to one core.
    ``popen``: the class that starts it (the suite's forks it from a preloaded parent:
    tests/fixtures/launcher.py)."""
    options.setdefault("port", 0)
    argv = [sys.executable, "-m", "standin", *site_argv(**options)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env["PYTHONIOENCODING"] = "utf-8"
    preexec = None
    if cpu is not None and hasattr(os, "sched_setaffinity"):

        def preexec():
            os.sched_setaffinity(0, {cpu})

    process = popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, preexec_fn=preexec)
    first: list[bytes] = []
    reader = threading.Thread(target=lambda: first.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    line = first[0].decode("utf-8", "replace").strip() if first else ""
    if not line.startswith("CNKI stand-in at http://"):
        process.kill()
        process.wait()
        raise RuntimeError(
            f"the stand-in did not start ({' '.join(argv[1:])}): first line {line!r}"
        )
    # keep draining stdout so the site can never block on a full pipe
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    return SiteHandle(process, line.rsplit(" ", 1)[1])


def _pass_form(page: bytes) -> tuple[str, dict[str, str]] | None:
    """(action, fields) of the verify page's slider form, with the fields a person's drag fills
    in: the piece stopped on the gap (``x``: the gap's ``data-x``) after a person's time."""
    text = page.decode("utf-8", "replace")
    form = re.search(
        r'<form id="standin-pass-form"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', text, re.S
    )
    gap = re.search(r'id="standin-gap" data-x="(\d+)"', text)
    if form is None or gap is None:
        return None
    fields = {
        html.unescape(name): html.unescape(value)
        for name, value in re.findall(
            r'<input type="hidden" name="([^"]*)" value="([^"]*)">', form.group(2)
        )
    }
    fields.update(x=gap.group(1), dragMs="700")
    return html.unescape(form.group(1)), fields


# -- a browser-like client of the kns8s protocol ----------------------------------------------


def query_json(
    doc_type: str,
    start: str | None,
    end: str | None = None,
    code: str | None = None,
    title: str | None = None,
    page_turn: bool = False,
    kuaku: str | None = None,
    operator: str = "SUFFIX",
    facet: bool = False,
    resource: tuple[str, str] | None = None,
    rows: tuple = (),
    expert: str = "",
) -> str:
    """A QueryJson like the real site's, for one date range (None: no PT condition) and
    optionally one code (a Subject CLC item with ``operator``, or with ``facet`` the CCL group)
    and title. ``kuaku`` and ``resource`` (Resource, Classid) override the contract's values.
    ``rows``: the form's several 分类号 rows, (code, Logic) each (Logic 0 AND, 1 OR).
    ``expert``: a professional-search expression, the expert page's one EXPERT item."""
    res, classid, kuaku_default, rlang = SEARCH_RESOURCES[doc_type]
    if resource is not None:
        res, classid = resource
    subject = []
    if expert:
        subject.append(
            {
                "Key": "Expert",
                "Title": "",
                "Logic": 0,
                "Field": "EXPERT",
                "Operator": 0,
                "Value": expert,
                "Value2": "",
            }
        )
    if code and not facet:
        subject.append(
            {"Field": "CLC", "Value": code, "Operator": operator, "Logic": 0, "Title": "分类号"}
        )
    for row_code, logic in rows:
        subject.append(
            {
                "Field": "CLC",
                "Value": row_code,
                "Operator": operator,
                "Logic": logic,
                "Title": "分类号",
            }
        )
    if title:
        subject.append(
            {"Field": "TI", "Value": title, "Operator": "DEFAULT", "Logic": 0, "Title": "题名"}
        )
    groups = []
    if subject:
        groups.append(
            {"Key": "Subject", "Title": "", "Logic": 0, "Items": subject, "ChildItems": []}
        )
    if start is not None:
        groups.append(
            {
                "Key": "ControlGroup",
                "Title": "",
                "Logic": 0,
                "Items": [
                    {
                        "Key": "span[value=PT]",
                        "Title": "发表时间",
                        "Logic": 0,
                        "Field": "PT",
                        "Operator": 7,
                        "Value": start,
                        "Value2": end or start,
                    }
                ],
                "ChildItems": [],
            }
        )
    if code and facet:
        ccl = {
            "Key": code, "Title": "", "Logic": 1, "Field": "CCL", "Operator": "DEFAULT",
            "Value": code, "Value2": "", "Name": "CCL",
        }  # fmt: skip
        groups.append(
            {
                "Key": "SCDBGroup" if res == "CROSSDB" else "MutiGroup",
                "Title": "",
                "Logic": 0,
                "Items": [],
                "ChildItems": [
                    {"Key": "CCL", "Title": "", "Logic": 0, "Items": [ccl], "ChildItems": []}
                ],
            }
        )
    return json.dumps(
        {
            "Platform": "",
            "Resource": res,
            "Classid": classid,
            "Products": "",
            "QNode": {"QGroup": groups},
            "ExScope": 1,
            "SearchType": 2,
            "Rlang": rlang,
            "KuaKuCode": kuaku_default if kuaku is None else kuaku,
            "Expands": {},
            "SearchFrom": 4 if page_turn else 1,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def grid_form(
    doc_type: str,
    start: str | None,
    end: str | None = None,
    code: str | None = None,
    title: str | None = None,
    page: int = 1,
    size: int | str = 50,
    sort_field: str = "",
    sort_type: str = "desc",
    turnpage: str = "",
    **query,
) -> bytes:
    """The grid POST body; ``query`` goes to :func:`query_json` (kuaku, operator, facet, resource,
    rows)."""
    return urlencode(
        {
            "boolSearch": "true" if page == 1 else "false",
            "QueryJson": query_json(doc_type, start, end, code, title, page > 1, **query),
            "pageNum": page,
            "pageSize": size,
            "sortField": sort_field,
            "sortType": sort_type,
            "dstyle": "listmode",
            "boolSortSearch": "false",
            "sentenceSearch": "false",
            "productStr": "",
            "aside": "",
            "searchFrom": "资源范围：总库",
            "CurPage": page,
            "turnpage": turnpage,
        }
    ).encode()


class CnkiClient:
    """One CNKI session seen from a browser: a keep-alive connection and its cookies."""

    def __init__(
        self,
        base_url: str,
        proxy: str | None = None,
        proxy_auth: str | None = None,
        timeout: float = 30,
    ):
        self.base_url = base_url
        self.proxy = proxy
        self.timeout = timeout
        self.cookies: dict[str, str] = {}
        self.last_headers: list[tuple[str, str]] = []
        self.extra_headers = {}
        if proxy_auth:
            self.extra_headers["Proxy-Authorization"] = (
                "Basic " + base64.b64encode(proxy_auth.encode()).decode()
            )
        self._conn = None

    def _connection(self):
        if self._conn is None:
            target = urlsplit(self.proxy or self.base_url)
            self._conn = http.client.HTTPConnection(
                target.hostname, target.port, timeout=self.timeout
            )
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(
        self, method: str, path_or_url: str, body: bytes | None = None, headers: dict | None = None
    ):
        """(status, headers, body); follows no redirects; keeps cookies."""
        parts = urlsplit(path_or_url)
        path = parts.path + ("?" + parts.query if parts.query else "")
        target = f"{self.base_url}{path}" if self.proxy else path  # absolute form via a proxy
        all_headers = dict(self.extra_headers)
        if self.cookies:
            all_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        all_headers.update(headers or {})
        conn = self._connection()
        try:
            conn.request(method, target, body=body, headers=all_headers)
            resp = conn.getresponse()
            data = resp.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            self.close()
            raise
        self.last_headers = resp.getheaders()  # every header, Set-Cookie ones one by one
        for name, value in self.last_headers:
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key.strip()] = rest.split(";", 1)[0]
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        return resp.status, dict(resp.getheaders()), data

    def warmup(self, client_id: bool = True):
        """The warm-up page (session cookies), then, as the 2026 site wants, an Ecp_ClientId from
        GenerateClientID; returns the warm-up page's (status, headers, body)."""
        answer = self.request("GET", "/kns8s/defaultresult/index")
        if client_id:
            self.client_id()
        return answer

    def client_id(self) -> str | None:
        """Ask GenerateClientID for an id and keep it as the ``Ecp_ClientId`` cookie."""
        status, _, body = self.request("GET", CLIENT_ID_PATH)
        if status != 200:
            return None
        value = json.loads(body)["Data"]
        self.cookies["Ecp_ClientId"] = value
        return value

    def grid(self, doc_type: str, start: str, end: str | None = None, **kw):
        body = grid_form(doc_type, start, end, **kw)
        return self.request(
            "POST",
            "/kns8s/brief/grid",
            body,
            {
                "Content-Type": "application/x-www-form-urlencoded; charset=UTF-8",
                "X-Requested-With": "XMLHttpRequest",
            },
        )

    def get(self, url: str):
        return self.request("GET", url)

"""`cnkispider demo`: the offline demo. It starts the repository's stand-in of CNKI (standin/),
plays the person who passes its check (:class:`_DemoPerson`) and crawls a two-day task from it.
The .exe has no stand-in: there the command is not listed and says why."""

from __future__ import annotations

import sys
from pathlib import Path

from cnkispider.cli.common import add_command
from cnkispider.cli.crawl import crawl, print_summary
from cnkispider.config import Config
from cnkispider.words.i18n import N_, _

#: Said by the .exe (cnkispider/cli/__init__.py) and by `demo` frozen: translated where shown
#: (:func:`frozen_no_demo`).
FROZEN_NO_DEMO = N_(
    "the demo is not part of the program: it needs the stand-in site of the repository "
    "(%(folder)s); run it from a checkout: %(command)s"
)


def frozen_no_demo() -> str:
    """The one line of `demo` where the program has no stand-in site (the .exe)."""
    return _("error: %(problem)s") % {
        "problem": _(FROZEN_NO_DEMO) % {"folder": "standin/", "command": "cnkispider demo"}
    }


def cmd_demo(config: Config, args) -> int:
    """The offline demo: start the local stand-in of CNKI and crawl a small task from it."""
    import subprocess

    from cnkispider.cnki.protocol import CLIENT_ID_PATH
    from cnkispider.config import load_config

    root = Path(__file__).resolve().parents[2]  # the checkout: cnkispider/cli/demo.py
    if getattr(sys, "frozen", False):  # the stand-in (standin/) is not bundled
        print(frozen_no_demo(), file=sys.stderr)
        return 2
    if not (root / "standin").is_dir():
        print(
            _("error: %(problem)s")
            % {
                "problem": _("the demo needs the repository checkout (%(folder)s)")
                % {"folder": "standin/"}
            },
            file=sys.stderr,
        )
        return 2
    site = subprocess.Popen(
        # a fifth of the natural counts: at a person's pace (about a request a second per session)
        # the demo's two days then take a couple of minutes, not a quarter of an hour
        [sys.executable, "-m", "standin", "--port", "0", "--seed", "7", "--scale", "0.2"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = site.stdout.readline().strip().rsplit(" ", 1)[-1]
        demo_dir = root / "data" / "demo"
        demo_dir.mkdir(parents=True, exist_ok=True)
        ini = demo_dir / "config.ini"
        ini.write_text(
            "[database]\nurl = sqlite:///cnki-demo.db\n"
            "[task]\nname = demo\ntype = patent\nstart_date = 2024-01-01\nend_date = 2024-01-02\n"
            "categories = G06,H04\n"
            f"[cnki]\nbase_url = {base_url}\n"
            f"client_id_url = {base_url}{CLIENT_ID_PATH}\n"
            # the stand-in checks for a person, as CNKI does; the demo's passes crawl at 1
            # request/s each (the shipped 0.5 is the polite pace for the live site; faster, a
            # pass used at once after the person's own page would draw 4 requests in 2 s)
            "sessions = verified\nsession_pace = 1.0\n"
            "[crawl]\ndata_dir = .\nlease_seconds = 30\nheartbeat_seconds = 2\nlog_level = info\n",
            encoding="utf-8",
        )
        print(_("demo: stand-in CNKI at %(url)s; config %(path)s") % {"url": base_url, "path": ini})
        demo = load_config(ini)
        with _DemoPerson(demo, site, base_url):
            stats = crawl(
                demo,
                settings_overrides={
                    "CNKI_VERBOSE": bool(getattr(args, "verbose", False)),
                    "SESSIONS_POLL": 1.0,
                },
            )
        print_summary(demo, stats)
        db_path = demo.database_url.split(":///", 1)[1]
        print(
            _("demo data: %(path)s (SQLite; look: %(status)s; export: %(export)s)")
            % {
                "path": db_path,
                "status": f"cnkispider --config {ini} status",
                "export": f"cnkispider --config {ini} export --out demo.csv",
            }
        )
        return 0 if stats.get("finish_reason") == "finished" else 1
    finally:
        site.terminate()
        site.wait(10)
        site.stdout.close()


class _DemoPerson:
    """Plays the person of the demo: passes the stand-in's check with its test-only control and
    adds each session to the pool (on CNKI a person does it in a browser: `session login`),
    once before the crawl and again whenever the crawl waits for a person."""

    def __init__(self, config: Config, process, base_url: str):
        import threading
        from urllib.parse import urlsplit

        from cnkispider.sessions import SessionStore
        from standin.client import SiteHandle

        self.site = SiteHandle(process, base_url)
        self.store = SessionStore.from_config(config)
        self.task = config.task.name
        self.host = urlsplit(base_url).hostname or ""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        for session in self.store.list():  # an earlier demo's sessions died with its stand-in
            self.store.remove(session.id)

    def pass_check(self, why: str) -> None:
        """Pass the check and add the session; ``why``: an English sentence marked with N_."""
        cookies = self.site.pass_check()
        session = self.store.add(
            [{"name": k, "value": v, "domain": self.host, "path": "/"} for k, v in cookies.items()],
            source="standin",
        )
        print(
            _(
                "demo: %(why)s: the demo plays the person with the stand-in's test-only pass "
                "control and adds session %(id)s to the pool (on CNKI: %(command)s)"
            )
            % {"why": _(why), "id": session.id, "command": "`cnkispider session login`"},
            flush=True,
        )

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            try:
                if self.store.waiting(self.task):
                    self.pass_check(
                        N_("the crawl waits for a person (a pass lasts a few hundred requests)")
                    )
                    self.done.wait(5.0)  # the worker sees it at its next look at the pool
            except Exception:  # the demo's Redis going away at the end
                return

    def __enter__(self):
        self.pass_check(N_("the stand-in checks for a person, as CNKI does"))
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(10)


def add_demo(sub) -> None:
    """`demo` (not in the .exe: it lists only what it can run)."""
    if not getattr(sys, "frozen", False):  # the exe lists only what it can run (no stand-in site)
        demo = add_command(sub, "demo", help=_("offline demo against the local CNKI stand-in"))
        demo.add_argument("--verbose", action="store_true", help=_("Scrapy's own log lines too"))
        demo.set_defaults(func=cmd_demo)

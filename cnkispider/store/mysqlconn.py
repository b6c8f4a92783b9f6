"""The MySQL/MariaDB driver's connection as the crawler makes it (pymysql, two changes).

- Keep-alive probes on its TCP socket (:func:`keep_alive`), so that a connection whose line
  died fails within a minute instead of waiting for an answer for ever (docs/WORKERS.md, cut
  and bad lines).
- One TLS context per process for the driver's preferred mode, made once, not per connection.

``cnkispider.store.db`` makes every MySQL connection with :func:`connect`.
"""

from __future__ import annotations

import functools
import socket
import ssl

#: A TCP connection to the database that has heard nothing from the server for this long is
#: probed (KEEPALIVE_PROBES times, KEEPALIVE_INTERVAL apart), and ended when no probe is
#: answered or when data it sent stays unacknowledged for the same time (Linux's
#: TCP_USER_TIMEOUT). Why: pymysql waits for an answer without a deadline, and a home PC's line
#: that drops while a statement is in flight loses the answer; the server ends the connection
#: later (idle_transaction_timeout) and gives up resending its close while the line is still
#: down, so nothing would ever arrive: the worker's thread, and the lease of the page it stored,
#: waited forever (tests/test_cut_lines.py: the 90 s cut, seen once in a clean-clone run).
#: With these, the statement fails as a lost connection about a minute into the cut, and is
#: retried like any outage. A live server answers the probes, so a long statement runs on.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 30, 10, 3


def keep_alive(sock: socket.socket) -> None:
    """Turn on the probes above for ``sock`` (the options this platform has: Linux and Windows
    10 all three, macOS the idle time as TCP_KEEPALIVE)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = {
        "TCP_KEEPIDLE": KEEPALIVE_IDLE,
        "TCP_KEEPALIVE": KEEPALIVE_IDLE,  # macOS's name for the idle time
        "TCP_KEEPINTVL": KEEPALIVE_INTERVAL,
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
        "TCP_USER_TIMEOUT": (KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES) * 1000,
    }
    for name, value in options.items():
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


@functools.cache
def _connection_class():
    """pymysql's connection, with two changes.

    Its TCP socket gets the keep-alive probes above (pymysql turns keep-alive on with the
    system's two hours of idle time).

    Its preferred mode's TLS context (no TLS option given: TLS when the server offers it,
    unverified, as the driver does by default) is made once per process, not for every
    connection: making one loads the system's CA bundle (24 ms of CPU, about a twelfth of a
    small crawl's; and workers reconnect often after an outage). A connection given TLS options
    (``[database] ssl_ca``...) keeps pymysql's own: its files are read at each connection, so a
    renewed certificate is taken without a restart."""
    import pymysql

    class Connection(pymysql.connections.Connection):
        preferred_tls: ssl.SSLContext | None = None  # two threads may both make it: harmless

        def _get_server_information(self):
            # the first thing connect() does with its new socket: the probes cover the
            # handshake too, and an error here is reported as pymysql reports its own
            if self._sock.family in (socket.AF_INET, socket.AF_INET6):
                keep_alive(self._sock)
            return super()._get_server_information()

        def _create_ssl_ctx(self, sslp):
            if sslp:
                return super()._create_ssl_ctx(sslp)
            if Connection.preferred_tls is None:
                Connection.preferred_tls = super()._create_ssl_ctx(sslp)
            return Connection.preferred_tls

    return Connection


def connect(*cargs, **cparams):
    """``pymysql.connect``, with the two changes above."""
    return _connection_class()(*cargs, **cparams)

"""The web command's listening socket, bound before anything is written or printed: a port out of
range or taken is one line in the operator's language, and no token file is left behind."""

from __future__ import annotations

import errno
import socket

from cnkispider.exceptions import InputError
from cnkispider.words.i18n import _


def check_port(port: int) -> int:
    """``port`` when a TCP port can be it (1-65535), else InputError naming the range."""
    if not 1 <= port <= 65535:
        raise InputError(_("--port %(port)s: a port is a number from 1 to 65535") % {"port": port})
    return port


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (uvicorn serves on it), or InputError saying why
    not: the port taken (another web, another program), the address not this machine's."""
    check_port(port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(
            _("--host %(host)s: not an address of this machine (%(cause)s)")
            % {"host": host, "cause": exc}
        ) from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart right after a stop
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InputError(
                _(
                    "port %(port)s on %(host)s is already in use (another cnkispider web, or "
                    "another program): stop it, or choose another with --port"
                )
                % {"port": port, "host": host}
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise InputError(
                _(
                    "port %(port)s: not allowed to listen on it (below 1024 needs rights): use --port 8700"
                )
                % {"port": port}
            ) from None
        raise InputError(
            _("cannot listen on %(host)s port %(port)s (%(cause)s)")
            % {"host": host, "port": port, "cause": exc.strerror or exc}
        ) from None
    return sock

"""A small HTTP/1.1 server on asyncio for the stand-in: one process, one thread, keep-alive.

Why hand-written: the site must serve 800 pages a second on one core to the crawler's
persistent connections, and a bare ``asyncio.Protocol`` with Content-Length bodies does that
with room to spare where the stdlib's threaded servers do not. It speaks just enough HTTP for
Scrapy and urllib: request line, headers, a Content-Length body, keep-alive (HTTP/1.1 default,
``Connection: close`` honoured), pipelined requests answered in order, and absolute-form
request targets (``GET http://127.0.0.1:PORT/path``), which is how a client talks to an HTTP proxy.

Proxy endpoints are extra listening ports of the same process: a request arriving on proxy port
``i`` is served as if from the address ``10.0.0.{i+1}``. A dead proxy port accepts a connection
and closes it without answering.

A response with a delay (latency, slow fault) is written later by a timer, so it never blocks
other connections; later requests on the same connection wait for it, as HTTP/1.1 requires.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import sys

from standin.site import Site
from standin.wire import REASONS, Request, Response

MAX_HEAD = 64 * 1024


class HttpProtocol(asyncio.Protocol):
    def __init__(self, site: Site, ip: str, proxy: int | None = None):
        self.site, self.ip, self.proxy = site, ip, proxy
        self.transport = None
        self.buf = b""
        self.busy = False  # a delayed response is pending
        self.continued = False  # "100 Continue" sent for the request being read
        self.closed = False
        self.timer = None

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data):
        self.buf = self.buf + data if self.buf else data
        if not self.busy:
            self._drain()

    def _drain(self):
        site = self.site
        while self.buf and not self.busy and not self.closed:
            if self.proxy is not None and site.is_dead(self.proxy):
                site.stats["dead_proxy_drops"] += 1
                self._close()
                return
            parsed = self._parse()
            if parsed is None:
                return
            req, keep_alive = parsed
            resp = site.handle(req)
            if resp.delay > 0:
                self.busy = True
                self.timer = asyncio.get_running_loop().call_later(
                    resp.delay, self._deliver_later, resp, keep_alive
                )
                return
            self._deliver(resp, keep_alive)

    def _parse(self):
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._deliver(Response(431, b"", "text/plain"), False)
            return None
        lines = buf[:end].decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            self._deliver(Response(400, b"bad request line", "text/plain"), False)
            return None
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0 or "chunked" in headers.get("transfer-encoding", ""):
            self._deliver(Response(411, b"Content-Length required", "text/plain"), False)
            return None
        total = end + 4 + length
        if len(buf) < total:
            if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                self.continued = True  # curl waits for this before sending a larger body
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        self.continued = False
        body = buf[end + 4 : total]
        self.buf = buf[total:]
        if target.startswith("http://"):
            # absolute form: what a client sends to a proxy; only this site is reachable
            hostport, slash, rest = target[7:].partition("/")
            if hostport not in self.site.host_ports:
                self._deliver(
                    Response(502, b"the stand-in proxies only the stand-in", "text/plain"), False
                )
                return None
            target = slash + rest if slash else "/"
        connection = headers.get("connection", "").lower()
        keep_alive = (
            "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        )
        return Request(method, target, headers, body, self.ip, self.proxy), keep_alive

    def _deliver_later(self, resp: Response, keep_alive: bool):
        self.timer = None
        self.busy = False
        if self.closed:
            return
        self._deliver(resp, keep_alive)
        if not self.closed:
            self._drain()

    def _deliver(self, resp: Response, keep_alive: bool):
        transport = self.transport
        if resp.action == "reset":
            # SO_LINGER 0 makes close() send an RST: the client sees "connection reset by peer"
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            transport.abort()
            self.closed = True
            return
        head = [
            f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Error')}\r\n"
            f"Server: cnki-stand-in\r\nContent-Type: {resp.ctype}\r\nContent-Length: {len(resp.body)}\r\n"
        ]
        for name, value in resp.headers:
            head.append(f"{name}: {value}\r\n")
        if not keep_alive:
            head.append("Connection: close\r\n")
        head.append("\r\n")
        transport.write("".join(head).encode("utf-8") + resp.body)
        if not keep_alive:
            self._close()

    def _close(self):
        self.closed = True
        self.transport.close()


class DeadProxyProtocol(asyncio.Protocol):
    """A proxy that has died: accepts, reads the request, closes without a word."""

    def __init__(self, site: Site):
        self.site = site

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.site.stats["dead_proxy_drops"] += 1
        self.transport.close()


async def start(site: Site, host: str, port: int, proxies: int) -> list[asyncio.base_events.Server]:
    """Listen on the site port and ``proxies`` proxy ports; bind the site to them."""
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(lambda: HttpProtocol(site, "127.0.0.1"), host, port, backlog=1024)
    ]
    site_port = servers[0].sockets[0].getsockname()[1]
    proxy_ports = []
    for index in range(proxies):

        def factory(index=index):
            if site.is_dead(index):
                return DeadProxyProtocol(site)
            return HttpProtocol(site, site.proxy_ip(index), index)

        server = await loop.create_server(factory, host, 0, backlog=1024)
        servers.append(server)
        proxy_ports.append(server.sockets[0].getsockname()[1])
    site.bind(host, site_port, proxy_ports)
    return servers


async def serve(site: Site, host: str, port: int, proxies: int) -> None:
    """Run until SIGTERM or SIGINT; the first stdout line is the base URL (for the fixture)."""
    servers = await start(site, host, port, proxies)
    print(f"CNKI stand-in at {site.base}", flush=True)
    for proxy in site.state()["proxies"]:
        print(
            f"proxy {proxy['url']} as {proxy['ip']}{' (dead)' if proxy['dead'] else ''}", flush=True
        )
    print(f"provider {site.base}/proxy-api", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
            signal.signal(signum, lambda *_: loop.call_soon_threadsafe(stop.set))
    await stop.wait()
    for server in servers:
        server.close()
    sys.stdout.flush()

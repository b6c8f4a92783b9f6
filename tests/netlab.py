"""Workers on lines of their own: real network namespaces, veth pairs and cuts (tests run as root).

The shared servers of the user's crawl are one machine reached over the internet; here they are
this machine's private MariaDB, Redis and CNKI stand-in, each listening on a service address of
its own (``10.29.T.x/32`` on ``lo``, T drawn per lab), and every worker runs in a network
namespace of its own, joined to this machine by a veth pair (``10.30.T.4k+1`` here, ``+2``
there) routed to the service addresses. Nothing leaves the machine: the addresses are private,
IP forwarding plays no part (the service addresses are local), and every name made here is
removed at :meth:`Lab.close`.

- :meth:`Lab.cut` / :meth:`Lab.mend`: the host end of a worker's veth down / up: its packets go
  nowhere, its open connections stall as on a dropped home line (no reset), new ones time out.
- :meth:`Lab.block` / :meth:`Lab.unblock`: a policy rule blackholes what one service address
  sends to every worker (their requests arrive, no answer comes back): the service is
  unreachable from every worker while it runs, as when its line drops.
- :class:`BadLine`: this sandbox's kernel has no netem (``tc qdisc add ... netem``: "Specified
  qdisc kind is unknown") and no tc classifiers, so a bad line is made in user space, at packet
  level: the worker's namespace is joined by a TUN pair instead of a veth, and one process
  carries every IP packet between the two ends, each delayed by ``delay`` seconds one way and
  dropped with probability ``loss`` (TCP then retransmits, as on a lossy line).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import heapq
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

from tests.fault_services import OwnMariaDB, free_port, start_redis_server

ROOT = Path(__file__).resolve().parents[1]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_available() -> str | None:
    """None when namespaces and veth pairs can be made here, else why not."""
    if os.geteuid() != 0:
        return "the cut-line tests make network namespaces and need root"
    name = f"c29probe{uuid.uuid4().hex[:6]}"
    done = ip("netns", "add", name, check=False)
    if done.returncode != 0:
        return f"ip netns add failed: {done.stderr.strip()}"
    ip("netns", "del", name, check=False)
    return None


class Lab:
    """Service addresses on lo, and one namespace per worker."""

    def __init__(self):
        self.tag = uuid.uuid4().hex[:6]
        self.rules: list[tuple[str, ...]] = []
        self.namespaces: list[str] = []  # index: k
        self.links: list[str] = []
        self.lines: list[BadLine] = []
        self.addresses: list[str] = []
        self.db_address = self._claim_block()
        self.redis_address = self.service_address(2)
        self.site_address = self.service_address(3)

    def _claim_block(self) -> str:
        """A free 10.29.T.0/24, claimed by adding its first address (another lab may start beside
        this one, in another test process: looking for a free T and then taking it once let two
        labs draw the same T, and the second failed with "Address already assigned")."""
        for _ in range(50):
            self.t = random.randint(1, 254)
            address = f"10.29.{self.t}.1"
            if f"10.29.{self.t}." in ip("-4", "addr", "show").stdout:
                continue
            if ip("addr", "add", f"{address}/32", "dev", "lo", check=False).returncode == 0:
                self.addresses.append(address)
                return address
        raise RuntimeError("no free 10.29.T.0/24 for a lab in 50 draws")

    def service_address(self, n: int) -> str:
        address = f"10.29.{self.t}.{n}"
        ip("addr", "add", f"{address}/32", "dev", "lo")
        self.addresses.append(address)
        return address

    # -- workers' namespaces ----------------------------------------------------------------

    def namespace(self, *, bad_line: tuple[float, float] | None = None) -> tuple[int, str]:
        """(k, name): a new namespace (k < 63 per lab) with a line to the service addresses: a
        veth pair, or a :class:`BadLine` of (delay seconds one way, loss probability)."""
        k = len(self.namespaces)
        assert k < 63, "the lab's /24 holds 63 lines"
        name = f"c29{self.tag}n{k}"
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        here, there = f"10.30.{self.t}.{4 * k + 1}", f"10.30.{self.t}.{4 * k + 2}"
        if bad_line is None:
            host_end, ns_end = f"c29{self.tag}h{k}", f"c29{self.tag}p{k}"
            ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            self.links.append(host_end)
            ip("link", "set", ns_end, "netns", name)
            ip("addr", "add", f"{here}/30", "dev", host_end)
            ip("link", "set", host_end, "up")
            ip("-n", name, "addr", "add", f"{there}/30", "dev", ns_end)
            ip("-n", name, "link", "set", ns_end, "up")
            ip("-n", name, "route", "add", f"10.29.{self.t}.0/24", "via", here)
        else:
            line = BadLine(self, name, k, here, there, *bad_line)
            self.lines.append(line)
        return k, name

    def host_end(self, k: int) -> str:
        return f"c29{self.tag}h{k}"

    def cut(self, k: int) -> None:
        ip("link", "set", self.host_end(k), "down")

    def mend(self, k: int) -> None:
        ip("link", "set", self.host_end(k), "up")
        # the link's address route comes back with the link; wait until it is there
        deadline = time.monotonic() + 10
        while f"10.30.{self.t}.{4 * k}/30" not in ip("route", "show").stdout:
            assert time.monotonic() < deadline, "the route did not come back"
            time.sleep(0.05)

    def block(self, address: str) -> None:
        rule = ("from", f"{address}/32", "to", f"10.30.{self.t}.0/24", "blackhole")
        ip("rule", "add", *rule, "priority", "2900")
        self.rules.append(rule)

    def unblock(self, address: str) -> None:
        rule = ("from", f"{address}/32", "to", f"10.30.{self.t}.0/24", "blackhole")
        ip("rule", "del", *rule, "priority", "2900")
        self.rules.remove(rule)

    def command(self, namespace: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", namespace, *argv]

    def close(self) -> None:
        for line in self.lines:
            line.close()
        for rule in list(self.rules):
            ip("rule", "del", *rule, "priority", "2900", check=False)
        for link in self.links:
            ip("link", "del", link, check=False)
        for name in self.namespaces:
            ip("netns", "del", name, check=False)
        for address in self.addresses:
            ip("addr", "del", f"{address}/32", "dev", "lo", check=False)


# -- a bad line in user space --------------------------------------------------------------------

_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_CLONE_NEWNET = 0x40000000


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def _tun_in_namespace(name: str, namespace: str) -> int:
    """A TUN device made inside ``namespace`` (a thread enters it, makes it, comes back)."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: dict = {}

    def make():
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
            try:
                result["fd"] = _open_tun(name)
            finally:
                libc.setns(own, _CLONE_NEWNET)
        except BaseException as exc:
            result["error"] = exc
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["fd"]


def _far_address_of_data(packet: bytes, outgoing: bool) -> str | None:
    """The far end's address (the destination of an ``outgoing`` packet, else its source) of
    an IPv4 TCP segment that carries data; None for anything else (a bare ACK, SYN or FIN)."""
    if len(packet) < 40 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_TCP:
        return None
    header = (packet[0] & 0x0F) * 4
    if len(packet) < header + 20:
        return None
    tcp_header = (packet[header + 12] >> 4) * 4
    if int.from_bytes(packet[2:4], "big") <= header + tcp_header:
        return None
    return socket.inet_ntoa(packet[16:20] if outgoing else packet[12:16])


class BadLine:
    """Two TUN devices, one here and one in the namespace, and a thread that carries each IP
    packet across after ``delay`` seconds (one way), dropping a share ``loss`` of them. Both
    may be changed while it runs (a line that turns bad).

    ``data_sent`` / ``data_received`` count the TCP segments carrying data that the line
    delivered from / to the namespace, by the far end's address: what a worker exchanged with
    one service (the site, Redis, MariaDB), which its log need not say."""

    def __init__(self, lab: Lab, namespace: str, k: int, here, there, delay: float, loss: float):
        self.delay, self.loss = delay, loss
        self.host_name, self.ns_name = f"c29{lab.tag}t{k}", f"c29{lab.tag}u{k}"
        self.host_fd = _open_tun(self.host_name)
        self.ns_fd = _tun_in_namespace(self.ns_name, namespace)
        ip("addr", "add", here, "peer", there, "dev", self.host_name)
        ip("link", "set", self.host_name, "up")
        ip("-n", namespace, "addr", "add", there, "peer", here, "dev", self.ns_name)
        ip("-n", namespace, "link", "set", self.ns_name, "up")
        ip("-n", namespace, "route", "add", f"10.29.{lab.t}.0/24", "via", here)
        self.carried = self.dropped = 0
        self.data_sent: collections.Counter[str] = collections.Counter()
        self.data_received: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._carry, daemon=True)
        self._thread.start()

    def _carry(self) -> None:
        rng = random.Random()
        queue: list[tuple[float, int, int, bytes]] = []  # (due, seq, fd to write, packet)
        other = {self.host_fd: self.ns_fd, self.ns_fd: self.host_fd}
        seq = 0
        while not self._stop.is_set():
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, fd, packet = heapq.heappop(queue)
                with contextlib.suppress(OSError):
                    os.write(fd, packet)
                self.carried += 1
                outgoing = fd == self.host_fd  # from the namespace
                far = _far_address_of_data(packet, outgoing)
                if far is not None:
                    (self.data_sent if outgoing else self.data_received)[far] += 1
            timeout = min(0.05, max(0.0, queue[0][0] - now)) if queue else 0.05
            readable, _, _ = select.select([self.host_fd, self.ns_fd], [], [], timeout)
            for fd in readable:
                try:
                    packet = os.read(fd, 65536)
                except OSError:
                    continue
                if self.loss and rng.random() < self.loss:
                    self.dropped += 1
                    continue
                seq += 1
                heapq.heappush(queue, (time.monotonic() + self.delay, seq, other[fd], packet))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self.host_fd)
        os.close(self.ns_fd)


# -- servers that listen on a service address ---------------------------------------------------


class LabMariaDB(OwnMariaDB):
    """A private mariadbd listening on 127.0.0.1 (for the test) and on the lab's address."""

    def __init__(self, address: str):
        self.extra_args = (f"--bind-address=127.0.0.1,{address}",)
        self.address = address
        super().__init__()


class LabRedis:
    """A private redis-server on 127.0.0.1 and the lab's address, without persistence; its
    default user (the administrator's) has a password, as a server on a network must."""

    def __init__(self, address: str):
        self.address = address
        self.password = uuid.uuid4().hex
        self.dir = tempfile.mkdtemp(prefix="lab-redis-")
        self.port = free_port()
        self.process = start_redis_server(
            ["--port", str(self.port), "--bind", "127.0.0.1", address,
             "--requirepass", self.password, "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            redis.Redis(port=self.port, password=self.password),
            "redis-server",
        )  # fmt: skip

    @property
    def admin_url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def python() -> str:
    return sys.executable

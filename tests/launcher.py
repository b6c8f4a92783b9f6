"""Start the suite's ``python -m MODULE`` processes by fork from a parent that imported them
already (a "zygote"), not from scratch.

Why: a crawl worker loads 1,079 modules (Scrapy, Twisted, SQLAlchemy, lxml) for 0.8 s of CPU
before it does anything, and the suite starts about 280 workers and commands and 260 stand-ins:
a quarter of its CPU on two cores (docs/TESTING.md). A forked process is a process of its own
(its pid, its pipes, its exit status, killed by any signal) that runs the real entry point with
``runpy``, as ``python -m`` does; only the imports are shared, as a preloading server's are.

What it does not cover is tested elsewhere from scratch: a cold start (test_startup_is_fast),
the executables (test_exe*.py), and the processes the crawler starts itself (``run
--processes``, the reload supervisor) use ``sys.executable``. A process in a network namespace
(tests/netlab.py), or asked for a pre-exec hook, a new session or extra fds, starts the plain
way.

:class:`Popen` is :class:`subprocess.Popen` with the fork done by the zygote: the pid, the
pipes, ``communicate``, ``wait(timeout)``, ``kill`` and ``returncode`` behave as Popen's (it
overrides Popen's process start and wait, private methods of CPython 3.11's subprocess). The
zygote reaps its children and tells the exit status and the child's CPU (``children_cpu``: the
suite's CPU log counts it, tests/conftest.py).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

#: What the zygote imports before it forks: every module a crawl worker, a command and the
#: stand-in load (their imports pull in the rest).
PRELOAD = (
    "cnkispider.cli",
    "cnkispider.cli.crawl",
    "cnkispider.settings",
    "cnkispider.spiders.paper",
    "cnkispider.spiders.patent",
    "cnkispider.spiders.achievement",
    "cnkispider.pipelines",
    "cnkispider.middlewares",
    "cnkispider.scheduling.scheduler",
    "scrapy.crawler",
    "scrapy.core.engine",
    "scrapy.core.downloader.handlers.http11",
    "scrapy.cmdline",
    "pymysql",
    "redis",
    "lxml.html",
    "standin.server",
)
#: The modules the zygote may run (anything else starts the plain way).
MODULES = ("cnkispider.cli", "scrapy", "standin")

_lock = threading.Lock()
_zygote: _Zygote | None = None
_children_cpu = 0.0


def children_cpu() -> float:
    """CPU seconds of this process's zygote children that have ended."""
    return _children_cpu


class _Zygote:
    """The zygote process of this (pytest) process and the path of its socket."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="cnki-zygote-")
        self.path = os.path.join(self.folder, "socket")
        # its stdin is a pipe from us: its end (EOF) tells it we are gone
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.launcher", self.path],
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self.process.kill()
            raise RuntimeError(f"the zygote did not start: {line!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _zygote_of_this_process() -> _Zygote:
    global _zygote
    with _lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = _Zygote()
        return _zygote


def _module_of(args) -> str | None:
    """MODULE of ``[sys.executable, "-m", MODULE, ...]`` when the zygote may run it."""
    if isinstance(args, (str, bytes)) or len(args) < 3:
        return None
    if os.fspath(args[0]) != sys.executable or args[1] != "-m":
        return None
    return args[2] if args[2] in MODULES else None


#: The parameters of CPython 3.11's ``Popen._execute_child`` on POSIX, in order.
_EXECUTE_CHILD = (
    "args",
    "executable",
    "preexec_fn",
    "close_fds",
    "pass_fds",
    "cwd",
    "env",
    "startupinfo",
    "creationflags",
    "shell",
    "p2cread",
    "p2cwrite",
    "c2pread",
    "c2pwrite",
    "errread",
    "errwrite",
    "restore_signals",
    "gid",
    "gids",
    "uid",
    "umask",
    "start_new_session",
    "process_group",
)


class Popen(subprocess.Popen):
    """subprocess.Popen; ``[sys.executable, "-m", MODULE, ...]`` of MODULES forks from the zygote."""

    _conn: socket.socket | None = None

    def _execute_child(self, *params):
        p = dict(zip(_EXECUTE_CHILD, params, strict=True))
        module = _module_of(p["args"])
        plain = (
            module is None
            or p["shell"]
            or p["executable"] is not None
            or p["preexec_fn"] is not None
            or p["pass_fds"]
            or p["start_new_session"]
            or p["process_group"] not in (None, -1)
            or any(p[k] not in (None, -1, ()) for k in ("gid", "gids", "uid", "umask"))
        )
        if plain:
            return super()._execute_child(*params)
        args, cwd, env = p["args"], p["cwd"], p["env"]
        p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite = (
            p[k] for k in ("p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")
        )
        # the child's stdin, stdout and stderr: the pipe ends Popen made, else ours
        fds = [p2cread, c2pwrite, errwrite]
        fds = [fd if fd != -1 else std for fd, std in zip(fds, (0, 1, 2), strict=True)]
        message = {
            "module": module,
            "argv": [os.fspath(a) for a in args[3:]],
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": {
                (k.decode() if isinstance(k, bytes) else k): (
                    v.decode() if isinstance(v, bytes) else v
                )
                for k, v in (os.environ if env is None else env).items()
            },
        }
        zygote = _zygote_of_this_process()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(zygote.path)
        socket.send_fds(conn, [json.dumps(message).encode() + b"\n"], fds)
        reply = _read_line(conn, None)
        self.pid = json.loads(reply)["pid"]
        self._conn = conn
        # the child holds its ends now: close ours, as Popen does after its own fork
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _ended(self, timeout: float | None) -> bool:
        """Read the zygote's word of the child's end (True) within ``timeout`` (None: wait)."""
        global _children_cpu
        if self.returncode is not None:
            return True
        line = _read_line(self._conn, timeout)
        if line is None:
            return False
        if not line:
            raise RuntimeError(f"the zygote went away while process {self.pid} ran")
        ended = json.loads(line)
        self.returncode = ended["status"]
        with _lock:
            _children_cpu += ended["cpu"]
        self._conn.close()
        return True

    def _internal_poll(self, _deadstate=None, **kw):
        if self._conn is None:
            return super()._internal_poll(_deadstate, **kw)
        self._ended(0)
        return self.returncode

    def _wait(self, timeout):
        if self._conn is None:
            return super()._wait(timeout)
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


def _read_line(conn: socket.socket, timeout: float | None) -> bytes | None:
    """One line from ``conn`` (b"" at EOF), None if none came within ``timeout``. A line is
    read a byte at a time: the next line must stay in the socket for the next read."""
    deadline = None if timeout is None else time.monotonic() + timeout
    data = b""
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([conn], [], [], left)
        if not ready:
            if not data:
                return None
            deadline = None  # the rest of a line is on its way: wait for it, not in a spin
        byte = conn.recv(1)
        if not byte or byte == b"\n":
            return data
        data += byte


def run(args, *, input=None, timeout=None, check=False, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run with :class:`Popen`."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
    result = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


# -- the zygote ----------------------------------------------------------------------------------


def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    if "twisted.internet.reactor" in sys.modules:
        raise RuntimeError("a preloaded module installed a reactor: each child installs its own")
    if threading.active_count() > 1:
        raise RuntimeError("a preloaded module started a thread: a fork would copy its locks")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        ready, _, _ = select.select([listener, sys.stdin, *children], [], [])
        for ready_fd in ready:
            if ready_fd is sys.stdin:
                if not os.read(0, 1024):
                    return  # the pytest process that started us is gone
            elif ready_fd is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for pidfd in children:
                        os.close(pidfd)
                    _child(json.loads(message), fds)  # never returns
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                children[os.pidfd_open(pid)] = (pid, conn)
            else:
                pid, conn = children.pop(ready_fd)
                os.close(ready_fd)
                _, status, usage = os.wait4(pid, 0)
                ended = {
                    "status": os.waitstatus_to_exitcode(status),
                    "cpu": usage.ru_utime + usage.ru_stime,
                }
                try:
                    conn.sendall(json.dumps(ended).encode() + b"\n")
                except OSError:
                    pass  # its Popen is gone
                conn.close()


def _child(message: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` in its cwd and environment."""
    code = 1
    try:
        for std, fd in enumerate(fds):
            os.dup2(fd, std)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter has
        env = message["env"]
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(env)
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [message["cwd"], *[p for p in extra if p not in sys.path], *sys.path[1:]]
        encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, encoding=encoding, closefd=False)
        sys.stdout = io.TextIOWrapper(
            open(1, "wb", closefd=False, buffering=0 if unbuffered else -1),
            encoding=encoding,
            write_through=unbuffered,
        )
        sys.stderr = io.TextIOWrapper(
            open(2, "wb", closefd=False, buffering=0),
            encoding=encoding,
            errors="backslashreplace",
            line_buffering=True,
        )
        sys.argv = [message["module"], *message["argv"]]
        import runpy

        try:
            runpy.run_module(message["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    finally:
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1])

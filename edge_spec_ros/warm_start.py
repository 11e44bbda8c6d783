"""Start this package's Python child processes from a fork server that has already imported what
they all import (torch, transformers' Qwen2-VL, zmq, rclpy and the package's own modules).

Every verifier, node or bring-up process imports torch and transformers before it does anything:
about 10 s of one core on a 2-core AVX2 machine, more than most of what the process then does in a
test or a short benchmark. ``popen`` (and ``run``, as ``subprocess.run``) starts the same command line
(``python -m MODULE ...``, ``python SCRIPT.py ...`` or ``python -c CODE ...``) as a fork of a server
process whose imports are done once (``PRELOAD``): the child is a process like any other (its own pid,
environment, working directory, output, signals and exit status, reported by the fork server, which is
its parent), it only skips the imports. Anything else (another program, options ``popen`` does not
take) runs through ``subprocess`` unchanged, as does everything while the fork server is off;
``process_context`` is the same for ``multiprocessing`` workers.

It is off unless ``EDGE_SPEC_ROS_WARM_START=1`` is in the environment (the test suite sets it:
``test/conftest.py``). What differs from a fresh interpreter, none of which the package relies on:
the modules in ``PRELOAD`` were imported under the environment the fork server started with (that
of the first process that used it), the entry module runs through ``runpy``, the parent process is
the fork server, and ``ps`` shows the fork server's command line.

The fork server (``python -m edge_spec_ros.warm_start SOCKET``) listens on a Unix socket in a
private directory; per child one connection carries the request (JSON, and the descriptors that
become the child's stdout and stderr), then the child's pid, then its exit status. It exits when its
parent closes its stdin (or dies); children it started keep running, as ``subprocess`` children would.
"""

from __future__ import annotations

import atexit
import io
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence

ENV_FLAG = "EDGE_SPEC_ROS_WARM_START"
# What the package's processes import before they do anything. Entry modules are not preloaded:
# ``runpy`` runs them fresh as ``__main__``.
PRELOAD = (
    "torch",
    "transformers.models.qwen2_vl.modeling_qwen2_vl",
    "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
    "zmq",
    "rclpy",
    "edge_spec_ros.cloud.server",
    "edge_spec_ros.edge.modes",
    "edge_spec_ros.models.pairs",
)
START_TIMEOUT_S = 180.0  # the fork server's imports, on a loaded machine
STOP_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 1 << 20


def enabled() -> bool:
    return os.environ.get(ENV_FLAG, "") == "1"


def process_context() -> multiprocessing.context.BaseContext:
    """``multiprocessing``'s context for a benchmark's worker processes: "spawn" (no fork after torch's
    threads exist), or, with the warm start on, "forkserver" with ``PRELOAD`` imported there once."""
    if not enabled():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


class WarmProcess:
    """The ``subprocess.Popen`` surface the package and its tests use, for a fork server's child:
    ``pid``, ``stdout`` (with ``stdout=subprocess.PIPE``), ``returncode`` (negative: ended by that
    signal), ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, args: Sequence[str], pid: int, status: socket.socket, stdout) -> None:
        self.args = list(args)
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._status = status
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._wait(0.0)

    def wait(self, timeout: float | None = None) -> int:
        if self._wait(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _wait(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None and select.select([self._status], [], [], timeout)[0]:
                reply = self._status.recv(4096)
                if not reply:
                    raise ChildProcessError(f"the fork server is gone: the status of {self.pid} is unknown")
                self.returncode = int(json.loads(reply)["exit"])
                self._status.close()
            return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # exited since: its status is on the way
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = subprocess.Popen | WarmProcess  # what ``popen`` returns


class _Client:
    """This process's fork server, started at first use."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="edge_spec_ros_warm_")
        self.path = os.path.join(self._dir, "fork.sock")
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, self.path], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        ready = select.select([self._proc.stdout], [], [], START_TIMEOUT_S)[0]
        if not ready or self._proc.stdout.readline().strip() != "ready":
            self._proc.kill()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RuntimeError(f"the fork server did not start within {START_TIMEOUT_S:.0f} s")
        atexit.register(self.close)

    def close(self) -> None:
        """End the fork server (its children keep running) and remove its socket."""
        self._proc.stdin.close()
        try:
            self._proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def start(self, request: dict, fds: list[int]) -> tuple[int, socket.socket]:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.path)
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        reply = conn.recv(4096)
        if not reply:
            raise RuntimeError("the fork server closed the connection without starting the process")
        answer = json.loads(reply)
        if "error" in answer:
            raise OSError(answer["error"])
        return int(answer["pid"]), conn


_client: _Client | None = None
_client_lock = threading.Lock()


def popen(args: Sequence[str], stdout=None, stderr=None, env: dict[str, str] | None = None, cwd=None,
          text: bool = False, **rest) -> Process:
    """``subprocess.Popen(args, stdout=..., stderr=..., env=..., cwd=..., text=...)``, from the fork
    server when it is on and ``args`` is this interpreter running Python code (see the module).
    ``stdout``: None, ``subprocess.PIPE``, a file or a descriptor; ``stderr``: None, a file or a
    descriptor, or ``subprocess.STDOUT``."""
    global _client
    entry = _entry(args)
    if not enabled() or entry is None or rest or stderr == subprocess.PIPE \
            or (stderr == subprocess.STDOUT and stdout is None):
        return subprocess.Popen(args, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text, **rest)
    with _client_lock:
        if _client is None:
            _client = _Client()
    read = None
    fds = {}  # 1 and 2: what the child's stdout and stderr become
    if stdout == subprocess.PIPE:
        read, fds[1] = os.pipe()
    elif stdout is not None:
        fds[1] = _fileno(stdout)
    if stderr == subprocess.STDOUT:
        fds[2] = fds[1]
    elif stderr is not None:
        fds[2] = _fileno(stderr)
    request = {"entry": entry, "targets": list(fds), "env": dict(os.environ if env is None else env),
               "cwd": None if cwd is None else os.fspath(cwd)}
    try:
        pid, status = _client.start(request, list(fds.values()))
    finally:
        if read is not None:
            os.close(fds[1])
    return WarmProcess(args, pid, status, None if read is None else os.fdopen(read, "r" if text else "rb"))


def run(args: Sequence[str], capture_output: bool = False, text: bool = False, timeout: float | None = None,
        check: bool = False, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``subprocess.run`` with these arguments, its process started by ``popen`` (the output captured
    in temporary files: nothing to drain while it runs)."""
    if not enabled() or _entry(args) is None:
        return subprocess.run(args, capture_output=capture_output, text=text, timeout=timeout, check=check,
                              env=env, cwd=cwd)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = popen(args, stdout=out if capture_output else None, stderr=err if capture_output else None,
                     env=env, cwd=cwd)

        def captured(f) -> str | bytes | None:
            if not capture_output:
                return None
            f.seek(0)
            data = f.read()
            return data.decode(errors="replace") if text else data

        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(args, timeout, captured(out), captured(err)) from None
        done = subprocess.CompletedProcess(args, proc.returncode, captured(out), captured(err))
    if check:
        done.check_returncode()
    return done


def _fileno(target) -> int:
    return target if isinstance(target, int) else target.fileno()


def _entry(args: Sequence[str]) -> list | None:
    """["module" | "code" | "path", what, argv] for ``sys.executable -m M ...``, ``-c CODE ...`` or
    ``SCRIPT.py ...``; None for anything else."""
    args = [os.fspath(a) for a in args]
    if len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) > 2:
        return ["module", args[2], [args[2], *args[3:]]]
    if args[1] == "-c" and len(args) > 2:
        return ["code", args[2], ["-c", *args[3:]]]
    if not args[1].startswith("-") and args[1].endswith(".py"):
        return ["path", args[1], args[1:]]
    return None


# --- the fork server ---------------------------------------------------------------------------------

def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here (a cloud-only install has no rclpy): a child imports it
            pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        readable = select.select([listener, sys.stdin, wake_r], [], [])[0]
        if sys.stdin in readable and not sys.stdin.readline():
            return  # the parent closed our stdin, or died
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap(children)
        if listener in readable:
            conn = listener.accept()[0]
            pid = _fork(conn, listener, children, (wake_r, wake_w))
            if pid is not None:
                children[pid] = conn


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:  # the requester is gone
                pass
            conn.close()


def _fork(conn: socket.socket, listener: socket.socket, children: dict[int, socket.socket],
          wake: tuple[int, int]) -> int | None:
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, 2)
        request = json.loads(data)
    except (OSError, ValueError) as exc:
        conn.send(json.dumps({"error": f"bad request: {exc}"}).encode())
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (listener, *children.values()):
            fd.close()
        for fd in wake:
            os.close(fd)
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.send(json.dumps({"pid": pid}).encode())
    return pid


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: the caller's output, environment, directory and argv; run the entry as
    ``__main__``; exit with its status (``atexit`` functions run, as at an interpreter's end)."""
    import runpy
    import warnings

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for target, fd in zip(request["targets"], fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    if request["cwd"] is not None:
        os.chdir(request["cwd"])
    unbuffered = os.environ.get("PYTHONUNBUFFERED", "") not in ("", "0")
    sys.stdin = open(0, closefd=False)
    sys.stdout = _stream(1, unbuffered, line_buffering=False)
    sys.stderr = _stream(2, unbuffered, line_buffering=True)
    kind, what, argv = request["entry"]
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(what)) if kind == "path" else ("" if kind == "code" else os.getcwd())
    code = 0
    try:
        with warnings.catch_warnings():  # runpy: the package is imported already (PRELOAD)
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
            if kind == "module":
                runpy.run_module(what, run_name="__main__", alter_sys=True)
            elif kind == "path":
                runpy.run_path(what, run_name="__main__")
            else:
                exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stream(fd: int, unbuffered: bool, line_buffering: bool) -> io.TextIOWrapper:
    """A text stream on ``fd`` as the interpreter makes one for a pipe or a file: stdout buffered,
    stderr line-buffered, neither with PYTHONUNBUFFERED."""
    raw = open(fd, "wb", buffering=0, closefd=False)
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding="utf-8",
                            errors="backslashreplace", line_buffering=line_buffering and not unbuffered,
                            write_through=unbuffered)


if __name__ == "__main__":
    _serve(sys.argv[1])

"""``kubectl exec`` and ``kubectl attach`` on the node: sessions the API server streams.

exec runs the command in the container's namespaces (mount, PID, IPC, UTS, and the user
namespace of a non-privileged container: nsenter on the sandbox's init) under the
container's own confinement: the same identity and capabilities (setpriv), the same
seccomp filter (seccompexec.py installs it before the command), its environment and
working directory. With a TTY the command gets a
pseudo-terminal of its own as controlling terminal (``setsid -c``) and follows resizes.
It joins the container's cgroup, so it counts against the container's limits.

attach follows what the container writes from now on (stdout and stderr come through one
pipe here, so both arrive as stdout) until it exits; the container's stdin is not
connected (containers here start with stdin closed), so input is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Callable, Mapping, Sequence

from localcluster.kubelet import seccomp
from localcluster.kubelet.sandbox import Container
from localcluster.kubelet.security import Confinement, setpriv_argv

logger = logging.getLogger(__name__)

STDOUT, STDERR = 1, 2
NSENTER = "/usr/bin/nsenter"
SETSID = "/usr/bin/setsid"
SETPRIV = "/usr/bin/setpriv"
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccompexec.py")
TIOCSPTLCK = 0x40045431
TIOCGPTPEER = 0x5441
DEFAULT_SIZE = (80, 24)
"""Columns and rows until the client's first resize arrives."""


def open_pty(pts_dir: str | None) -> tuple[int, int]:
    """A (master, slave) pair from the container's own devpts (``/proc/PID/root/dev/pts``)
    so that the command's ttyname() resolves inside it; the host's as a fallback."""
    if pts_dir is not None:
        try:
            master = os.open(os.path.join(pts_dir, "ptmx"),
                             os.O_RDWR | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as err:
            logger.debug("no devpts of the container's own (%s): host pty", err)
        else:
            try:
                fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
                slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
                return master, int(slave)
            except OSError:
                os.close(master)
                raise
    return os.openpty()


def exec_argv(*, target_pid: int, confinement: Confinement, command: Sequence[str],
              tty: bool, python: str, seccomp_fd: int | None) -> list[str]:
    """The host command line that runs ``command`` inside the container (pure): in the
    namespaces, root and working directory of ``target_pid``, the container's main
    process."""
    argv = [NSENTER, f"--target={target_pid}", "--mount", "--pid", "--ipc", "--uts"]
    if not confinement.privileged:  # its user namespace (userns.py) after the others
        argv.append("--user")
    argv += ["--root", "--wd", "--"]
    if tty:
        argv += [SETSID, "--ctty"]
    argv += setpriv_argv(confinement, setpriv=SETPRIV)
    if seccomp_fd is not None:
        argv += [python, "-I", "-S", HELPER, str(seccomp_fd), "--"]
    return argv + list(command)


class ExecSession:
    """A command running in a container; output as (channel, bytes) from :meth:`read`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=64)
        self._proc: asyncio.subprocess.Process | None = None
        self._master: int | None = None
        self._paused = False
        self._stdin_open = True
        self._pump_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, argv: Sequence[str], *, env: Mapping[str, str], stdin: bool,
                    tty: bool, pass_fds: Sequence[int] = (), pts_dir: str | None = None,
                    preexec: Callable[[], None] | None = None) -> ExecSession:
        self = cls()
        if tty:
            master, slave = open_pty(pts_dir)
            self._master = master
            os.set_blocking(master, False)
            self.resize(*DEFAULT_SIZE)
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=slave, stdout=slave, stderr=slave, env=dict(env),
                    pass_fds=tuple(pass_fds), start_new_session=True, preexec_fn=preexec)
            finally:
                os.close(slave)
            asyncio.get_running_loop().add_reader(master, self._pty_readable)
        else:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=dict(env), pass_fds=tuple(pass_fds), start_new_session=True,
                preexec_fn=preexec)
            if not stdin:
                self._stdin_open = False
            self._pump_task = asyncio.create_task(
                self._pump(self._proc.stdout, self._proc.stderr))
        return self

    async def _pump(self, out: asyncio.StreamReader | None,
                    err: asyncio.StreamReader | None) -> None:
        async def one(reader: asyncio.StreamReader | None, channel: int) -> None:
            while reader is not None:
                data = await reader.read(65536)
                if not data:
                    return
                await self._queue.put((channel, data))

        await asyncio.gather(one(out, STDOUT), one(err, STDERR))
        await self._queue.put(None)

    def _pty_readable(self) -> None:
        master = self._master
        assert master is not None
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: every holder of the terminal's other end has gone
            data = b""
        loop = asyncio.get_running_loop()
        if not data:
            loop.remove_reader(master)
            self._queue.put_nowait(None)
            return
        self._queue.put_nowait((STDOUT, data))
        if self._queue.full():  # back-pressure: read on once the client caught up
            loop.remove_reader(master)
            self._paused = True

    async def read(self) -> tuple[int, bytes] | None:
        item = await self._queue.get()
        if self._paused and self._master is not None and not self._queue.full():
            self._paused = False
            asyncio.get_running_loop().add_reader(self._master, self._pty_readable)
        return item

    async def write(self, data: bytes) -> None:
        if not self._stdin_open or self._proc is None:
            return
        if self._master is not None:
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self._master, view):]
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            return
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.write(data)
                await self._proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                self._stdin_open = False

    def close_stdin(self) -> None:
        if not self._stdin_open:
            return
        self._stdin_open = False
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.write(self._master, b"\x04")  # end of input at the terminal
        elif self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()

    def resize(self, width: int, height: int) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._master, termios.TIOCSWINSZ,
                            struct.pack("HHHH", height, width, 0, 0))

    async def wait(self) -> int | None:
        assert self._proc is not None
        code = await self._proc.wait()
        if self._master is not None:
            with contextlib.suppress(OSError, ValueError):
                asyncio.get_running_loop().remove_reader(self._master)
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None
        return 128 - code if code < 0 else code

    def kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        if self._master is not None:  # hang up the terminal: its session gets SIGHUP
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self._master)
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None


def filter_fd(confinement: Confinement) -> int | None:
    return seccomp.filter_fd(confinement.caps) if confinement.seccomp else None


class AttachSession:
    """The live output of a running container (see the module docstring)."""

    MAX_QUEUED = 256
    """Chunks kept for a slow client; beyond that, output is dropped (it is in the log)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._ended = False
        self.detach: Callable[[], None] = lambda: None

    def feed(self, chunk: bytes | None) -> None:
        """Called from the container's log thread: a chunk, or None when it ended."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
            self._loop.call_soon_threadsafe(self._put, chunk)

    def _put(self, chunk: bytes | None) -> None:
        if self._ended:
            return
        if chunk is None:
            self._ended = True
            self._queue.put_nowait(None)
        elif self._queue.qsize() < self.MAX_QUEUED:
            self._queue.put_nowait((STDOUT, chunk))

    async def read(self) -> tuple[int, bytes] | None:
        return await self._queue.get()

    async def write(self, data: bytes) -> None:
        return None  # the container's stdin is not connected

    def close_stdin(self) -> None:
        return None

    def resize(self, width: int, height: int) -> None:
        return None

    async def wait(self) -> int | None:
        return 0  # the kubelet reports a finished attach as a success

    def kill(self) -> None:
        self.detach()
        self._put(None)


def run_in_container(container: Container, command: Sequence[str], *, python: str,
                     timeout: float) -> bool:
    """Run ``command`` in the container as exec does, output discarded; True when it
    exited 0 within ``timeout`` seconds (exec probes)."""
    pid = container.main_pid() if container.poll() is None else None
    if pid is None:
        return False
    conf = container.spec.confinement
    fd = filter_fd(conf)
    try:
        argv = exec_argv(target_pid=pid, confinement=conf, command=command, tty=False,
                         python=python, seccomp_fd=fd)
        proc = subprocess.Popen(argv, env=dict(container.spec.env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                pass_fds=(fd,) if fd is not None else (),
                                start_new_session=True, preexec_fn=container.cgroup_join())
    finally:
        if fd is not None:
            os.close(fd)
    try:
        return proc.wait(timeout) == 0
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False

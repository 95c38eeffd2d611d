"""One container as a local process in its own mount and PID namespace (bubblewrap).

The sandbox sees the host's /usr read-only, the entries of the host's /etc programs
need (:data:`ETC_ENTRIES`; all of it when privileged) read-only, the project checkout
and its Python read-only (so ``python -m importer`` runs the checkout's code), a private
/tmp, /proc and /dev, and exactly the pod's volumes: directories bound at their
``mountPath``, loop devices at their ``devicePath``. Once the mounts are made a
non-privileged container enters a user namespace of its own (userns.py), so that no
capability it is given reaches them. The network is the host's (pods
bind their own 127.x address). Output (stdout and stderr, interleaved as a runtime
would) goes to a bounded log file; the termination message is a host file bound at
``terminationMessagePath``.

Stopping follows Kubernetes: SIGTERM to the container's main process, SIGKILL to all of
it after the grace period. Exit codes of signalled processes are 128+signal (137, 143).
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import glob
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from localcluster.kubelet import eviction, logformat, memstats, seccomp, userns
from localcluster.kubelet.cgroups import Cgroup, CgroupManager, Limits, PodCgroup
from localcluster.kubelet.security import Confinement, setpriv_argv

logger = logging.getLogger(__name__)

BWRAP = "bwrap"
SETPRIV = "/usr/bin/setpriv"
"""util-linux's setpriv, reached through the sandbox's read-only /usr."""
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs", "/proc/bus", "/proc/irq")
"""Read-only in the sandbox, as containerd's ``readonlyPaths`` (a uid-0 process may
write sysctls and the SysRq trigger by file mode alone, without any capability)."""
SYS_MASKED = ("/sys/firmware", "/sys/kernel/debug", "/sys/kernel/security")
"""Hidden behind an empty read-only tmpfs, as containerd masks /sys/firmware."""
SYS_VIRTUAL_BLOCK = "/sys/devices/virtual/block"
"""The node's loop (and other virtual) block devices, each loop's ``loop/backing_file``
naming the host file behind another pod's volume: hidden behind an empty read-only
tmpfs but for the container's own Block volumes' devices (/sys/block, /sys/class/block
and /sys/dev/block only link here)."""
PROC_MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
               "/proc/latency_stats", "/proc/acpi", "/proc/scsi")
"""Hidden behind /dev/null (files) or an empty tmpfs (directories), as containerd's
``maskedPaths``."""
LOG_MAX_BYTES = 10 * 1024 * 1024
"""A container log rotates once past this (one previous file is kept, as ``.1``)."""
TERMINATION_MESSAGE_MAX = 4096
"""Bytes of termination message Kubernetes keeps."""


def project_root() -> str:
    """The checkout this code runs from (holds importer/, vm/, localcluster/…)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_paths() -> list[str]:
    """Directories the sandboxed Python needs: the venv and the interpreter's prefix."""
    paths = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(p for p in paths if p not in ("/", "/usr"))


@dataclass(frozen=True)
class Mount:
    host: str
    path: str
    """Where it appears in the sandbox."""
    read_only: bool = False
    device: bool = False
    """A block device (bound with ``--dev-bind``)."""


@dataclass(frozen=True)
class SandboxSpec:
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: str
    mounts: Sequence[Mount] = ()
    cwd: str | None = None
    termination_host_file: str | None = None
    termination_path: str = "/dev/termination-log"
    limits: Limits = field(default_factory=Limits)
    hostname: str | None = None
    confinement: Confinement = field(default_factory=Confinement)


ETC_ENTRIES = (
    "alternatives", "ca-certificates", "ca-certificates.conf", "debian_version",
    "ethertypes", "gai.conf", "host.conf", "hosts", "inputrc", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "libnl-3", "libvirt", "locale.alias", "localtime", "magic",
    "magic.mime", "mime.types", "netconfig", "networks", "nsswitch.conf", "os-release",
    "protocols", "python3", "python3.*", "qemu", "resolv.conf", "rpc", "sasl2", "services",
    "ssl", "terminfo", "timezone", "xattr.conf")
"""What a non-privileged container sees of the host's /etc (glob patterns of its
entries): what programs need to run (the dynamic loader's cache, name service and
resolver configuration, CA certificates, time zone, Debian's alternatives, Python's and
libvirt/QEMU's configuration), not the node's accounts (passwd, group, shadow), SSH keys,
machine-id or tools' credentials (pip.conf, gitconfig, npmrc…)."""


def _minimal_etc(spec: SandboxSpec) -> bool:
    return not spec.confinement.privileged


def _system_dir_is_tmpfs(path: str, targets: Sequence[str]) -> bool:
    return any(t.startswith(path + "/") and not os.path.lexists(t) for t in targets)


def _private_tmp(spec: SandboxSpec, targets: Sequence[str]) -> bool:
    """Whether /tmp is a tmpfs of the sandbox's own (else a read-only directory of the
    root); a volume mounted at /tmp then covers it."""
    return not spec.confinement.read_only_root or "/tmp" in targets  # noqa: S108


def _targets(spec: SandboxSpec) -> list[str]:
    return [m.path for m in spec.mounts] + [spec.termination_path]


def writable_tmpfs(spec: SandboxSpec) -> list[str]:
    """The sandbox's own writable tmpfs mounts, its writable layer (what counts against
    its ``ephemeral-storage`` limit): its root unless read-only, its private /tmp unless a
    volume covers it, /usr when made a tmpfs to hold a volume (/etc, a tmpfs too, is made
    read-only once its entries and volumes are in)."""
    targets = _targets(spec)
    out = [] if spec.confinement.read_only_root else ["/"]
    if _private_tmp(spec, targets) and "/tmp" not in targets:  # noqa: S108
        out.append("/tmp")  # noqa: S108
    if _system_dir_is_tmpfs("/usr", targets):
        out.append("/usr")
    return out


def _system_dir(path: str, targets: Sequence[str], *, only: Sequence[str] | None = None
                ) -> list[str]:
    """Bind a host system directory read-only. When a volume must appear *inside* it
    (``/etc/cfg``), bwrap cannot create the mount point in a read-only bind, so the
    directory becomes a tmpfs holding read-only binds of each of its entries instead;
    with ``only`` (glob patterns), of those entries alone."""
    if only is None and not _system_dir_is_tmpfs(path, targets):
        return ["--ro-bind", path, path]
    argv = ["--tmpfs", path]
    for entry in sorted(os.listdir(path)):
        if only is not None and not any(fnmatch.fnmatchcase(entry, p) for p in only):
            continue
        full = os.path.join(path, entry)
        if os.path.islink(full):
            argv += ["--symlink", os.readlink(full), full]
        else:
            argv += ["--ro-bind", full, full]
    return argv


HOST_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                "/etc/security/opasswd", "/etc/ssl/private", "/etc/ssh/ssh_host_*_key")
"""The host's secrets in the /etc the sandbox shares: hidden (a real container has an
/etc of its own image, and a uid-0 pod holds CAP_DAC_OVERRIDE)."""


def _hide_host_secrets() -> list[str]:
    argv: list[str] = []
    for pattern in HOST_SECRETS:
        for path in sorted(glob.glob(pattern)):
            if os.path.islink(path):
                continue
            if os.path.isdir(path):
                argv += ["--tmpfs", path, "--remount-ro", path]
            else:
                argv += ["--ro-bind", "/dev/null", path]
    return argv


def _own_block_sysfs(mounts: Sequence[Mount]) -> list[str]:
    """The sysfs directories, under :data:`SYS_VIRTUAL_BLOCK`, of the block devices the
    container's volumeDevices are."""
    out = []
    for m in mounts:
        if not m.device:
            continue
        try:
            st = os.stat(m.host)
        except OSError:
            continue
        if not stat.S_ISBLK(st.st_mode):
            continue
        real = os.path.realpath(f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
        if real.startswith(SYS_VIRTUAL_BLOCK + "/") and real not in out:
            out.append(real)
    return out


def _parents(path: str) -> list[str]:
    """``/a/b/c`` → ``["/a", "/a/b"]``."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _proc_confinement() -> list[str]:
    argv: list[str] = []
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in PROC_MASKED:
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    return argv


def bwrap_argv(spec: SandboxSpec, *, info_fd: int | None = None,
               seccomp_fd: int | None = None, userns_fd: int | None = None) -> list[str]:
    """The bubblewrap command line for ``spec``.

    With ``userns_fd`` (every container but a privileged one) bubblewrap enters that user
    namespace once the mounts are made, before the command runs (userns.py: the
    container then holds no capability over its mounts).

    Every writable mount in the sandbox is ``nodev`` (bubblewrap mounts its tmpfs and
    plain binds so); /dev itself is read-only once the pod's devices are in it, so no
    device node can appear there. Mount points bubblewrap has to create are made 0755
    first (it makes them 0700, which a non-root container could not cross).
    """
    conf = spec.confinement
    targets = _targets(spec)
    argv = [BWRAP]
    argv += _system_dir("/usr", targets)
    argv += _system_dir("/etc", targets, only=ETC_ENTRIES if _minimal_etc(spec) else None)
    argv += _hide_host_secrets()
    argv += [
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
    ]
    if conf.privileged:
        argv += ["--dev-bind", "/dev", "/dev", "--proc", "/proc"]
        if os.path.isdir("/sys"):
            argv += ["--bind", "/sys", "/sys"]
    else:
        argv += ["--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]  # noqa: S108
        for dev in conf.devices:
            if not dev.startswith("/dev/") or dev in _BWRAP_DEVICES or dev in targets:
                continue
            argv += ["--dev-bind", dev, dev]
        argv += ["--proc", "/proc", *_proc_confinement()]
        if os.path.isdir("/sys"):  # read-only, as a runtime mounts it (libvirt needs it)
            argv += ["--ro-bind", "/sys", "/sys"]
            for path in SYS_MASKED:
                if os.path.isdir(path):
                    argv += ["--tmpfs", path, "--remount-ro", path]
            if os.path.isdir(SYS_VIRTUAL_BLOCK):
                argv += ["--tmpfs", SYS_VIRTUAL_BLOCK]
                for own in _own_block_sysfs(spec.mounts):
                    argv += ["--ro-bind", own, own]
                argv += ["--remount-ro", SYS_VIRTUAL_BLOCK]
    if _private_tmp(spec, targets):
        argv += ["--perms", "1777", "--tmpfs", "/tmp"]  # noqa: S108 - private /tmp
    else:  # as in an image: /tmp is there, read-only with the rest of the root
        argv += ["--perms", "1777", "--dir", "/tmp"]  # noqa: S108
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if spec.hostname:
        argv += ["--unshare-uts", "--hostname", spec.hostname]
    made: set[str] = set()
    binds: list[str] = []
    for path in [project_root(), *python_paths()]:
        binds += ["--ro-bind", path, path]
    for m in spec.mounts:
        if m.device:
            binds += ["--dev-bind", m.host, m.path]
        else:
            binds += ["--ro-bind" if m.read_only else "--bind", m.host, m.path]
    if spec.termination_host_file:
        binds += ["--bind", spec.termination_host_file, spec.termination_path]
    for path in [project_root(), *python_paths(), *targets]:
        for parent in _parents(path):
            if parent not in made and parent not in ("/usr", "/etc", "/dev", "/proc", "/sys"):
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
    argv += binds
    if not conf.privileged:
        argv += ["--remount-ro", "/dev"]
    if _minimal_etc(spec) or _system_dir_is_tmpfs("/etc", targets):
        argv += ["--remount-ro", "/etc"]
    if conf.read_only_root:
        argv += ["--remount-ro", "/"]
    if spec.cwd:
        argv += ["--chdir", spec.cwd]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if userns_fd is not None:
        argv += ["--userns2", str(userns_fd)]
    argv += ["--", *setpriv_argv(conf, setpriv=SETPRIV), *spec.argv]
    return argv


_BWRAP_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                            "/dev/urandom", "/dev/tty"})
"""The nodes ``bwrap --dev`` provides itself."""


class LogWriter(threading.Thread):
    """Copies a pipe to a log file (logformat.py records), rotating it once past
    ``max_bytes``."""

    def __init__(self, pipe: int, path: str, max_bytes: int = LOG_MAX_BYTES) -> None:
        super().__init__(daemon=True, name=f"log:{os.path.basename(path)}")
        self.pipe = pipe
        self.path = path
        self.max_bytes = max_bytes
        self._listeners: list[Callable[[bytes | None], None]] = []
        self._listeners_lock = threading.Lock()
        self._ended = False

    def listen(self, listener: Callable[[bytes | None], None]) -> Callable[[], None]:
        """Call ``listener`` with every chunk from now on, and None at the end (kubectl
        attach); returns the function that stops it."""
        with self._listeners_lock:
            if self._ended:
                listener(None)
                return lambda: None
            self._listeners.append(listener)

        def stop() -> None:
            with self._listeners_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)
        return stop

    def _tell(self, chunk: bytes | None) -> None:
        with self._listeners_lock:
            if chunk is None:
                self._ended = True
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(chunk)
            except Exception:  # a listener's bug must not stop the log
                logger.exception("log listener failed")

    def run(self) -> None:
        encoder = logformat.Encoder()
        out = open(self.path, "ab")  # noqa: SIM115 - reopened on rotation
        try:
            while True:
                try:
                    chunk = os.read(self.pipe, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self._tell(chunk)
                out.write(encoder.feed(chunk, _now()))
                out.flush()
                if out.tell() > self.max_bytes:
                    out.close()
                    os.replace(self.path, self.path + ".1")
                    out = open(self.path, "ab")  # noqa: SIM115
            out.write(encoder.close(_now()))
        finally:
            self._tell(None)
            out.close()
            os.close(self.pipe)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def read_raw(path: str) -> bytes:
    """The log file's records (the rotated part first)."""
    data = b""
    for p in (path + ".1", path):
        with contextlib.suppress(FileNotFoundError), open(p, "rb") as fh:
            data += fh.read()
    return data


def read_log(path: str, *, tail_bytes: int | None = None) -> bytes:
    """The container's output, optionally only its last bytes."""
    data = logformat.plain(read_raw(path))
    if tail_bytes is not None:
        data = data[-tail_bytes:]
    return data


class SandboxError(Exception):
    """The sandbox could not be started (bwrap missing, bad mount…)."""


class Container:
    """A started sandbox. ``wait``/``poll`` give the exit code; ``stop`` ends it."""

    def __init__(self, spec: SandboxSpec, *, cgroups: CgroupManager | None = None,
                 name: str = "container", on_exit: Callable[[], None] | None = None,
                 pod_cgroup: PodCgroup | None = None) -> None:
        self.spec = spec
        self.name = name
        self._on_exit = on_exit
        """Called (from a thread of its own) once the container's process has exited."""
        self._cgroups = cgroups
        self._pod_cgroup = pod_cgroup
        """The pod's pids cgroup (podPidsLimit), joined with the container's own."""
        self._cgroup: Cgroup | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: LogWriter | None = None
        self._init_pid: int | None = None
        self.started_at = 0.0

    def start(self) -> None:
        if shutil.which(BWRAP) is None:
            raise SandboxError("bubblewrap (bwrap) is not installed")
        if self._cgroups is not None:
            self._cgroup = self._cgroups.create(self.name, self.spec.limits,
                                                pod=self._pod_cgroup)
        if not os.path.exists(SETPRIV):
            raise SandboxError(f"{SETPRIV} (util-linux) is not installed")
        conf = self.spec.confinement
        try:
            filter_fd = seccomp.filter_fd(conf.caps) if conf.seccomp else None
        except (OSError, ImportError) as err:
            raise SandboxError(f"cannot build the seccomp filter: {err}") from err
        try:
            userns_fd = None if conf.privileged else userns.identity_userns()
        except userns.UsernsError as err:
            if filter_fd is not None:
                os.close(filter_fd)
            self.cleanup()
            raise SandboxError(str(err)) from err
        log_r, log_w = os.pipe()
        info_r, info_w = os.pipe()
        cgroup = self._cgroup
        extra_fds = tuple(fd for fd in (info_w, filter_fd, userns_fd) if fd is not None)

        def child_setup() -> None:
            if cgroup is not None:
                cgroup.join()

        os.makedirs(os.path.dirname(self.spec.log_path), exist_ok=True)
        try:
            self._proc = subprocess.Popen(
                bwrap_argv(self.spec, info_fd=info_w, seccomp_fd=filter_fd,
                           userns_fd=userns_fd),
                stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w,
                env=dict(self.spec.env), pass_fds=extra_fds,
                preexec_fn=child_setup if cgroup is not None else None,
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as err:
            # SubprocessError: the cgroup join in preexec_fn failed (seen with many pods
            # starting at once); a failed start, not a crashed pod worker
            for fd in (log_r, info_r):
                os.close(fd)
            raise SandboxError(f"cannot start bwrap: {err}") from err
        finally:
            for end in (log_w, info_w, filter_fd, userns_fd):
                if end is not None:
                    with contextlib.suppress(OSError):
                        os.close(end)
        self.started_at = time.time()
        self._log = LogWriter(log_r, self.spec.log_path)
        self._log.start()
        threading.Thread(target=self._read_info, args=(info_r,), daemon=True).start()
        if self._on_exit is not None:
            # A pidfd taken now (only this thread reaps the process, so the pid is still
            # bwrap's): it becomes readable when bwrap exits, whoever reaps it later.
            try:
                pidfd = os.pidfd_open(self._proc.pid)
            except OSError as err:  # a kernel without pidfds: the worker's tick sees it
                logger.debug("no pidfd for %s: %s", self.name, err)
            else:
                threading.Thread(target=self._notify_exit, args=(pidfd, self._on_exit),
                                 daemon=True, name=f"exit:{self.name}").start()

    @staticmethod
    def _notify_exit(pidfd: int, on_exit: Callable[[], None]) -> None:
        """Tell the owner once the container's process has exited."""
        try:
            waiter = select.poll()
            waiter.register(pidfd, select.POLLIN)
            waiter.poll()
        finally:
            os.close(pidfd)
        on_exit()

    def _read_info(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
        with contextlib.suppress(ValueError):
            self._init_pid = int(json.loads(raw)["child-pid"])

    def cgroup_join(self) -> Callable[[], None] | None:
        """What a process started into this container (exec) calls between fork and exec
        to count against the container's limits; None when it has no cgroup."""
        return self._cgroup.join if self._cgroup is not None else None

    def listen(self, listener: Callable[[bytes | None], None]) -> Callable[[], None]:
        """Follow the container's output from now on (see LogWriter.listen)."""
        if self._log is None:
            listener(None)
            return lambda: None
        return self._log.listen(listener)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def poll(self) -> int | None:
        assert self._proc is not None
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._log is not None:
            self._log.join(5)
        return code

    def writable_usage(self) -> int:
        """Bytes the running sandbox holds in its writable layer (:func:`writable_tmpfs`);
        0 before it reported its pid and once it has exited (the layer went with it)."""
        if self._proc is None or self._init_pid is None or self._proc.poll() is not None:
            return 0
        return eviction.mounts_usage(self._init_pid, parent=self._proc.pid,
                                     paths=writable_tmpfs(self.spec))

    def memory_usage(self) -> int:
        """Bytes of the node's memory the running sandbox holds, for node-pressure
        eviction: its cgroup's working set when it has a memory cgroup (which counts
        the tmpfs pages its processes wrote, its writable layer), else its writable
        layer plus the anonymous memory of its process tree; 0 before it reported its
        pid and once it has exited."""
        if self._proc is None or self._init_pid is None or self._proc.poll() is not None:
            return 0
        layer = self.writable_usage()
        if self._cgroup is not None:
            ws = memstats.cgroup_working_set(self._cgroup.dirs, self._cgroup.version)
            if ws is not None:
                return max(ws, layer)
        return layer + memstats.tree_anon_rss(self._init_pid, parent=self._proc.pid)

    def main_pid(self) -> int | None:
        """The container's own process: the child of bwrap's init in the PID namespace."""
        if self._init_pid is None:
            return None
        try:
            with open(f"/proc/{self._init_pid}/task/{self._init_pid}/children") as fh:
                children = fh.read().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def signal(self, sig: int) -> None:
        deadline = time.monotonic() + 2.0
        while self._init_pid is None and self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # bwrap reports its child's pid right after it forks
        pid = self.main_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole sandbox (bwrap dies, and the namespace with it)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def stop(self, grace: float) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.poll() is None:
            self.signal(signal.SIGTERM)
            code = self.wait(max(grace, 0.0))
            if code is None:
                logger.info("%s did not stop in %.1fs: killing it", self.name, grace)
                self.kill()
        code = self.wait()
        assert code is not None
        return code

    def oom_killed(self) -> bool:
        return self._cgroup is not None and self._cgroup.oom_killed()

    def cleanup(self) -> None:
        if self._cgroup is not None:
            self._cgroup.remove()

    def exit_code(self) -> int:
        """Exit code as Kubernetes reports it (128+signal for a signalled process)."""
        code = self.wait()
        assert code is not None
        return 128 - code if code < 0 else code

    def termination_message(self, *, fallback_to_logs: bool) -> str:
        """The message the container left, or (FallbackToLogsOnError) its log's tail."""
        msg = b""
        if self.spec.termination_host_file:
            with contextlib.suppress(FileNotFoundError), open(
                self.spec.termination_host_file, "rb"
            ) as fh:
                msg = fh.read(TERMINATION_MESSAGE_MAX)
        if not msg and fallback_to_logs:
            lines = read_log(self.spec.log_path, tail_bytes=TERMINATION_MESSAGE_MAX)
            msg = b"\n".join(lines.splitlines()[-80:])[-TERMINATION_MESSAGE_MAX:]
        return msg.decode("utf-8", errors="replace")

"""The test image ``rootdisk/testbox``: a container that does what its args say.

Each word is a step, run in order (``print hello sleep 1 exit 3``):

    print TEXT | stderr TEXT | env NAME | sleep SECONDS | exit CODE
    message TEXT        write TEXT to the termination message file
    statfs PATH         print {"path", "size", "avail"} of the filesystem at PATH (JSON)
    blocksize PATH      print the size of the block device at PATH
    write PATH TEXT | read PATH | append PATH TEXT (prints the new line count)
    fill PATH MIB       write MIB mebibytes of non-zero bytes to PATH, synced
    trap-term CODE      on SIGTERM print "got SIGTERM" and exit CODE
    ignore-term         ignore SIGTERM (so only SIGKILL ends it)
    serve PORT          answer HTTP GETs on $POD_IP:PORT with "hello from $POD_NAME"
    whoami              GET this pod from the API server with the service-account token
    ready FILE          create FILE (a readiness signal: the steps before it are done)
    status              print {Uid, Gid, Groups, CapEff, CapBnd, NoNewPrivs, Seccomp} of
                        /proc/self/status (JSON)
    stat PATH           print {"path", "uid", "gid", "mode"} (JSON, mode in octal)

Attempts, each printing ``NAME: OK`` or ``NAME: <errno name>`` (never failing the box):

    try-mount SRC TARGET FSTYPE FLAGS   mount(2); FLAGS: remount,bind,ro... or -
    try-mknod PATH MAJOR MINOR          mknod(2) of a block device
    try-open PATH                       open and read 512 bytes (prints their sha256)
    try-write PATH TEXT                 create/overwrite PATH
    try-unshare-user                    unshare(CLONE_NEWUSER)
    try-unshare-mount                   unshare(CLONE_NEWNS): later steps run in the copy
    try-umount PATH                     umount2(PATH, 0)
    find-in-proc RELPATH                open /proc/*/root/RELPATH for every visible pid
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import http.server
import json
import os
import signal
import ssl
import sys
import time
import urllib.request


def _term_handler(code: int):
    def handler(signum, frame):
        # not print(): the handler runs between two bytecodes of the main thread, which
        # may be inside print("up", flush=True) still holding stdout's buffer lock once
        # its bytes are out (the test saw "up" and signalled): print() here then raises
        # "reentrant call inside <_io.BufferedWriter>" and the box exits 1 (a CI run's
        # test_sigterm_then_sigkill_after_grace). os.write takes no lock.
        os.write(sys.stdout.fileno(), b"got SIGTERM\n")
        os._exit(code)

    return handler


def whoami() -> None:
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    with open(f"{sa}/token") as fh:
        token = fh.read()
    with open(f"{sa}/namespace") as fh:
        namespace = fh.read()
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
    url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods/{os.environ['POD_NAME']}"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            body = json.load(resp)
        print("whoami:", resp.status, body["metadata"]["name"], flush=True)
    except urllib.error.HTTPError as err:
        print("whoami:", err.code, flush=True)


_MS = {"ro": 1, "nodev": 4, "remount": 32, "bind": 4096}


def _attempt(name: str, fn, *args) -> None:
    try:
        extra = fn(*args)
    except OSError as err:
        print(f"{name}: {errno.errorcode.get(err.errno or 0, err.errno)}", flush=True)
    else:
        print(f"{name}: OK" + (f" {extra}" if extra else ""), flush=True)


def _libc_call(func: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, func)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _mount(src: str, target: str, fstype: str, flags: str) -> None:
    bits = 0
    for f in flags.split(","):
        bits |= _MS.get(f, 0)
    _libc_call("mount", src.encode(), target.encode(), fstype.encode(), bits, None)


def _read512(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(512)).hexdigest()


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _status() -> dict[str, str]:
    keys = ("Uid", "Gid", "Groups", "CapEff", "CapBnd", "CapPrm", "NoNewPrivs", "Seccomp")
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = value.strip()
    return out


def _find_in_proc(rel: str) -> str:
    found = []
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/root/{rel}", "rb"):
                found.append(pid)
        except OSError:
            pass
    if found:
        return "found in " + ",".join(found)
    raise OSError(errno.ENOENT, "not found")


def main(words: list[str]) -> None:
    it = iter(words)
    for word in it:
        if word == "print":
            print(next(it), flush=True)
        elif word == "stderr":
            print(next(it), file=sys.stderr, flush=True)
        elif word == "env":
            name = next(it)
            print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
        elif word == "sleep":
            time.sleep(float(next(it)))
        elif word == "exit":
            sys.exit(int(next(it)))
        elif word == "message":
            path = os.environ.get("TERMINATION_PATH", "/dev/termination-log")
            with open(path, "w") as fh:
                fh.write(next(it))
        elif word == "statfs":
            path = next(it)
            st = os.statvfs(path)
            print(json.dumps({"path": path, "size": st.f_blocks * st.f_frsize,
                              "avail": st.f_bavail * st.f_frsize}), flush=True)
        elif word == "blocksize":
            with open(next(it), "rb") as fh:
                print("blocksize", fh.seek(0, os.SEEK_END), flush=True)
        elif word == "write":
            path = next(it)
            with open(path, "w") as fh:
                fh.write(next(it))
        elif word == "fill":
            path, mib = next(it), int(next(it))
            with open(path, "wb") as fh:
                for _ in range(mib):
                    fh.write(b"\x5a" * (1 << 20))
                fh.flush()
                os.fsync(fh.fileno())
            print("filled", path, flush=True)
        elif word == "read":
            with open(next(it)) as fh:
                print("read:", fh.read(), flush=True)
        elif word == "append":
            path = next(it)
            with open(path, "a") as fh:
                fh.write(next(it) + "\n")
            with open(path) as fh:
                print("lines:", len(fh.readlines()), flush=True)
        elif word == "trap-term":
            signal.signal(signal.SIGTERM, _term_handler(int(next(it))))
        elif word == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif word == "serve":
            port = int(next(it))
            class Handler(http.server.BaseHTTPRequestHandler):
                def do_GET(self) -> None:
                    body = f"hello from {os.environ.get('POD_NAME', '?')}".encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            server = http.server.HTTPServer((os.environ["POD_IP"], port), Handler)
            print("serving", flush=True)
            server.serve_forever()
        elif word == "whoami":
            whoami()
        elif word == "ready":
            open(next(it), "w").close()
        elif word == "status":
            print(json.dumps(_status()), flush=True)
        elif word == "stat":
            path = next(it)
            st = os.stat(path)
            print(json.dumps({"path": path, "uid": st.st_uid, "gid": st.st_gid,
                              "mode": oct(st.st_mode & 0o7777)}), flush=True)
        elif word == "try-mount":
            args = [next(it) for _ in range(4)]
            _attempt("mount", _mount, *args)
        elif word == "try-mknod":
            path, major, minor = next(it), int(next(it)), int(next(it))
            _attempt("mknod", os.mknod, path, 0o600 | 0o060000, os.makedev(major, minor))
        elif word == "try-open":
            path = next(it)
            _attempt("open", _read512, path)
        elif word == "try-write":
            path, text = next(it), next(it)
            _attempt("write", _write, path, text)
        elif word == "try-unshare-user":
            _attempt("unshare", _libc_call, "unshare", 0x10000000)
        elif word == "try-unshare-mount":
            _attempt("unshare", _libc_call, "unshare", 0x00020000)
        elif word == "try-umount":
            _attempt("umount", _libc_call, "umount2", next(it).encode(), 0)
        elif word == "find-in-proc":
            rel = next(it)
            _attempt("find", _find_in_proc, rel)
        else:
            print(f"testbox: unknown step {word!r}", file=sys.stderr, flush=True)
            sys.exit(64)


if __name__ == "__main__":
    main(sys.argv[1:])

"""The test image ``rootdisk/testbox``: a container that does what its args say.

Each word is a step, run in order (``print hello sleep 1 exit 3``):

    print TEXT | stderr TEXT | env NAME | sleep SECONDS | exit CODE
    message TEXT        write TEXT to the termination message file
    statfs PATH         print {"path", "size", "avail"} of the filesystem at PATH (JSON)
    blocksize PATH      print the size of the block device at PATH
    write PATH TEXT | read PATH | append PATH TEXT (prints the new line count)
    trap-term CODE      on SIGTERM print "got SIGTERM" and exit CODE
    ignore-term         ignore SIGTERM (so only SIGKILL ends it)
    serve PORT          answer HTTP GETs on $POD_IP:PORT with "hello from $POD_NAME"
    whoami              GET this pod from the API server with the service-account token
"""

from __future__ import annotations

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
        print("got SIGTERM", flush=True)
        sys.exit(code)

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
        else:
            print(f"testbox: unknown step {word!r}", file=sys.stderr, flush=True)
            sys.exit(64)


if __name__ == "__main__":
    main(sys.argv[1:])

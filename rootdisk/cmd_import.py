"""``rootdisk import URL DEST``: the importer from a shell, with a live progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vocab import sources


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import an image URL into a file or block device",
        description="Import an image (http, https or s3 URL, or a docker:// container-disk "
        "image; qcow2, raw, vmdk, vdi, vhd, vhdx, optionally gz/xz/zst-compressed) as a raw "
        "disk at DEST.",
    )
    parser.add_argument("url", help="http(s)://…, s3://bucket/key or docker://host/repo:tag")
    parser.add_argument("dest", type=Path, help="destination file (disk.img) or block device")
    parser.add_argument("--size", help="volume size (e.g. 10Gi): checked before the transfer,"
                        " and the disk is grown to the usable size")
    parser.add_argument("--checksum", help="ALGO:HEX (md5, sha1, sha256, sha512)")
    parser.add_argument("--content-type", choices=["kubevirt", "archive"], default="kubevirt")
    parser.add_argument("--cert-dir", type=Path, help="directory of CA certificates to trust")
    parser.add_argument("--insecure", action="store_true", help="do not verify TLS")
    parser.add_argument("--header", action="append", default=[], metavar="K:V",
                        help="extra HTTP header (repeatable)")
    parser.add_argument("--secret-file", type=Path,
                        help="file with accessKeyId and secretKey lines (basic auth, S3 or"
                        " registry)")
    parser.add_argument("--architecture", help="docker://: the platform architecture to pull")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL for s3:// URLs")
    parser.add_argument("--filesystem-overhead", default="0.06",
                        help="fraction of --size kept for the file system (default 0.06)")
    parser.add_argument("--preallocate", action="store_true", help="preallocate the disk")
    parser.add_argument("--scratch-dir", type=Path, help="where compressed qcow2 etc. unpack")
    parser.add_argument("--retries", type=int, default=6, help="tries per read (default 6)")
    parser.add_argument("--stall-min-bytes", default="1Mi",
                        help="fail (Stalled) when fewer bytes arrive in --stall-window"
                        " (default 1Mi)")
    parser.add_argument("--stall-window", type=float, default=300.0,
                        help="seconds of the minimum-throughput window (default 300)")
    parser.add_argument("--deadline", type=float,
                        help="seconds the whole import may take (default: no deadline)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    from importer import config as cfg
    from importer.errors import ConfigError
    from importer.redact import install_log_filter
    from importer.run import run
    from importer.termination import EXIT_PERMANENT, message

    install_log_filter()
    try:
        config = _config(args, cfg)
    except ConfigError as err:
        if args.json:
            print(message(reason=err.reason, text=err.message, retryable=False).decode())
        else:
            print(f"rootdisk import: {err.message}", file=sys.stderr)
        return EXIT_PERMANENT
    bar = _Bar() if sys.stderr.isatty() and not args.json else None
    outcome = run(config, listeners=[bar] if bar else [])
    if bar:
        bar.close()
    if args.json:
        print(outcome.termination.decode())
    elif outcome.result is not None:
        r = outcome.result
        print(f"imported {r.format}{''.join('.' + c for c in r.compression)} via {r.route}"
              f" ({r.why}) in {r.seconds:.2f}s")
        fetched = f", fetched {r.fetched_bytes} bytes" if r.fetched_bytes else ""
        print(f"  virtual size {r.virtual_size} bytes, disk {r.size} bytes,"
              f" allocated {r.allocated_bytes} bytes{fetched}")
        if r.checksum:
            print(f"  checksum {r.checksum} verified")
    else:
        assert outcome.error is not None
        print(f"rootdisk import: {outcome.error.reason}: {outcome.error.message}",
              file=sys.stderr)
    return outcome.exit_code


def _config(args: argparse.Namespace, cfg: Any) -> Any:
    scheme = args.url.split(":", 1)[0]
    # the first declared source reading the scheme (http before s3 for http and https);
    # an unknown scheme is refused by the http source's check, naming its schemes
    source = next((kind for kind, schemes in sources.URL_SCHEMES.items() if scheme in schemes),
                  sources.HTTP)
    if args.s3_endpoint:
        source = sources.S3
    key_id = secret = None
    if args.secret_file:
        key_id, secret = _read_secret(args.secret_file, cfg)
    checksum = None
    if args.checksum:
        try:
            checksum = cfg.parse_checksum(args.checksum, field="--checksum")
        except ValueError as err:
            raise cfg.ConfigError(str(err)) from None
    try:
        overhead = cfg.parse_overhead(args.filesystem_overhead)
    except ValueError as err:
        raise cfg.ConfigError(f"--filesystem-overhead: {err}") from None
    return cfg.ImporterConfig(
        source=source,
        endpoint=args.url,
        dest=args.dest,
        image_size=cfg.parse_size(args.size, field_name="--size") if args.size else None,
        content_type=cfg.ContentType(args.content_type),
        checksum=checksum,
        cert_dir=args.cert_dir,
        insecure_tls=args.insecure,
        access_key_id=key_id,
        secret_key=secret,
        extra_headers=tuple(cfg.parse_header(h, field_name="--header") for h in args.header),
        options=tuple((name, value) for name, value in (
            (sources.S3_ENDPOINT, args.s3_endpoint),
            (sources.REGISTRY_ARCHITECTURE, args.architecture)) if value),
        filesystem_overhead=overhead,
        preallocation=args.preallocate,
        termination_log=None,
        metrics_port=None,
        scratch_dir=args.scratch_dir,
        retry_attempts=args.retries,
        partial_file=True,
        stall_min_bytes=cfg.parse_byte_count(args.stall_min_bytes,
                                             field_name="--stall-min-bytes"),
        stall_window=args.stall_window,
        deadline=args.deadline,
    )


def _read_secret(path: Path, cfg: Any) -> tuple[str, str]:
    """``accessKeyId``/``secretKey`` as ``key=value`` or ``key: value`` lines (the keys of
    a CDI endpoint Secret)."""
    values: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError as err:
        raise cfg.ConfigError(f"--secret-file: cannot read {path}: {err.strerror}") from None
    for line in text.splitlines():
        for sep in ("=", ":"):
            key, found, value = line.partition(sep)
            if found:
                values[key.strip()] = value.strip()
                break
    missing = [k for k in ("accessKeyId", "secretKey") if not values.get(k)]
    if missing:
        raise cfg.ConfigError(f"--secret-file: {path} has no {' or '.join(missing)}")
    return values["accessKeyId"], values["secretKey"]


class _Bar:
    """A tqdm bar in bytes when the total is known, else in percent."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._tqdm = tqdm
        self.bar: Any = None

    def __call__(self, update: Any) -> None:
        if self.bar is None:
            self.bar = self._tqdm(total=100.0, unit="%", file=sys.stderr,
                                  bar_format="{l_bar}{bar}| {n:.1f}% [{elapsed}<{remaining}]"
                                  " {postfix}")
        self.bar.n = update.percent
        if update.elapsed > 0 and update.done_bytes:
            rate = update.done_bytes / update.elapsed
            self.bar.set_postfix_str(f"{update.done_bytes / 2**20:.0f} MiB, "
                                     f"{rate / 2**20:.1f} MiB/s", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

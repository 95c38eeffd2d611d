"""An nbdkit Python plugin exporting a remote image read-only, for qemu-img to convert
while the image streams.

nbdkit loads this file into its own Python; it opens the same source as the importer
(``from_env`` over the variables ``config.source_env`` wrote into nbdkit's environment:
credentials never travel in argv) and answers reads through a ``BlockCache``. A failure
is written as JSON to ``ROOTDISK_NBD_ERRORS`` so the importer reports the real reason
(NotFound, Unauthorized, …) instead of qemu-img's "Input/output error".
"""

import json
import os
import threading

import nbdkit  # provided by nbdkit's python plugin host

from importer.blockcache import BlockCache
from importer.config import from_env
from importer.errors import ImporterError
from importer.sources import open_source

API_VERSION = 2

_state = {}
_local = threading.local()
_lock = threading.Lock()


def thread_model():
    return nbdkit.THREAD_MODEL_PARALLEL


def config(key, value):
    raise RuntimeError(f"unknown parameter {key!r}: configuration comes from the environment")


def config_complete():
    _state["config"] = from_env(os.environ)
    _state["size"] = int(os.environ["ROOTDISK_NBD_SIZE"])
    # 2 MiB blocks, four fetched ahead: the link stays busy on ~12 MiB of buffers.
    _state["cache"] = BlockCache(_fetch, size=_state["size"], capacity=2, prefetch=4,
                                 block_size=2 * 1024 * 1024)


def _source():
    """A source per thread: a requests session is not thread-safe. (S3 arrives here as a
    presigned HTTP URL, so nbdkit never loads boto3.)"""
    source = getattr(_local, "source", None)
    if source is None:
        source = _local.source = open_source(_state["config"])
    return source


def _fetch(start, length):
    source = _source()
    try:
        return source.read_range(start, length)
    except ImporterError as err:
        _record(err)
        raise


def _record(err):
    path = os.environ.get("ROOTDISK_NBD_ERRORS")
    if not path:
        return
    with _lock, open(path, "w") as f:
        json.dump({"reason": err.reason, "message": err.message, "retryable": err.retryable}, f)


def open(readonly):
    return 1


def get_size(h):
    return _state["size"]


def can_multi_conn(h):
    return True


def can_write(h):
    return False


def pread(h, buf, offset, flags):
    buf[:] = _state["cache"].read(offset, len(buf))


def close(h):
    pass

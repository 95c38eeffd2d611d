"""Work run beside the caller's, in threads, that never holds up a failure.

``ThreadPoolExecutor`` as a context manager waits for its tasks on every exit. When the
caller fails (the watchdog's ``Stalled`` raised from SIGALRM, a SIGTERM, a refused
image), that wait kept the import alive as long as the side task's slowest read: a
``qemu-img check`` reading the metadata of a trickling server through nbdkit held a
stalled import for 40 s beyond its stall window. Here a failure does not wait: the
caller's unwinding stops what the task waits on (its children, nbdkit, its sockets) and
the thread ends on its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor


@contextlib.contextmanager
def pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """An executor that is waited for when the block ends normally, and not when it
    raises (tasks not yet started are cancelled)."""
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        yield executor
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown(wait=True)

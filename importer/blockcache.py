"""Large aligned reads with read-ahead, in front of a ranged-read source.

qemu-img reads a qcow2 image in cluster-sized pieces (often 64 KiB); one HTTP request per
piece would spend the transfer on round trips. The cache fetches whole blocks (their
size is the caller's: ``rangeproxy.FEW_LARGE``, ``MANY_SMALL``), keeps a few, and fetches
the next blocks in the background while qemu-img works on this one, so the link stays
busy. Concurrent readers of one block wait for a single fetch. Memory is bounded by
``(capacity + prefetch) * block_size``.

It reads ahead only once the reads run in sequence over a block or more (each read
continuing one of the last few), as the kernel's read-ahead waits for a sequential
stream. ``qemu-img info`` and ``check`` read a qcow2's header, refcount and L1/L2 tables
out of order before the convert starts; ahead of each of those reads the cache fetched
the next blocks, which evicted the ones still to be read again: a 512 MiB qcow2 from S3
was fetched as 18 blocks (72 MiB) more than its size, and the convert started 0.17 s
later.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

BLOCK_SIZE = 4 * 1024 * 1024
RECENT_READS = 8
"""Reads remembered to tell a read in sequence (qemu-img's convert has several in
flight at once) from a jump."""
SEQUENCE_GAP = 64 * 1024
"""Bytes a read may skip past the end of the one it continues: a compressed qcow2 keeps
an L2 table here and there between its compressed clusters, which qemu-img reads in
order, and a run cut there read the next block without anything ahead."""


class BlockCache:
    def __init__(
        self,
        fetch: Callable[[int, int], bytes],
        *,
        size: int,
        block_size: int = BLOCK_SIZE,
        capacity: int = 8,
        prefetch: int = 2,
    ) -> None:
        self._fetch = fetch
        self.size = size
        self.block_size = block_size
        self.capacity = capacity
        self.prefetch = prefetch
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, Future[bytes]] = OrderedDict()
        self._recent: deque[tuple[int, int, int]] = deque(maxlen=RECENT_READS)
        """(start, end, where its run of reads in sequence started) of the last reads."""
        self._pool = ThreadPoolExecutor(max_workers=max(1, prefetch), thread_name_prefix="fetch")

    def read_parts(self, offset: int, length: int) -> list[memoryview]:
        """The bytes at ``[offset, offset+length)`` as views into the cached blocks, one
        per block touched: a writer sends them one after the other, never joined."""
        if offset < 0 or offset + length > self.size:
            raise ValueError(f"read [{offset}, {offset + length}) outside [0, {self.size})")
        parts: list[memoryview] = []
        end = offset + length
        index = offset // self.block_size
        while offset < end:
            index = offset // self.block_size
            block = self._block(index)
            start = offset - index * self.block_size
            take = min(end - offset, len(block) - start)
            parts.append(memoryview(block)[start : start + take])
            offset += take
        if self._run_length(end - length, end) >= self.block_size:
            for ahead in range(1, self.prefetch + 1):
                self._block_future(index + ahead, wait=False)
        return parts

    def _run_length(self, start: int, end: int) -> int:
        """The bytes read in sequence up to ``end`` by the run ``[start, end)`` belongs
        to: a read continues one of the last reads if it starts inside it or at most
        :data:`SEQUENCE_GAP` bytes past its end (an HTTP reader such as nbdkit's curl
        plugin, which read the range endpoint until round 25, asks for a byte more than
        it reads, so its next read starts on that read's last byte)."""
        with self._lock:
            run = next((began for prior, ended, began in reversed(self._recent)
                        if prior < start <= ended + SEQUENCE_GAP), start)
            self._recent.append((start, end, run))
        return end - run

    def close(self) -> None:
        """Stop reading ahead and drop the blocks: the caller's export outlives the
        reads (the import's last checks), and with it the cache."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._blocks.clear()

    def _block(self, index: int) -> bytes:
        future = self._block_future(index, wait=True)
        assert future is not None
        try:
            return future.result()
        except BaseException:
            with self._lock:  # a failed fetch is not cached: the next read tries again
                if self._blocks.get(index) is future:
                    del self._blocks[index]
            raise

    def _block_future(self, index: int, *, wait: bool) -> Future[bytes] | None:
        start = index * self.block_size
        if start >= self.size:
            return None
        with self._lock:
            future = self._blocks.get(index)
            if future is not None:
                self._blocks.move_to_end(index)
                return future
            length = min(self.block_size, self.size - start)
            if wait:
                future = Future()
                future.set_running_or_notify_cancel()
                self._blocks[index] = future
            else:
                future = self._pool.submit(self._fetch, start, length)
                self._blocks[index] = future
            while len(self._blocks) > self.capacity + self.prefetch:
                self._blocks.popitem(last=False)
        if wait:
            try:
                future.set_result(self._fetch(start, length))
            except BaseException as err:
                future.set_exception(err)
        return future

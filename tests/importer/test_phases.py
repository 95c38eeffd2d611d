"""The processor's phase machine as a table: which phases each kind of import passes
through, and what a failure in a phase leaves (ENOSPC → TooSmall, the destination wiped,
the loop guard). Fakes (tests/fakes.py) stand in for the source, qemu-img and nbdkit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from importer.config import ImporterConfig
from importer.errors import ImporterError, InvalidImage, TooSmall
from importer.processor import Phase, Processor
from importer.progress import Progress
from tests.fakes import ENOSPC, FakeQemuImg, FakeSource, fake_exporter, qcow2_head, statvfs_with
from vocab import sources

MiB = 1024 * 1024
RAW = bytes(range(256)) * 4096  # 1 MiB of data
QCOW2 = qcow2_head(4 * MiB)

INFO, S, N, X, B, R = (Phase.INFO, Phase.STREAM, Phase.NBD_CONVERT, Phase.SCRATCH_CONVERT,
                    Phase.BLANK, Phase.RESIZE)


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    phases: list[Phase]
    error: type[BaseException] | None = None
    ranged: bool = True
    free: int = 1024 * MiB
    fail: BaseException | None = None
    source: str = sources.HTTP
    image_size: int | None = None


CASES = [
    Case("raw streams", RAW, [INFO, S, R]),
    Case("qcow2 converts while streaming", QCOW2, [INFO, N, R]),
    Case("qcow2 without Range goes through scratch", QCOW2, [INFO, X, R], ranged=False),
    Case("blank", b"", [INFO, B], source=sources.BLANK, image_size=8 * MiB),
    Case("too small in Info: nothing fetched", QCOW2, [INFO], TooSmall, free=MiB),
    Case("ENOSPC while converting is TooSmall", QCOW2, [INFO, N], TooSmall, fail=ENOSPC),
    Case("a failed convert", QCOW2, [INFO, N], InvalidImage, fail=InvalidImage("bad")),
    Case("ENOSPC in the scratch route", QCOW2, [INFO, X], TooSmall, ranged=False, fail=ENOSPC),
]


def _processor(case: Case, dest: Path, qemu: FakeQemuImg) -> tuple[Processor, FakeSource]:
    config = ImporterConfig(source=case.source, endpoint="http://127.0.0.1:1/x", dest=dest,
                            image_size=case.image_size, termination_log=None,
                            scratch_dir=dest.parent / "scratch")
    (dest.parent / "scratch").mkdir(exist_ok=True)
    source = FakeSource(case.data, ranged=case.ranged)
    return Processor(config, source, Progress(), qemu=qemu, exporter=fake_exporter,
                     statvfs=statvfs_with(case.free)), source


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_phase_table(case: Case, tmp_path: Path) -> None:
    dest = tmp_path / "disk.img"
    qemu = FakeQemuImg(virtual_size=4 * MiB, fail=case.fail)
    processor, source = _processor(case, dest, qemu)
    if case.error is None:
        result = processor.run()
        assert processor.visited == case.phases
        assert dest.exists()
        if case.phases[1] is S:
            assert dest.read_bytes() == RAW
        if case.phases[1] in (N, X):
            calls = [c[0] for c in qemu.calls]  # info and check run side by side
            assert sorted(calls[:2]) == ["check", "info"] and calls[2:] == ["convert"]
            assert qemu.calls[-1][1].startswith("nbd+unix:") == (case.phases[1] is N)
            assert result.size == 4 * MiB
        return
    with pytest.raises(case.error):
        processor.run()
    assert processor.visited == case.phases
    assert not dest.exists()  # wiped: the half-written disk is gone
    if case.phases == [INFO]:
        assert source.streamed == 0 and qemu.calls == []


def test_loop_guard(tmp_path: Path) -> None:
    dest = tmp_path / "disk.img"
    processor, _ = _processor(Case("loop", RAW, []), dest, FakeQemuImg(virtual_size=MiB))
    processor.steps[Phase.RESIZE] = lambda planned: Phase.STREAM  # a step naming a visited one
    with pytest.raises(ImporterError, match="phase TransferDataFile reached twice"):
        processor.run()
    assert processor.visited == [INFO, S, R]
    assert not dest.exists()

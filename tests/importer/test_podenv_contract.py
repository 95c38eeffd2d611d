"""The pod environment contract (vocab.podenv): what the populators render, the in-pod
programs parse into the same values. A variable renamed on one side only breaks these."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from importer import clonetarget
from importer import config as importer_config
from importer import sources as readers
from vocab import podenv, sources

TARGET = podenv.TargetEnv(image_size="2Gi", filesystem_overhead="0.055", owner_uid="uid-1",
                          preallocation=True)


def _as_environ(env: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env}


def test_the_importer_reads_what_the_populator_renders(tmp_path: Path) -> None:
    rendered = podenv.ImportEnv(
        target=TARGET, source="http", endpoint="https://example.com/disk.qcow2",
        content_type="kubevirt", insecure_tls=True, cert_dir=str(tmp_path),
        checksum="sha256:" + "ab" * 32, extra_headers=("X-One: 1", "X-Two: 2"),
    ).render()
    cfg = importer_config.from_env(_as_environ(rendered))
    assert cfg.source == "http"
    assert cfg.endpoint == "https://example.com/disk.qcow2"
    assert cfg.image_size == 2 * 1024**3
    assert cfg.filesystem_overhead == Fraction(55, 1000)
    assert (cfg.owner_uid, cfg.preallocation, cfg.insecure_tls) == ("uid-1", True, True)
    assert cfg.cert_dir == tmp_path
    assert cfg.checksum is not None and cfg.checksum.algorithm == "sha256"
    assert cfg.extra_headers[:2] == (("X-One", "1"), ("X-Two", "2"))


def test_the_clone_target_reads_what_the_populator_renders() -> None:
    environ = _as_environ([{"name": podenv.CLONER_TARGET, "value": "/data/disk.img"},
                           {"name": podenv.CLONE_TLS_DIR, "value": "/tls"},
                           *TARGET.render()])
    cfg = clonetarget.from_env(environ)
    assert cfg.requested == 2 * 1024**3 and cfg.overhead == "0.055"
    assert (cfg.owner_uid, cfg.preallocate) == ("uid-1", True)


DECLARED_OPTIONS = sorted(k for k, d in sources.DECLARATIONS.items()
                          if any(o.variable for o in d.options))


@pytest.mark.parametrize("kind", DECLARED_OPTIONS)
def test_the_importer_reads_each_declared_option(kind: str, tmp_path: Path) -> None:
    """Every variable a source's declaration lists reaches ``ImporterConfig.options``
    (a directory as the value: some options name one)."""
    declared = sources.DECLARATIONS[kind]
    variables = [o.variable for o in declared.options if o.variable]
    rendered = podenv.ImportEnv(
        target=TARGET, source=kind, content_type="kubevirt",
        endpoint=f"{declared.schemes[0]}://host.example/bucket/key:1",
        options=tuple((v, str(tmp_path)) for v in variables),
    ).render()
    cfg = importer_config.from_env(_as_environ(rendered))
    assert [cfg.option(v) for v in variables] == [str(tmp_path)] * len(variables)


@pytest.mark.parametrize("kind", sorted(sources.DECLARATIONS))
def test_each_declared_source_has_a_reader(kind: str) -> None:
    """``importer/sources/<kind>.py`` exists for every declared kind and opens sources."""
    assert callable(readers.reader(kind).open_source)


def test_an_undeclared_kind_has_no_reader() -> None:
    with pytest.raises(KeyError):
        readers.reader("base")

"""Kubeconfig discovery in kubectl's order, then the running `rootdisk up`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootdisk import codeprint
from rootdisk.kubeconfig import KubeconfigNotFound, current_namespace, find, warn_if_stale

HOME = "/home/u"


def run(files: set[str], *, flag: str | None = None, env: dict[str, str] | None = None,
        up: str | None = None) -> tuple[str, str]:
    found = find(flag=flag, env=env or {}, home=HOME, exists=lambda p: p in files,
                 running_data_dir=up)
    return found.path, found.source


@pytest.mark.parametrize(("files", "kw", "expected"), [
    ({"/k", "/home/u/.kube/config"}, {"flag": "/k"}, ("/k", "flag")),
    ({"/a", "/b", "/home/u/.kube/config"}, {"env": {"KUBECONFIG": "/missing:/b:/a"}},
     ("/b", "KUBECONFIG")),
    ({"/home/u/.kube/config", "/s/kubeconfig"}, {"up": "/s"},
     ("/home/u/.kube/config", "~/.kube/config")),
    ({"/s/kubeconfig"}, {"up": "/s"}, ("/s/kubeconfig", "rootdisk up")),
    ({"/s/kubeconfig"}, {"env": {"KUBECONFIG": ""}, "up": "/s"},
     ("/s/kubeconfig", "rootdisk up")),
])
def test_order(files: set[str], kw: dict, expected: tuple[str, str]) -> None:
    assert run(files, **kw) == expected


@pytest.mark.parametrize(("files", "kw", "message"), [
    (set(), {"flag": "/nope"}, "--kubeconfig /nope: no such file"),
    ({"/home/u/.kube/config"}, {"env": {"KUBECONFIG": "/x:/y"}},
     "KUBECONFIG=/x:/y: none of its files exists"),
    ({"/s/kubeconfig"}, {}, "no kubeconfig: pass --kubeconfig"),  # rootdisk up not running
])
def test_not_found(files: set[str], kw: dict, message: str) -> None:
    with pytest.raises(KubeconfigNotFound, match=message.replace("/", ".")):
        run(files, **kw)


@pytest.mark.parametrize(("text", "ns"), [
    ("current-context: a\ncontexts:\n- name: a\n  context: {namespace: team}\n", "team"),
    ("current-context: b\ncontexts:\n- name: a\n  context: {namespace: team}\n", "default"),
    ("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n", "default"),
    (": not yaml [", "default"), ("- a list", "default"),
])
def test_current_namespace(text: str, ns: str) -> None:
    assert current_namespace(text) == ns


@pytest.mark.parametrize("record", ["the checkout's", "another", "none"])
def test_a_cluster_started_from_other_code_is_named_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], record: str) -> None:
    """A command that talks to the running `rootdisk up` says so when that cluster was
    started from other code than the checkout's (its operators and its new pods then
    run different code); a cluster with the checkout's record, or none, goes unremarked."""
    if record != "none":
        codeprint.record(str(tmp_path), codeprint.fingerprint(codeprint.checkout())
                         if record == "the checkout's" else "0" * 64)
    warn_if_stale(str(tmp_path))
    err = capsys.readouterr().err
    assert ("was started from other code than this checkout's" in err) == \
        (record == "another")

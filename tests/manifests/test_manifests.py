"""Every manifest is valid: built-in kinds against Kubernetes' own schemas
(kubernetes-validate, strict: unknown fields refused), CRDs as structural schemas,
and every custom object (the examples) against the CRD schema it belongs to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from localcluster.apiserver.rules import crds
from localcluster.apiserver.schema import validation

ROOT = Path(__file__).resolve().parents[2] / "manifests"
K8S_VERSION = "1.37.0"


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(ROOT.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((f"{path.relative_to(ROOT)}:{doc['kind']}/"
                            f"{doc['metadata']['name']}", doc))
    return out


DOCS = documents()
CRDS = {(d["spec"]["group"], d["spec"]["names"]["kind"]): d for _, d in DOCS
        if d["kind"] == "CustomResourceDefinition"}


def test_manifests_found() -> None:
    kinds = {d["kind"] for _, d in DOCS}
    assert {"CustomResourceDefinition", "Namespace", "ClusterRole", "Deployment", "Service",
            "ValidatingWebhookConfiguration", "DataVolume"} <= kinds
    assert os.path.exists(ROOT / "images" / "Containerfile.operator")


@pytest.mark.parametrize(("name", "doc"), [d for d in DOCS if "." not in
                                           d[1]["apiVersion"].split("/")[0]
                                           or d[1]["apiVersion"].split("/")[0].endswith("k8s.io")],
                         ids=[n for n, d in DOCS if "." not in d["apiVersion"].split("/")[0]
                              or d["apiVersion"].split("/")[0].endswith("k8s.io")])
def test_builtin_kinds_match_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("key", sorted(CRDS))
def test_crds_are_valid(key: tuple[str, str]) -> None:
    assert crds.validate_crd(CRDS[key]) == []


CUSTOM = [(n, d) for n, d in DOCS if d["apiVersion"].split("/")[0] in {g for g, _ in CRDS}]


@pytest.mark.parametrize(("name", "doc"), CUSTOM, ids=[n for n, _ in CUSTOM])
def test_custom_objects_match_their_crd(name: str, doc: dict[str, Any]) -> None:
    group, version = doc["apiVersion"].split("/")
    crd = CRDS[(group, doc["kind"])]
    ver = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    assert validation.validate(doc, ver["schema"]["openAPIV3Schema"]) == []


def test_a_bad_field_is_caught() -> None:
    """The validators do refuse: a misspelt Deployment field and a wrong DataVolume type."""
    deploy = next(d for _, d in DOCS if d["kind"] == "Deployment")
    bad = {**deploy, "spec": {**deploy["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    dv = next(d for _, d in CUSTOM if d["kind"] == "DataVolume")
    crd = CRDS[("cdi.kubevirt.io", "DataVolume")]
    bad_dv = {**dv, "spec": {**dv["spec"], "preallocation": "yes"}}
    assert validation.validate(bad_dv, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("image", sorted(p.name.split(".", 1)[1] for p in
                                         (ROOT / "images").glob("Containerfile.*")))
def test_containerfiles_copy_every_package(image: str) -> None:
    """``pip install .`` in an image installs what pyproject's package list finds in the
    build context: a package the Containerfile does not COPY is missing at run time."""
    import re
    import tomllib

    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    text = (ROOT / "images" / f"Containerfile.{image}").read_text()
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", text, flags=re.M))
    assert packages - copied == set(), f"Containerfile.{image} does not copy these packages"


def test_every_image_has_a_containerfile_running_its_program() -> None:
    """localcluster runs a ``rootdisk/<program>`` image as the entry point in the image
    table; on a real cluster the image built from ``Containerfile.<program>`` must run
    the same program, or a pod that works on ``rootdisk up`` fails there."""
    import json
    import re

    from rootdisk.images import IMAGES

    for image, argv in IMAGES.items():
        path = ROOT / "images" / f"Containerfile.{image.split('/', 1)[1]}"
        assert path.exists(), f"{image}: no {path.name}"
        entry = re.findall(r"^ENTRYPOINT (\[.*\])$", path.read_text(), flags=re.M)
        assert entry and tuple(json.loads(entry[-1])) == argv, f"{path.name}: {entry}"

"""Which program a container image stands for, and the argv Kubernetes would run.

There is no container runtime: the node runs programs from the host, and an image
table, given by whoever builds the cluster (``rootdisk up`` passes rootdisk's, tests add
their own), maps an image's name (under any registry prefix, tag or digest) to the
program's entry point. Any other image cannot be "pulled" and the container waits with
``ErrImagePull``. The node knows no image of its own.

``command``/``args`` follow Kubernetes: ``command`` replaces the image's entry point,
``args`` replaces its default arguments (our images have none), and ``$(VAR)`` refers to
the container's environment (``$$(VAR)`` is a literal ``$(VAR)``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ENV_EXTRA_IMAGES = "LOCALCLUSTER_IMAGES"
"""A JSON object ``{"rootdisk/name": ["argv", …]}`` adding or replacing table entries."""

class ImageNotFound(Exception):
    """The image names none of the programs this node can run."""


def image_name(reference: str) -> str:
    """``registry:5000/rootdisk/importer:v1@sha256:…`` → ``rootdisk/importer``."""
    ref = reference.split("@", 1)[0]
    last_slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > last_slash:
        ref = ref[:colon]
    parts = ref.split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else ref


def load_extra_images(raw: str | None) -> dict[str, tuple[str, ...]]:
    """Parse the :data:`ENV_EXTRA_IMAGES` value; bad JSON is an error naming the variable."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not all(
            isinstance(v, list) and v and all(isinstance(a, str) for a in v)
            for v in data.values()
        ):
            raise ValueError("expected an object of non-empty string lists")
    except ValueError as err:
        raise ValueError(f"{ENV_EXTRA_IMAGES}: {err}") from None
    return {str(k): tuple(v) for k, v in data.items()}


@dataclass(frozen=True)
class ImageTable:
    entries: Mapping[str, tuple[str, ...]]

    @classmethod
    def merged(cls, *tables: Mapping[str, Sequence[str]]) -> ImageTable:
        """One table from several; a later table's entries add to or replace earlier ones."""
        entries: dict[str, tuple[str, ...]] = {}
        for table in tables:
            entries.update({k: tuple(v) for k, v in table.items()})
        return cls(entries=entries)

    def entry_point(self, reference: str) -> tuple[str, ...]:
        name = image_name(reference)
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries))
            raise ImageNotFound(
                f'image "{reference}" is not available on this node: localcluster runs only'
                f" the programs of its image table ({known}) under any registry prefix and tag"
            ) from None


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion; unknown variables stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, value)


def container_argv(
    *, entry_point: Sequence[str], command: Sequence[str] | None,
    args: Sequence[str] | None, env: Mapping[str, str],
) -> list[str]:
    """The argv a container runs, as a container runtime would build it."""
    if command:
        return [expand(a, env) for a in [*command, *(args or [])]]
    return [*entry_point, *(expand(a, env) for a in args or [])]

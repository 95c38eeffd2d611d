"""The guest's own apt state: Debian's package lists for the recipe's sources, kept under
the cache directory (not the host's apt configuration), and what apt would install from
them on an empty system.

The same lists are handed to mmdebstrap (``--skip=update``), so the versions resolved
here for the cache key are exactly the versions the build installs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rootdisk.cloudguest import recipe
from rootdisk.cloudguest.bootdisk import DiskBuildError, run

log = logging.getLogger(__name__)
APT_HINT = "install apt (Debian's apt-get and apt-helper)"
APT_HELPER = "/usr/lib/apt/apt-helper"
LISTS_MAX_AGE = 7 * 24 * 3600  # lists older than a week are refreshed (security updates)


class AptStateError(DiskBuildError):
    """Debian's package lists could not be fetched or apt could not resolve the packages."""


class AptState:
    """apt-get with its state, cache and sources under ``<dir>`` only."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.lists = directory / "lists"
        self.sources = directory / "sources.list"
        self._status = directory / "status-empty"

    def options(self) -> list[str]:
        opts = {
            "Dir::State": self.dir / "state",
            "Dir::State::Lists": self.lists,
            "Dir::State::Status": self._status,
            "Dir::Cache": self.dir / "cache",
            "Dir::Etc::SourceList": self.sources,
            "Dir::Etc::SourceParts": "/dev/null",
            "Dir::Etc::Preferences": "/dev/null",
            "Dir::Etc::PreferencesParts": "/dev/null",
            "APT::Sandbox::User": "root",
            "Acquire::Languages": "none",
            "Debug::NoLocking": "1",  # the caller holds the cache's own lock
        }
        out: list[str] = []
        for name, value in opts.items():
            out += ["-o", f"{name}={value}"]
        return out

    def _prepare(self) -> None:
        (self.lists / "partial").mkdir(parents=True, exist_ok=True)
        (self.dir / "state").mkdir(exist_ok=True)
        (self.dir / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        self.sources.write_text("\n".join(recipe.SOURCES) + "\n")
        self._status.touch()

    def index_files(self) -> list[Path]:
        return sorted(self.lists.glob("*_Packages*"))

    def age(self) -> float | None:
        """Seconds since the lists were fetched, or None when there are none."""
        files = self.index_files()
        if not files:
            return None
        return time.time() - min(p.stat().st_mtime for p in files)

    def update(self) -> None:
        self._prepare()
        try:
            run(["apt-get", "update", "-q", *self.options()], timeout=300, hint=APT_HINT)
        except DiskBuildError as err:
            raise AptStateError(f"fetching Debian's package lists failed: {err}") from err
        if not self.index_files():
            raise AptStateError(f"apt-get update left no package lists in {self.lists}")

    def ensure_lists(self, *, refresh: bool = False) -> None:
        """Fetch the lists when missing, asked to, or a week old (keeping old lists when a
        refresh fails, so a machine offline still finds its cached image)."""
        self._prepare()
        age = self.age()
        if age is None:
            self.update()
            return
        if refresh or age > LISTS_MAX_AGE:
            try:
                self.update()
            except AptStateError as err:
                if refresh:
                    raise
                log.warning("keeping Debian package lists %d days old: %s", age // 86400, err)

    def essential(self) -> list[str]:
        names: set[str] = set()
        for index in self.index_files():
            text = run([APT_HELPER, "cat-file", str(index)], hint=APT_HINT).decode()
            names.update(recipe.essential_packages(text))
        return sorted(names)

    def resolve(self) -> dict[str, str]:
        """``package -> version`` apt installs for the recipe on an empty system: the
        Essential set, apt, and the recipe's packages without Recommends (as mmdebstrap's
        ``apt`` variant does)."""
        argv = ["apt-get", "install", "--simulate", "-q", "--no-install-recommends"]
        argv += [*self.options(), *self.essential(), "apt", *recipe.PACKAGES]
        try:
            out = run(argv, timeout=300, hint=APT_HINT).decode()
        except DiskBuildError as err:
            raise AptStateError(f"apt cannot resolve the guest's packages: {err}") from err
        versions = recipe.simulated_installs(out)
        missing = [p for p in recipe.PACKAGES if p not in versions]
        if missing:
            raise AptStateError(f"apt would not install {', '.join(missing)}")
        return versions

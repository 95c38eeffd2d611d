"""The launcher's environment: each wrong variable named."""

from __future__ import annotations

import json

import pytest

from vm.launcher.config import LauncherConfig, parse, termination_path
from vm.launcher.errors import ConfigError

VMI = json.dumps({"metadata": {"name": "a"}})


def test_defaults() -> None:
    cfg = parse(env={"VMI": VMI}, argv=[])
    assert cfg == LauncherConfig(vmi={"metadata": {"name": "a"}})
    assert (cfg.driver, cfg.use_emulation, cfg.socket_dir, cfg.private_dir) == (
        "qemu",
        False,
        "/var/run/kubevirt/sockets",
        "/var/run/kubevirt-private",
    )


def test_values() -> None:
    cfg = parse(
        env={"VMI": VMI, "LAUNCHER_DRIVER": "libvirt", "USE_EMULATION": "True",
             "POD_IP": "127.1.0.7"},
        argv=["--socket-dir", "/s", "--private-dir", "/p"],
    )
    assert (cfg.driver, cfg.use_emulation, cfg.socket_dir, cfg.private_dir, cfg.pod_ip) == (
        "libvirt",
        True,
        "/s",
        "/p",
        "127.1.0.7",
    )


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({}, "VMI"),
        ({"VMI": "{"}, "VMI"),
        ({"VMI": "[1]"}, "VMI"),
        ({"VMI": "x" * (1024 * 1024 + 1)}, "VMI"),
        ({"VMI": VMI, "LAUNCHER_DRIVER": "xen"}, "LAUNCHER_DRIVER"),
        ({"VMI": VMI, "USE_EMULATION": "maybe"}, "USE_EMULATION"),
        ({"VMI": VMI, "POD_IP": "127.1.0.7,hostfwd=tcp::22-:22"}, "POD_IP"),
        ({"VMI": VMI, "POD_IP": "0.0.0.0"}, "POD_IP"),
        ({"VMI": VMI, "POD_IP": "::1"}, "POD_IP"),
        ({"VMI": VMI, "AGENT_POLL_SCALE": "fast"}, "AGENT_POLL_SCALE"),
        ({"VMI": VMI, "AGENT_POLL_SCALE": "0"}, "AGENT_POLL_SCALE"),
        ({"VMI": VMI, "AGENT_POLL_SCALE": "nan"}, "AGENT_POLL_SCALE"),
        ({"VMI": VMI, "AGENT_POLL_SCALE": "1e9"}, "AGENT_POLL_SCALE"),
    ],
)
def test_errors_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(env=env, argv=[])
    assert err.value.message.startswith(name + ":")


def test_termination_path_survives_a_bad_config() -> None:
    assert termination_path(["--termination-log", "/x/t", "--bogus"]) == "/x/t"


def test_agent_poll_scale() -> None:
    assert parse(env={"VMI": VMI}, argv=[]).agent_poll_scale == 1.0
    assert parse(env={"VMI": VMI, "AGENT_POLL_SCALE": "0.05"}, argv=[]).agent_poll_scale == 0.05

"""The in-pod VM launcher (``python -m vm.launcher``, image ``rootdisk/launcher``).

Why it exists: a VirtualMachineInstance becomes one pod whose ``compute`` container runs
this program. It turns the VMI into a domain (``vm.domain``), starts it at once with one of
two drivers, serves the domain's state and its serial console on a unix socket, and ends
with the guest: exit 0 when the guest powered off, non-zero otherwise, with a JSON
termination message. It runs as uid 107 with no capabilities and needs no privileges.

THE INTERFACE (what the VMI controller and the node handler rely on)
====================================================================

Input
-----
- env ``VMI``: the VirtualMachineInstance as JSON (``metadata.name``, ``metadata.namespace``,
  ``metadata.uid`` and ``spec``; of ``status`` only ``volumeStatus[].persistentVolumeClaimInfo``
  ``requests``/``capacity`` are read, to size a missing ``disk.img`` as upstream does).
- env ``LAUNCHER_DRIVER``: ``qemu`` (default; QEMU driven over QMP) or ``libvirt`` (a
  per-pod unprivileged ``libvirtd`` in session mode, as upstream runs one per pod).
- env ``AGENT_POLL_SCALE``: every guest agent polling interval times this (default 1;
  0.001 to 100).
- env ``USE_EMULATION``: ``"true"`` forces TCG (the KubeVirt CR's
  ``developerConfiguration.useEmulation``); otherwise KVM is used only where a probe shows
  it really runs guests (see :mod:`vm.launcher.accel`).
- env ``POD_IP``: the pod's IPv4 address (downward API ``status.podIP``), where each
  interface's listed ``ports`` are forwarded to the guest (user-mode network, see
  docs/vm.md); a VMI listing ports without it fails ``InvalidVMI``.
- env ``KVM_PROBE_KERNEL``/``KVM_PROBE_INITRD``: the probe guest (the image installs one
  under /usr/share/rootdisk/kvm-probe); the verdict is cached in
  ``<private-dir>/accelerator.json``.
- ``--socket-dir`` (default ``/var/run/kubevirt/sockets``), ``--private-dir`` (default
  ``/var/run/kubevirt-private``), ``--termination-log`` (default ``/dev/termination-log``),
  ``--secret-dir`` (default ``<private-dir>/secret``: the Secret volumes),
  ``--ephemeral-dir`` (default ``/var/run/kubevirt-ephemeral-disks``: cloud-init ISOs and
  ephemeral overlays), ``--runtime-dir`` (default ``/var/run/libvirt``: emptyDisks).
- Disks: a Filesystem PVC volume is mounted at ``<private-dir>/vmi-disks/<volume>`` and
  holds ``disk.img`` (raw); the launcher creates a missing ``disk.img`` as a sparse file
  sized like upstream's HostDisk (not on a ``readOnly`` claim). A Block PVC volume is the
  device ``/dev/<volume>``. An ``ephemeral`` volume's claim is found the same way and
  gets a qcow2 overlay, an ``emptyDisk`` a qcow2 (:mod:`vm.launcher.scratch`); a
  cloud-init volume becomes an ISO (:mod:`vm.launcher.cloudinit`, ``xorrisofs``).

Serial console
--------------
- Logged to ``<private-dir>/console.log`` (bounded: rotated to ``console.log.1`` past
  1 MiB).
- ``python -m vm.launcher.console_log [PATH]`` follows that log to stdout (what the
  launcher pod's ``guest-console-log`` container runs, with the same image).

Control socket
--------------
Unix stream socket ``<socket-dir>/<vmi uid>.sock`` (mode 0660, removed on exit). One JSON
request line per connection (at most 4096 bytes), answered with one JSON line:

- ``{"cmd": "status"}`` → ``{"state": "starting|running|paused|shutdown|crashed",
  "reason": str, "driver": "qemu|libvirt", "accelerator": "tcg|kvm",
  "startedAt": RFC 3339 time or null}``
- ``{"cmd": "shutdown", "gracePeriodSeconds": N}`` → ``{"ok": true}``: ACPI power button,
  then the domain is killed if it still runs after N seconds (0 ≤ N ≤ 86400; without N,
  the VMI's ``terminationGracePeriodSeconds``; N = 0 or ACPI disabled: killed at once).
  A later shutdown with N = 0 shortens a running grace period.
- ``{"cmd": "kill"}``, ``{"cmd": "pause"}``, ``{"cmd": "unpause"}`` → ``{"ok": true}``.
- shutdown/kill/pause/unpause while the domain is not running or paused (starting,
  already shut down) → ``{"ok": false, "error": "the domain is <state>"}``.
- ``{"cmd": "guestinfo"}`` → the guest agent's facts (``connected``, ``guestAgentVersion``,
  ``supportedCommands``, ``hostname``, ``os``, ``timezone``, ``userList``, ``fsInfo``,
  ``interfaces``) and ``domainInterfaces`` ([{name, mac}]); at most 1 MiB (docs/vm.md).
- ``{"cmd": "softreboot"}`` → ``{"ok": true}``: ``guest-shutdown`` (reboot) through the
  agent when connected, else the ACPI power button with the domain reset instead of
  ended; ``{"ok": false, "error": ...}`` when paused or with neither.
- ``{"cmd": "console"}`` → ``{"ok": true}`` line, then the connection is the raw
  bidirectional serial console. Several may be attached; all of them see the output,
  the most recent one attached owns the input (older ones' input is dropped).
- Anything else (unknown command, bad JSON, too long a line) → ``{"ok": false,
  "error": "..."}``; never a crash.
:mod:`vm.launcher.client` is a small synchronous client for these requests.

Exit and termination message
----------------------------
- Exit 0 and ``{"phase": "Succeeded", "reason": "GuestShutdown", ...}`` when the guest
  powered off (or an ACPI shutdown request completed).
- Non-zero and ``{"phase": "Failed", "reason": ...}`` when QEMU crashed, the guest hit an
  internal error, the domain had to be killed (upstream counts a domain destroyed while
  ACPI is on as Failed), or the launch failed (bad VMI, missing disk: the message names
  the field). Written to ``/dev/termination-log`` (at most 4096 bytes).
- Reasons: ``GuestShutdown`` (Succeeded); ``Destroyed`` (Failed with ACPI on, Succeeded
  without), ``Crashed``, ``LaunchFailed`` (QEMU/libvirt could not start it), ``DriverError``,
  ``InvalidVMI`` (message ``<field path>: <what is wrong>``), ``VolumeNotFound``,
  ``InsufficientSpace``, ``InvalidDisk``, ``DiskError``, ``CloudInitError``; exit code 1.
  ``InvalidConfiguration`` (the environment is wrong: message ``<VARIABLE>: …``) exits 2.
- SIGTERM: graceful shutdown with the VMI's ``terminationGracePeriodSeconds`` (default 30).
- QEMU (and libvirtd) get a parent-death signal: they never outlive the launcher.
"""

"""An embedded single-node Kubernetes: API server, storage, kubelet.

Layout of the node side (pyproject's import-linter contracts keep it): ``cluster.py``
wires the API server (apiserver/) and the node side; ``kubelet/``, ``storage/``,
``workloads/`` and ``services/`` know nothing of each other and build on ``kube/``, the
ground floor (API client, informers, Events, addresses, timestamps). The caller gives
the image table (which image runs which program): localcluster names no program.

Generic: it knows Kubernetes, not rootdisk's resources, and imports nothing from
``cdi``, ``populators`` or ``vm``.

Pods are confined like a container runtime's (containerd's default capabilities, a
default seccomp filter, no_new_privs, only the pod's devices, securityContext honoured);
docs/localcluster-pods.md says how, and where it differs from containerd and why.
"""

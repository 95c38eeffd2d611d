"""An embedded single-node Kubernetes: API server, storage, kubelet.

Generic: it knows Kubernetes, not rootdisk's resources, and imports nothing from
``cdi``, ``populators`` or ``vm``.

Pods are confined like a container runtime's (containerd's default capabilities, a
default seccomp filter, no_new_privs, only the pod's devices, securityContext honoured);
docs/localcluster-pods.md says how, and where it differs from containerd and why.
"""

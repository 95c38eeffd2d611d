"""An embedded single-node Kubernetes: API server, storage, kubelet.

Generic: it knows Kubernetes, not rootdisk's resources, and imports nothing from
``cdi``, ``populators`` or ``vm``.
"""

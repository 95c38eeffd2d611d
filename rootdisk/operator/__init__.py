"""The operator program (image ``rootdisk/operator``): ``python -m rootdisk.operator``.

One program for every controller set; ``--controllers cdi`` (or ``vm``, ``handler``…)
picks which handler modules kopf loads (``registry``), so each set deploys on its own
with its own RBAC. Leader election by a coordination.k8s.io Lease (``lease``,
``kube``) makes two replicas safe: only the holder runs controllers, every replica
serves the admission webhooks and the health and metrics endpoints (``server``).
"""

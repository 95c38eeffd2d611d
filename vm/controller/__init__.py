"""The VirtualMachine controller (KubeVirt's virt-controller VM loop).

Pure decisions (``runstrategy``, ``backoff``, ``datavolumes``, ``printable``, ``status``,
``sync``) are apart from the API adapter (``kube``) and the kopf wiring (``handlers``).
"""

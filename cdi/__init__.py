"""The CDI control plane: DataVolume, CDIConfig and StorageProfile controllers.

Pure decision modules (``api``, ``config``, ``profiles``, ``render``, ``status``,
``validate``) hold the behaviour; ``kube`` is the one adapter that talks to the API
server; ``handlers`` is the kopf wiring. See docs/architecture.md.
"""

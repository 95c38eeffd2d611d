"""The API vocabulary every package shares: upstream's names, spelled once.

``vocab.cdi`` holds the ``cdi.kubevirt.io`` API (group, kinds, annotations, labels,
phases, source kinds) and ``vocab.kubevirt`` the ``kubevirt.io`` one; both are what
upstream CDI and KubeVirt spell, because users' manifests and tools read and write the
same strings. This package imports nothing of the project (an import-linter contract
says so): cdi, populators, importer and vm agree through it, not through each other.
"""

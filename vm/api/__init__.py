"""The ``kubevirt.io/v1`` API as rootdisk serves it: names, CRD schemas, and the
``subresources.kubevirt.io/v1`` server (``python -m vm.api``, KubeVirt's virt-api)."""

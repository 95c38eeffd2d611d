"""The ``rootdisk`` command line: what virtctl is to KubeVirt."""

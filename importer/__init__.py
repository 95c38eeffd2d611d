"""The in-pod data path: turns an image URL into a ready raw disk in a volume.

A plain program: it imports nothing of Kubernetes, kopf or the controllers, so it runs
the same inside an importer pod and from a shell (``rootdisk import``).
"""

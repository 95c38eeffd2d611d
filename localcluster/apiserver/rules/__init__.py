"""The rules kube-apiserver applies to an object on a write (pure, no I/O).

``meta``: names, system metadata, generation, finalizers; ``defaults``: built-in kinds'
defaults; ``validation``: built-in kinds' rules; ``immutability``: fields that may not
change; ``crds``: CRD validation and status; ``names``: generateName and what pruning
dropped; ``deletion``: what a DELETE does (finalizers, propagation); ``gc``: owner
references. ``..write_path`` calls them in the order of a write.
"""

"""The PATCH bodies kube-apiserver accepts, applied to an object (pure).

``jsonpatch``: JSON merge patch (RFC 7386) and JSON patch (RFC 6902), and the entry point
for strategic merge patch; ``strategic``: kubectl's strategic merge patch (``$patch``,
``$retainKeys``, ``$setElementOrder``, merge keys); ``strategic_types``: the merge keys and
list strategies of the built-in kinds.
"""

"""What the server serves and how clients find it (pure).

``registry``: the served resource types (built-in and from CRDs) with their verbs, scope,
schema and scale paths; ``builtin_types``: the built-in kinds; ``builtin_schemas``:
Kubernetes v1.32's definitions of the built-in kinds (for decoding and OpenAPI);
``conversions``: events.k8s.io ↔ core Events; ``scale``: the scale subresource's paths;
``discovery`` and ``openapi``: the documents clients read to find types.
"""

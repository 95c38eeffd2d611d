"""Custom resources' OpenAPI v3 schemas, as kube-apiserver applies a CRD version's schema.

Pure (no I/O), used by the write path in the order ``pruning`` (drop unknown fields, fill
defaults) → ``validation`` (type, format, bounds; errors as ``field_errors.FieldError``) →
``cel_rules`` (``x-kubernetes-validations``); ``structural`` is the check at CRD creation
(non-structural schemas, invalid defaults); ``go_regexp`` compiles ``pattern`` with RE2 as
Go does. ``structural`` imports ``validation`` and ``pruning``, never the reverse.
"""

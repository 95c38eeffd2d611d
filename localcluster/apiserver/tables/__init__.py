"""Table output (``Accept: application/json;as=Table``), what ``kubectl get`` prints.

Pure: ``convert`` turns objects into a ``meta.k8s.io/v1`` Table, with ``printers`` (the
built-in kinds' columns, as kubectl's printers) or a CRD's ``additionalPrinterColumns``
evaluated by ``jsonpath``; ``columns`` holds the shared column type and age formatting.
"""

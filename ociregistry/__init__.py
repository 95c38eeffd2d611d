"""Container-registry references and manifest look-ups, shared by the importer and cdi.

A neutral bottom layer: it imports nothing of the project, so the cdi controllers (which
must not import the importer) and the importer pod can both use it.
"""

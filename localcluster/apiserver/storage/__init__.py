"""Where objects live: ``store`` (SQLite in WAL mode with an in-memory mirror, one global
resourceVersion, a history table of recent events) and ``watchcache`` (the same events in
memory, for watchers). The lowest layer: it imports nothing else of the API server but
``errors``.
"""

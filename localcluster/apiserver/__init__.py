"""An in-process server speaking the Kubernetes REST API (objects in SQLite)."""

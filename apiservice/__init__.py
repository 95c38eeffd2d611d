"""Helpers for the backends of aggregated APIs (``APIService``s): the parts a backend
needs to trust the Kubernetes API server's front proxy. Imported by cdi/ and vm/ alike,
so it knows nothing of localcluster and talks to no API itself."""

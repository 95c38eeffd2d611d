"""Lists and watches as client-go's informers use them.

``list_options``: a list or watch request's options (limit/continue pages at one
snapshot, resourceVersionMatch, sendInitialEvents), parsed and checked (pure);
``stream``: watch streams over the backend's events (initial events, bookmarks, replay
from the store's history, 410 Expired).
"""

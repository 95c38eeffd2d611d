"""Object storage: SQLite (WAL) on disk, a parsed copy of every object in memory.

Every write gets the next value of one global resourceVersion and is recorded twice in the
same transaction: the object row, and a row in ``history`` (the watch event it caused).
The history lets watches resume from a resourceVersion across a restart of the server; it
keeps the newest ``history_limit`` events and remembers the newest one it dropped
(``compacted_rv``), below which a watch gets 410 Gone.

Checkpoints (the only writes that fsync in WAL mode with ``synchronous=NORMAL``) run in a
background thread on their own connection, so a slow disk flush never stalls a request.

The database holds Secrets: ``store.db`` is created 0600 before SQLite opens it (SQLite
gives its ``-wal`` and ``-shm`` files the database's mode), and a looser database, WAL
or SHM file left by an older version is tightened with a warning.

Reads never touch SQLite: the whole data set is loaded at start and mirrored in memory (a
single-node cluster's objects fit easily). Stored dicts are never mutated; callers get
them with their JSON text and copy (``json.loads``) before changing anything.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    gr TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (gr, ns, name));
CREATE TABLE IF NOT EXISTS history (
    rv INTEGER PRIMARY KEY, gr TEXT NOT NULL, ns TEXT NOT NULL,
    type TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Stored:
    obj: Obj
    raw: str
    rv: int

    def copy(self) -> Obj:
        loaded: Obj = json.loads(self.raw)
        return loaded


@dataclass(frozen=True)
class Event:
    rv: int
    gr: str
    ns: str
    type: str  # ADDED, MODIFIED, DELETED
    stored: Stored
    previous: Obj | None = None  # the object before the change (None after a restart)


def dumps(obj: Obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


DB_MODE = 0o600


def secure_db_files(path: Path) -> None:
    """Create ``path`` 0600 if missing; tighten it and its WAL/SHM files to 0600."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, DB_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode != DB_MODE:
            logger.warning("%s was mode %04o: tightened to %04o (it holds Secrets)",
                           path, mode, DB_MODE)
            os.fchmod(fd, DB_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        try:
            st = os.lstat(side)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != DB_MODE:
            logger.warning("%s was mode %04o: tightened to %04o (it holds Secrets)",
                           side, stat.S_IMODE(st.st_mode), DB_MODE)
            os.chmod(side, DB_MODE)


class Store:
    def __init__(self, path: Path, *, history_limit: int = 20000) -> None:
        secure_db_files(path)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.executescript(_SCHEMA)
        self._path = path
        self._closing = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, daemon=True,
                                              name="store-checkpoint")
        self._checkpointer.start()
        self.history_limit = history_limit
        self._objects: dict[str, dict[tuple[str, str], Stored]] = {}
        self.rv = 0
        for gr, ns, name, rv, data in self._db.execute(
                "SELECT gr, ns, name, rv, data FROM objects"):
            self._objects.setdefault(gr, {})[(ns, name)] = Stored(json.loads(data), data, rv)
            self.rv = max(self.rv, rv)
        row = self._db.execute("SELECT MAX(rv) FROM history").fetchone()
        self.rv = max(self.rv, row[0] or 0)
        row = self._db.execute("SELECT value FROM meta WHERE key='compacted_rv'").fetchone()
        self.compacted_rv = int(row[0]) if row else 0
        logger.info("store %s: %d objects, resourceVersion %d", path,
                    sum(len(v) for v in self._objects.values()), self.rv)

    def _checkpoint_loop(self) -> None:
        db = sqlite3.connect(str(self._path), check_same_thread=False, isolation_level=None)
        try:
            while not self._closing.wait(1.0):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.OperationalError as err:  # busy: try again next time
                    logger.debug("checkpoint skipped: %s", err)
        finally:
            db.close()

    def close(self) -> None:
        self._closing.set()
        self._checkpointer.join()
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()

    # reads ---------------------------------------------------------------------------------

    def get(self, gr: str, ns: str, name: str) -> Stored | None:
        return self._objects.get(gr, {}).get((ns, name))

    def items(self, gr: str, ns: str | None = None) -> list[tuple[tuple[str, str], Stored]]:
        """Objects of one type (in one namespace if ``ns`` is given), sorted by key."""
        objects = self._objects.get(gr, {})
        keys = sorted(objects) if ns is None else sorted(k for k in objects if k[0] == ns)
        return [(k, objects[k]) for k in keys]

    def count(self, gr: str, ns: str | None = None) -> int:
        objects = self._objects.get(gr, {})
        return len(objects) if ns is None else sum(1 for k in objects if k[0] == ns)

    def all_in_namespace(self, ns: str) -> Iterator[tuple[str, Stored]]:
        for gr, objs in list(self._objects.items()):
            for (ons, _), stored in list(objs.items()):
                if ons == ns:
                    yield gr, stored

    def all(self) -> Iterator[tuple[str, Stored]]:
        for gr, objs in list(self._objects.items()):
            for stored in list(objs.values()):
                yield gr, stored

    def history(self, after_rv: int) -> list[tuple[int, str, str, str, str]]:
        return list(self._db.execute(
            "SELECT rv, gr, ns, type, data FROM history WHERE rv > ? ORDER BY rv",
            (after_rv,)))

    # writes --------------------------------------------------------------------------------

    def put(self, gr: str, ns: str, name: str, obj: Obj, *, previous: Obj | None) -> Event:
        """Store ``obj`` (its metadata.resourceVersion is set here) and return its event."""
        rv = self.rv + 1
        obj["metadata"]["resourceVersion"] = str(rv)
        raw = dumps(obj)
        etype = "MODIFIED" if previous is not None else "ADDED"
        self._db.execute("BEGIN")
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO objects (gr, ns, name, rv, data) VALUES (?,?,?,?,?)",
                (gr, ns, name, rv, raw))
            self._record(rv, gr, ns, etype, raw)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self.rv = rv
        stored = Stored(obj, raw, rv)
        self._objects.setdefault(gr, {})[(ns, name)] = stored
        return Event(rv, gr, ns, etype, stored, previous)

    def remove(self, gr: str, ns: str, name: str, obj: Obj) -> Event:
        """Remove the object; the DELETED event carries ``obj`` at the new resourceVersion."""
        rv = self.rv + 1
        obj["metadata"]["resourceVersion"] = str(rv)
        raw = dumps(obj)
        self._db.execute("BEGIN")
        try:
            self._db.execute("DELETE FROM objects WHERE gr=? AND ns=? AND name=?",
                             (gr, ns, name))
            self._record(rv, gr, ns, "DELETED", raw)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self.rv = rv
        old = self._objects.get(gr, {}).pop((ns, name), None)
        return Event(rv, gr, ns, "DELETED", Stored(obj, raw, rv),
                     old.obj if old is not None else None)

    def _record(self, rv: int, gr: str, ns: str, etype: str, raw: str) -> None:
        self._db.execute("INSERT INTO history (rv, gr, ns, type, data) VALUES (?,?,?,?,?)",
                         (rv, gr, ns, etype, raw))
        if rv % 1000 == 0 and rv > self.history_limit:
            cutoff = rv - self.history_limit
            self._db.execute("DELETE FROM history WHERE rv <= ?", (cutoff,))
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES "
                             "('compacted_rv', ?)", (str(cutoff),))
            self.compacted_rv = cutoff

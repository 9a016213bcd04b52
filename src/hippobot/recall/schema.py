"""The recall database file: its tables, how a connection is opened, and what corruption is.

The table layout is described in :mod:`hippobot.recall.index`. Invariants kept here:

* A database whose ``meta.schema`` is not :data:`SCHEMA_VERSION` is emptied and recreated
  on open (the index is derived data; nothing is lost).
* Document ids of each kind come from their own range (:data:`KIND_BASE` ..
  ``+ KIND_SPAN``), so an id says which FTS table holds it.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from .embeddings import EMBEDDINGS_TABLE
from .query import FTS_TABLES

__all__ = [
    "KIND_BASE",
    "KIND_SPAN",
    "SCHEMA_VERSION",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "check_schema",
    "connect",
    "is_corruption",
]

log = logging.getLogger("hippobot.recall")

SCHEMA_VERSION = "3"  # bump when the tables or index_text() change: the index is rebuilt
_TOKENIZER = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"
_BUSY_MS = 10_000
KIND_BASE = {"memory": 1 << 40, "history": 2 << 40, "session": 3 << 40}
KIND_SPAN = 1 << 40
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26

_SCHEMA = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files(
    id INTEGER PRIMARY KEY, rel TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL,
    offset INTEGER NOT NULL, head_len INTEGER NOT NULL, head_hash BLOB NOT NULL,
    tail_hash BLOB NOT NULL, session_key TEXT, next_num INTEGER NOT NULL, last_ts REAL);
CREATE INDEX files_session ON files(session_key);
CREATE TABLE docs(
    id INTEGER PRIMARY KEY, file_id INTEGER NOT NULL, num INTEGER NOT NULL, end_num INTEGER,
    ts REAL, session_key TEXT, role TEXT, origin TEXT, chars INTEGER, asks INTEGER,
    speaker TEXT);
CREATE INDEX docs_file ON docs(file_id, num);
CREATE TABLE texts(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE VIRTUAL TABLE fts_memory USING fts5(body, owner, content='', tokenize="{_TOKENIZER}");
CREATE VIRTUAL TABLE fts_history USING fts5(body, owner, content='', tokenize="{_TOKENIZER}");
CREATE VIRTUAL TABLE fts_session USING fts5(body, owner, content='', tokenize="{_TOKENIZER}");
INSERT INTO meta(key, value) VALUES ('schema', '{SCHEMA_VERSION}');
"""


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def connect(path: Path) -> sqlite3.Connection:
    """Open the database at ``path`` (its directory must exist) with a current schema."""
    conn = sqlite3.connect(
        path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Queries touch a few hundred scattered rows: map the file instead of copying
        # pages through the read() path, and keep hot pages cached. Both are bounded so a
        # long-running agent's memory stays small (mapped pages count towards its RSS).
        conn.execute("PRAGMA mmap_size=67108864")
        conn.execute("PRAGMA cache_size=-8000")
        # A checkpoint ends in an fsync; with the default (every 4 MB of WAL) one turn in
        # ~50 paid for it. Every 32 MB keeps the per-turn tail latency flat.
        conn.execute("PRAGMA wal_autocheckpoint=8000")
        check_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def check_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        version = None
        if "meta" in names:
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            version = row[0] if row else None
        if version != SCHEMA_VERSION:
            if names:
                log.info("recall index schema %s is outdated; rebuilding", version)
            for name in (
                "fts",
                *FTS_TABLES.values(),
                "texts",
                "vectors",
                "embeddings",
                "docs",
                "files",
                "meta",
            ):
                conn.execute(f"DROP TABLE IF EXISTS {name}")
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
        # Added after schema 1 without a version bump (a bump would re-index everything):
        # older databases gain the table on open.
        conn.execute(EMBEDDINGS_TABLE)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise

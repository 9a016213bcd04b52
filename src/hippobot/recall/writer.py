"""Writing one source file's documents into the recall index tables.

An :class:`IndexWriter` lives for one write transaction of
:meth:`~hippobot.recall.index.RecallIndex.sync`; the caller holds ``BEGIN IMMEDIATE``.
Invariants: a file's ``files`` row, its ``docs``/``texts`` rows and its FTS rows are added
and removed together, and removing a document removes its vector; vectors are added later,
in the background (:mod:`hippobot.recall.embeddings`); new document ids continue after the
largest id of their kind's range.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import astuple
from typing import Any

from .boilerplate import line_filter
from .query import FTS_TABLES, index_text, owner_token
from .schema import KIND_BASE, KIND_SPAN
from .sources import (
    HEAD,
    RACY_NS,
    TAIL,
    Doc,
    FileState,
    SessionState,
    SourceFile,
    SyncStats,
    can_append,
    digest,
    fallback_session_key,
    markdown_docs,
    open_source,
    parse_new_bytes,
    pread,
    read_range,
    transcript_speaker,
)

__all__ = ["IndexWriter"]


class IndexWriter:
    """Adds and removes the rows of single files; used inside one write transaction."""

    def __init__(
        self, db: sqlite3.Connection, *, redact: Callable[[str], str] | None = None
    ) -> None:
        self._db = db
        self._redact = redact
        self._next_ids: dict[str, int] = {}

    def index_file(
        self, sf: SourceFile, state: FileState | None, stats: SyncStats
    ) -> FileState | None:
        """Index what is new in one file (inside the write transaction); returns its state.

        A file that vanished since it was listed keeps its old state; the next sync sees
        it gone and drops it.
        """
        try:
            fd = open_source(sf)
        except OSError:
            return state
        try:
            st = os.fstat(fd)
            if sf.kind == "memory":
                return self._index_markdown(fd, st, sf, state, stats)
            if state is not None and can_append(fd, st, state):
                start = state.offset
                session = SessionState(state.session_key, state.next_num, state.last_ts)
                stats.files_appended += 1
            else:
                if state is not None:
                    self._delete_docs(state, stats)
                    stats.files_reindexed += 1
                else:
                    stats.files_new += 1
                start = 0
                session = SessionState(
                    fallback_session_key(sf.rel) if sf.kind == "session" else None
                )
            data = read_range(fd, start, st.st_size)
            stats.bytes_read += len(data)
            end, docs = parse_new_bytes(sf.kind, data, start, session)
            head_len = min(HEAD, end)
            head = digest(pread(fd, head_len, 0))
            tail_len = min(TAIL, end)
            tail = digest(pread(fd, tail_len, end - tail_len))
        finally:
            os.close(fd)
        new = FileState(
            state.id if state is not None else 0, sf.rel, sf.kind, st.st_size, st.st_mtime_ns,
            st.st_ino, end, head_len, head, tail, session.session_key, session.next_num,
            session.last_ts,
        )  # fmt: skip
        self._write_state(new)
        self._insert_docs(sf.kind, new.id, docs, stats)
        return new

    def _index_markdown(
        self, fd: int, st: os.stat_result, sf: SourceFile, state: FileState | None, stats: SyncStats
    ) -> FileState:
        """Re-index a Markdown file whose content changed (the hash covers the whole file).

        An mtime less than ``RACY_NS`` old is stored as -1: a same-size edit within the
        same clock tick would otherwise look unchanged, so such a file is hashed again on
        the next sync (and only re-indexed if its content really differs).
        """
        data = read_range(fd, 0, st.st_size)
        stats.bytes_read += len(data)
        content = digest(data)
        mtime = st.st_mtime_ns if time.time_ns() - st.st_mtime_ns > RACY_NS else -1
        same = state is not None and state.head_hash == content and state.size == len(data)
        new = FileState(
            state.id if state is not None else 0, sf.rel, sf.kind, len(data), mtime,
            st.st_ino, len(data), len(data), content, b"", None, 0, None,
        )  # fmt: skip
        if state is not None and not same:
            self._delete_docs(state, stats)
            stats.files_reindexed += 1
        elif state is None:
            stats.files_new += 1
        self._write_state(new)
        if not same:
            docs = markdown_docs(data.decode("utf-8", "replace"), line_filter(sf.rel))
            self._insert_docs(sf.kind, new.id, docs, stats)
        return new

    def _write_state(self, state: FileState) -> None:
        """Store ``state``; a new file (``id == 0``) gets its id assigned here."""
        values = astuple(state)[3:]  # size … last_ts, in column order
        if state.id:
            self._db.execute(
                "UPDATE files SET size=?, mtime_ns=?, inode=?, offset=?, head_len=?, "
                "head_hash=?, tail_hash=?, session_key=?, next_num=?, last_ts=? WHERE id=?",
                (*values, state.id),
            )
            return
        cur = self._db.execute(
            "INSERT INTO files(size, mtime_ns, inode, offset, head_len, head_hash, tail_hash, "
            "session_key, next_num, last_ts, rel, kind) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (*values, state.rel, state.kind),
        )
        state.id = int(cur.lastrowid or 0)

    def _next_id(self, kind: str) -> int:
        if kind not in self._next_ids:
            base = KIND_BASE[kind]
            row = self._db.execute(
                "SELECT max(id) FROM docs WHERE id >= ? AND id < ?", (base, base + KIND_SPAN)
            ).fetchone()
            self._next_ids[kind] = (row[0] or base) + 1
        return self._next_ids[kind]

    def _insert_docs(self, kind: str, file_id: int, docs: Iterable[Doc], stats: SyncStats) -> None:
        next_id = self._next_id(kind)
        rows: list[tuple[Any, ...]] = []
        fts_rows: list[tuple[int, str, str]] = []
        texts: list[tuple[int, str]] = []
        for doc in docs:
            text = self._redact(doc.text) if self._redact is not None else doc.text
            # Length, "asks a question" and who speaks feed the ranking; kept here so a
            # search reads narrow rows instead of the texts.
            asks = text.rstrip().endswith("?")
            rows.append(
                (
                    next_id,
                    file_id,
                    doc.num,
                    doc.end_num,
                    doc.ts,
                    doc.session_key,
                    doc.role,
                    doc.origin,
                    len(text),
                    int(asks),
                    transcript_speaker(text, doc.role) if kind == "session" and doc.role else None,
                )
            )
            texts.append((next_id, text))
            fts_rows.append((next_id, index_text(text), owner_token(kind, doc.session_key)))
            next_id += 1
        self._next_ids[kind] = next_id
        if rows:
            table = FTS_TABLES[kind]
            self._db.executemany("INSERT INTO docs VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            self._db.executemany("INSERT INTO texts VALUES (?,?)", texts)
            self._db.executemany(
                f"INSERT INTO {table}(rowid, body, owner) VALUES (?,?,?)", fts_rows
            )
        stats.docs_added += len(rows)

    def _delete_docs(self, state: FileState, stats: SyncStats) -> None:
        rows = self._db.execute(
            "SELECT d.id, t.text, d.session_key FROM docs d JOIN texts t ON t.id = d.id "
            "WHERE d.file_id=?",
            (state.id,),
        ).fetchall()
        table = FTS_TABLES[state.kind]
        self._db.executemany(
            f"INSERT INTO {table}({table}, rowid, body, owner) VALUES ('delete', ?, ?, ?)",
            ((i, index_text(text), owner_token(state.kind, key)) for i, text, key in rows),
        )
        self._db.executemany("DELETE FROM texts WHERE id=?", ((r[0],) for r in rows))
        self._db.executemany("DELETE FROM embeddings WHERE id=?", ((r[0],) for r in rows))
        self._db.execute("DELETE FROM docs WHERE file_id=?", (state.id,))
        stats.docs_removed += len(rows)

    def drop_file(self, state: FileState, stats: SyncStats) -> None:
        self._delete_docs(state, stats)
        self._db.execute("DELETE FROM files WHERE id=?", (state.id,))

"""The recall index: a derived SQLite FTS5 database over the workspace's memory files.

``workspace/.hippobot/recall.sqlite3`` holds nothing that is not in the workspace files;
deleting it loses nothing, the next :meth:`RecallIndex.sync` rebuilds it.

Tables:

* ``files``: one row per source file: its last seen (size, mtime_ns, inode), the byte
  ``offset`` indexed so far (always the end of a complete line), hashes of its first
  4 KiB and of the 256 bytes before ``offset``, and for sessions the numbering state.
* ``docs``: one narrow row per indexed unit (citation number, timestamp, session, role)
  and ``texts``: its text as shown to people. The id is allocated from a range per kind
  (memory, history, session) and is the rowid in that kind's FTS table.
* ``fts_memory``, ``fts_history``, ``fts_session``: contentless FTS5 tables (``body``,
  ``owner``). One per kind because BM25 scans every match of a term to weigh it: with
  separate tables a scope filter is free and a query reads each posting list once.
  Rows are deleted by replaying :func:`~hippobot.recall.query.index_text` over the text.
* ``vectors``: embeddings of documents, only when semantic search is on.

Concurrency: WAL mode and a busy timeout; every write happens inside ``BEGIN IMMEDIATE``
after re-reading ``files`` if another connection committed, so two processes syncing at
once never index the same bytes twice. A corrupt database is deleted and rebuilt.

This module owns the connection, sync and queries; the DDL and connection settings are in
:mod:`~hippobot.recall.schema`, the rows of one file are written by
:mod:`~hippobot.recall.writer`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, TypeVar

from .embeddings import Embedder, VectorStore, reciprocal_rank_fusion
from .query import (
    FTS_TABLES,
    KIND_BOOST,
    Hit,
    ParsedQuery,
    RecallError,
    Scope,
    candidate_sql,
    expand_citation,
    load_hits,
    match_expression,
    owner_clause,
    owner_filter,
    parse_citation,
    parse_query,
)
from .schema import KIND_BASE, KIND_SPAN, SQLITE_BUSY, SQLITE_LOCKED, connect, is_corruption
from .schema import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported: it used to live here
from .sources import FileState, Scanner, SourceFile, SyncStats, classify
from .writer import IndexWriter

__all__ = ["INDEX_DIR", "INDEX_FILE", "RecallIndex", "SyncStats"]

log = logging.getLogger("hippobot.recall")

INDEX_DIR = ".hippobot"
INDEX_FILE = "recall.sqlite3"
_COMMIT_EVERY = 20_000  # docs per transaction while (re)building
# Newest matches scored per kind: all-terms pass, then the any-term fallback. Bounds the
# cost of a query whatever the terms; see docs/recall.md for what it means for ranking.
_CANDIDATES = 200
_CANDIDATES_ANY = 100
_SCOPE_KINDS: dict[str, tuple[str, ...]] = {
    "all": ("memory", "history", "session"),
    "history": ("history",),
    "sessions": ("session",),
    "memory": ("memory",),
}

T = TypeVar("T")


class _Everything:
    def __contains__(self, item: object) -> bool:
        return True


_EVERYTHING = _Everything()


class RecallIndex:
    """Full-text recall over one workspace. Thread-safe; several processes may share it.

    ``auto_sync`` makes :meth:`search` and :meth:`get` call :meth:`sync` first (a few
    ``stat`` calls when nothing changed), so results always reflect the files on disk.
    """

    def __init__(
        self, workspace: Path, *, auto_sync: bool = True, embedder: Embedder | None = None
    ) -> None:
        self.workspace = Path(workspace)
        self.path = self.workspace / INDEX_DIR / INDEX_FILE
        self.auto_sync = auto_sync
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._db_inode = 0
        self._states: dict[str, FileState] | None = None
        self._data_version = -1
        self._warnings: list[str] = []
        self._scanner = Scanner(self.workspace)
        # Optional semantic side (off by default): vectors kept next to the documents.
        self._vectors = VectorStore(embedder) if embedder is not None else None

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                self._states = None

    def __enter__(self) -> RecallIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    def _ensure_open(self) -> None:
        """Open (or reopen, if the file was deleted or replaced) and check the schema."""
        if self._conn is not None:
            try:
                if os.stat(self.path).st_ino == self._db_inode:
                    return
            except FileNotFoundError:
                pass
            self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect(self.path)
        self._db_inode = os.stat(self.path).st_ino
        self._states = None

    def _guard(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the lock; a corrupt database is deleted, rebuilt, and retried."""
        with self._lock:
            try:
                self._ensure_open()
                return fn()
            except sqlite3.DatabaseError as exc:
                if not is_corruption(exc):
                    raise
                self._recover(exc)
                return fn()

    def _recover(self, exc: sqlite3.DatabaseError) -> None:
        message = (
            f"recall index {self.path} was corrupt ({exc}); rebuilt it from the workspace files"
        )
        log.warning(message)
        self._warnings.append(message)
        self.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self._ensure_open()
        # Rebuild now (a search may not sync); keep the warning for the caller's stats.
        self._warnings = self._sync().warnings

    # --- sync --------------------------------------------------------------------------

    def sync(self, paths: Iterable[Path | str] | None = None) -> SyncStats:
        """Bring the index up to date with the files; only changed files are read.

        Unchanged files cost one ``stat`` each. A file that only grew (same inode, same
        first 4 KiB, same bytes just before the indexed offset) has only its new complete
        lines indexed; any other change re-indexes that one file.

        ``paths`` limits the check to those files (e.g. the session file a turn just
        appended to): one ``stat`` each instead of one per file in the workspace. Paths
        the index does not cover are ignored.
        """
        targets = None if paths is None else list(paths)
        return self._guard(lambda: self._sync(targets))

    def rebuild(self) -> SyncStats:
        """Drop everything and index the whole workspace again."""

        def run() -> SyncStats:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM docs")
                db.execute("DELETE FROM texts")
                db.execute("DELETE FROM vectors")
                db.execute("DELETE FROM files")
                for table in FTS_TABLES.values():
                    db.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._states = None
            stats = self._sync()
            started = time.perf_counter()
            for table in FTS_TABLES.values():
                db.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            stats.seconds += time.perf_counter() - started
            stats.rebuilt = True
            return stats

        return self._guard(run)

    def _auto_sync(self) -> None:
        """Sync before answering, unless another process holds the write lock too long:
        then answer from the index as it is (it is at most that sync behind)."""
        if not self.auto_sync:
            return
        try:
            self._sync()
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code not in (SQLITE_BUSY, SQLITE_LOCKED):
                raise
            log.info("recall index busy (%s); searching without syncing first", exc)

    def _load_states(self) -> dict[str, FileState]:
        rows = self._db.execute(
            "SELECT id, rel, kind, size, mtime_ns, inode, offset, head_len, head_hash, "
            "tail_hash, session_key, next_num, last_ts FROM files"
        )
        return {r[1]: FileState(*r) for r in rows}

    def _cached_states(self) -> dict[str, FileState]:
        # data_version changes only when another connection commits, so an unchanged value
        # means our cached copy of `files` is current and costs no query.
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if self._states is None or version != self._data_version:
            self._states = self._load_states()
            self._data_version = version
        return self._states

    def _sync(self, paths: list[Path | str] | None = None) -> SyncStats:
        started = time.perf_counter()
        stats = SyncStats(warnings=self._warnings)
        self._warnings = []
        found, scope = self._discover(paths)
        stats.files_seen = len(found)
        states = self._cached_states()
        present = {sf.rel for sf, _ in found}
        todo = [(sf, st) for sf, st in found if not _is_current(states.get(sf.rel), st)]
        # Every file found is known (no todo), so with a full scan nothing vanished
        # exactly when the counts agree.
        vanished = (
            len(states) > len(present)
            if isinstance(scope, _Everything)
            else any(rel in states for rel in scope if rel not in present)
        )
        if not todo and not vanished:
            stats.files_unchanged = len(found)
            return stats
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            # Fresh under the write lock: reloaded only if another process committed.
            states = self._cached_states()
            writer = IndexWriter(db, self._vectors)
            pending = 0
            for sf, st in sorted(todo, key=lambda item: item[1].st_mtime_ns):
                if _is_current(states.get(sf.rel), st):
                    continue  # another process indexed it meanwhile
                before = stats.docs_added
                new_state = writer.index_file(sf, states.get(sf.rel), stats)
                if new_state is not None:
                    states[sf.rel] = new_state
                pending += stats.docs_added - before
                if pending >= _COMMIT_EVERY:
                    db.execute("COMMIT")
                    db.execute("BEGIN IMMEDIATE")
                    pending = 0
            for rel in [rel for rel in states if rel not in present and rel in scope]:
                writer.drop_file(states.pop(rel), stats)
                stats.files_removed += 1
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._states = None
            raise
        self._states = states
        self._data_version = db.execute("PRAGMA data_version").fetchone()[0]
        changed = stats.files_appended + stats.files_reindexed + stats.files_new
        stats.files_unchanged = stats.files_seen - changed
        stats.seconds = time.perf_counter() - started
        return stats

    def _discover(
        self, paths: list[Path | str] | None
    ) -> tuple[list[tuple[SourceFile, os.stat_result]], set[str] | _Everything]:
        """Files to check, and the set of ``rel`` names a missing file may be dropped from."""
        if paths is None:
            return self._scanner.scan(), _EVERYTHING
        found: list[tuple[SourceFile, os.stat_result]] = []
        scope: set[str] = set()
        for path in paths:
            sf = classify(self.workspace, path)
            if sf is None:
                continue
            scope.add(sf.rel)
            try:
                found.append((sf, os.stat(sf.path)))
            except OSError:
                continue  # gone: dropped below because it is in scope
        return found, scope

    # --- queries -----------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        k: int = 8,
        scope: Scope = "all",
        session_key: str | None = None,
        include_other_sessions: bool = True,
        now: float | None = None,
    ) -> list[Hit]:
        """The ``k`` best matches for ``query``, best first.

        Any text is accepted: it is reduced to plain terms, so FTS syntax typed by a user
        is searched for, never interpreted. Documents containing every term rank before
        documents containing only some. ``session_key`` marks hits from other sessions;
        with ``include_other_sessions=False`` they (and other sessions' history entries)
        are left out.
        """
        if scope not in _SCOPE_KINDS:
            raise RecallError(f"unknown scope {scope!r}; use one of: {', '.join(_SCOPE_KINDS)}")
        k = max(1, min(int(k), 50))
        parsed = parse_query(query)
        if not parsed and (self._vectors is None or not query.strip()):
            return []

        def run() -> list[Hit]:
            self._auto_sync()
            found = self._keyword_search(
                parsed,
                k,
                scope,
                session_key,
                include_other_sessions,
                time.time() if now is None else now,
            )
            if self._vectors is not None:
                found = self._fuse(found, query, k, scope, session_key, include_other_sessions)
            return load_hits(self._db, found[:k], parsed, session_key)

        return self._guard(run)

    def _keyword_search(
        self,
        parsed: ParsedQuery,
        k: int,
        scope: str,
        session_key: str | None,
        include_other: bool,
        now: float,
    ) -> list[tuple[int, float]]:
        """Best ``(doc id, score)`` first: all-terms matches, then any-term, then prefixes."""
        found: dict[int, tuple[int, float]] = {}  # id -> (pass, score)
        if not parsed:
            return []
        passes: list[tuple[Literal["all", "any"], bool]] = [("all", False)]
        if len(parsed.terms) > 1:
            passes.append(("any", False))
        passes.append(("all", True))  # last resort: terms as prefixes ("sqlite" → "sqlite3")
        for tier, (mode, prefix) in enumerate(passes):
            if (tier and len(found) >= k) or (prefix and found):
                break
            match = match_expression(parsed, mode=mode, prefix=prefix)
            for kind in _SCOPE_KINDS[scope]:
                owners = owner_filter(kind, session_key, include_other)
                params = {
                    "match": match + owner_clause(owners),
                    "cap": _CANDIDATES if mode == "all" else _CANDIDATES_ANY,
                    "k": k + len(found),  # earlier-pass hits may come back; keep k new ones
                    "now": now,
                    # Memory files are current truth (age 0); an undated row gets no boost.
                    "missing_ts": now if kind == "memory" else -1e12,
                }
                boost = KIND_BOOST[kind]
                sql = candidate_sql(kind, ranked=not parsed.only_stopwords)
                for doc_id, score in self._db.execute(sql, params):
                    if doc_id not in found:
                        found[doc_id] = (tier, score * boost)
        best = sorted(found.items(), key=lambda item: (item[1][0], -item[1][1], -item[0]))
        return [(doc_id, score) for doc_id, (_tier, score) in best[:k]]

    def _fuse(
        self,
        keyword: list[tuple[int, float]],
        query: str,
        k: int,
        scope: str,
        session_key: str | None,
        include_other: bool,
    ) -> list[tuple[int, float]]:
        """Merge keyword and semantic rankings by reciprocal rank fusion."""
        assert self._vectors is not None
        ranges = [(KIND_BASE[kind], KIND_BASE[kind] + KIND_SPAN) for kind in _SCOPE_KINDS[scope]]
        similar = [i for i, _ in self._vectors.search(self._db, query, k=2 * k, id_ranges=ranges)]
        if similar and not include_other and session_key:
            marks = ",".join("?" * len(similar))
            foreign = {
                row[0]
                for row in self._db.execute(
                    f"SELECT id FROM docs WHERE id IN ({marks}) AND id >= ? "
                    "AND session_key IS NOT NULL AND session_key != ?",
                    (*similar, KIND_BASE["history"], session_key),
                )
            }
            similar = [i for i in similar if i not in foreign]
        fused = reciprocal_rank_fusion([[i for i, _ in keyword], similar])
        scores = dict(keyword)
        return [(i, scores.get(i, 0.0)) for i in fused]

    def get(
        self,
        citation: str,
        around: int = 3,
        *,
        session_key: str | None = None,
        include_other_sessions: bool = True,
    ) -> str:
        """Expand a citation: a full history entry, a session message with ``around``
        messages either side, or the lines of a memory file around the cited line.

        Raises :class:`RecallError` for text that is not a citation, a citation that no
        longer exists, or another session's content when ``include_other_sessions`` is off.
        """
        cite = parse_citation(citation)
        if cite is None:
            raise RecallError(
                f"not a citation: {citation!r} (expected history#N, session KEY#N or FILE:LINE)"
            )
        around = max(0, min(int(around), 50))
        private = session_key if not include_other_sessions else None

        def run() -> str:
            self._auto_sync()
            return expand_citation(self._db, self.workspace, cite, around, private)

        return self._guard(run)


def _is_current(state: FileState | None, st: os.stat_result) -> bool:
    return (
        state is not None
        and st.st_size == state.size
        and st.st_mtime_ns == state.mtime_ns
        and st.st_ino == state.inode
    )

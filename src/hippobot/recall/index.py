"""The recall index: a derived SQLite FTS5 database over the workspace's memory files.

``workspace/.hippobot/recall.sqlite3`` holds nothing that is not in the workspace files;
deleting it loses nothing, the next :meth:`RecallIndex.sync` rebuilds it.

Tables:

* ``files``: one row per source file: its last seen (size, mtime_ns, inode), the byte
  ``offset`` indexed so far (always the end of a complete line), hashes of its first
  4 KiB and of the 256 bytes before ``offset``, and for sessions the numbering state.
* ``docs``: one narrow row per indexed unit (citation number, timestamp, session, role,
  length and whether it asks a question)
  and ``texts``: its text as shown to people. The id is allocated from a range per kind
  (memory, history, session) and is the rowid in that kind's FTS table.
* ``fts_memory``, ``fts_history``, ``fts_session``: contentless FTS5 tables (``body``,
  ``owner``). One per kind because BM25 scans every match of a term to weigh it: with
  separate tables a scope filter is free and a query reads each posting list once.
  Rows are deleted by replaying :func:`~hippobot.recall.query.index_text` over the text.
* ``embeddings``: one vector per document, only when semantic search is on; filled in the
  background by :meth:`RecallIndex.embed_pending` (see :mod:`~hippobot.recall.embeddings`).

Concurrency: WAL mode and a busy timeout; every write happens inside ``BEGIN IMMEDIATE``
after re-reading ``files`` if another connection committed, so two processes syncing at
once never index the same bytes twice. A corrupt database is deleted and rebuilt.

This module owns the connection, sync and queries; the DDL and connection settings are in
:mod:`~hippobot.recall.schema`, the rows of one file are written by
:mod:`~hippobot.recall.writer`.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hippobot.redact import Redactor
from hippobot.workspace import Workspace

from .embeddings import Embedder, EmbeddingsUnavailableError, FillStats, VectorScores, VectorStore
from .periods import Period, named_periods
from .query import (
    FTS_TABLES,
    Hit,
    ParsedQuery,
    RecallError,
    Scope,
    Term,
    expand_citation,
    load_hits,
    match_expression,
    name_words,
    owner_clause,
    owner_filter,
    parse_citation,
    parse_query,
)
from .ranking import HYBRID, KEYWORD, Evidence, relevance
from .schema import KIND_BASE, KIND_SPAN, SQLITE_BUSY, SQLITE_LOCKED, connect, is_corruption
from .schema import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported: it used to live here
from .sources import FileState, Scanner, SourceFile, SyncStats, classify
from .writer import IndexWriter

__all__ = ["RecallIndex", "SyncStats"]

log = logging.getLogger("hippobot.recall")

_COMMIT_EVERY = 20_000  # docs per transaction while (re)building
# Bounded work per query and kind (see _kind_candidates and docs/recall.md): a term with
# at most _RARE_MAX matches is "rare" and all its matches are ranked; when every term is
# common, the newest _CANDIDATES matches are. _POOL candidates per kind are kept.
_RARE_MAX = 1000
_CANDIDATES = 200
_POOL = 50
_ENOUGH = 10  # common terms only: documents with all of them before any-term ones are read
_NEIGHBOURS = 20  # the best candidates by words (and by meaning) whose neighbours join
_JOIN = 1  # ... the messages this close to them
_WINDOW = 3  # messages either side whose words count in ``cover_wide``
_CONTEXT = 2  # messages either side whose meaning counts in ``context``
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
        self,
        workspace: Path,
        *,
        auto_sync: bool = True,
        embedder: Embedder | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        # With the agent's redactor, no key (configured, or of a well-known shape) enters
        # the index nor leaves it (search, get), whatever file it was found in.
        self._redactor = redactor
        self.path = Workspace(self.workspace).recall_index
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
        self._semantic_warning: str | None = None  # set once when vectors stop working
        self._counts: dict[str, int] = {}  # documents per kind, for BM25's idf
        self._counts_key: tuple[int, int] = (-1, -1)

    @property
    def semantic(self) -> bool:
        """True when an embedder is configured (search fuses vectors when it can)."""
        return self._vectors is not None

    def take_semantic_warning(self) -> str | None:
        """The one-line warning of the last embedding failure, once (then ``None``)."""
        message, self._semantic_warning = self._semantic_warning, None
        return message

    def note_semantic_warning(self, message: str) -> None:
        """Record why vectors are not used (e.g. the embedder could not be created)."""
        self._semantic_warning = message

    def _embedding_failed(self, exc: Exception) -> None:
        # Recorded, not logged: the front end shows it once, where the user looks.
        log.debug("embedding failed: %s", exc)
        self._semantic_warning = f"semantic recall unavailable, searching by keywords only: {exc}"

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
        for path in Workspace(self.workspace).recall_index_files:
            path.unlink(missing_ok=True)
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
                db.execute("DELETE FROM embeddings")
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

    def _auto_sync(self, replayed: tuple[str, int] | None = None) -> None:
        """Sync before answering, unless another process holds the write lock too long:
        then answer from the index as it is (it is at most that sync behind)."""
        if not self.auto_sync:
            return
        try:
            self._sync(replayed=replayed)
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

    def _sync(
        self, paths: list[Path | str] | None = None, *, replayed: tuple[str, int] | None = None
    ) -> SyncStats:
        started = time.perf_counter()
        stats = SyncStats(warnings=self._warnings)
        self._warnings = []
        found, scope = self._discover(paths)
        stats.files_seen = len(found)
        states = self._cached_states()
        present = {sf.rel for sf, _ in found}
        todo = [(sf, st) for sf, st in found if not _is_current(states.get(sf.rel), st)]
        if replayed is not None:
            todo = [(sf, st) for sf, st in todo if not _only_replayed_is_new(states.get(sf.rel), st, replayed)]
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
            writer = IndexWriter(db, redact=self._redact)
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
        explain: bool = False,
        min_score: float = 0.0,
        vector: Any = None,
        semantic: bool = True,
        snippet_chars: int = 160,
        marks: bool = True,
        max_terms: int | None = None,
        statements: bool = False,
        replayed_from: int | None = None,
    ) -> list[Hit]:
        """The ``k`` best matches for ``query``, best first, each with a calibrated
        ``score`` between 0 and 1 (see :mod:`~hippobot.recall.ranking`).

        Any text is accepted: it is reduced to plain terms, so FTS syntax typed by a user
        is searched for, never interpreted. Keyword evidence is BM25 over any of the
        terms (rare terms weigh most, as BM25 has them). ``session_key`` marks hits from
        other sessions; with ``include_other_sessions=False`` they (and other sessions'
        history entries) are left out.

        With an embedder, each candidate's similarity to the query is added to its
        evidence; if the query cannot be embedded (endpoint down or slow) the keyword
        ranking is returned and :meth:`take_semantic_warning` says why. ``explain`` fills
        each hit's ``explain`` with the parts of its score. ``min_score`` leaves out hits
        below that relevance (a bar for callers that act on hits unasked, e.g. recall
        before answering); the default keeps every candidate.

        ``vector`` is the query's vector when the caller made it already
        (:meth:`embed_query`); ``semantic=False`` searches by keywords only even with an
        embedder (a caller that could not wait for the vector). ``snippet_chars`` is the
        length of each snippet; ``marks=False`` leaves the matched words unmarked;
        ``statements`` shows a history entry of many lines as its matching lines,
        untagged (:func:`~hippobot.recall.query.best_lines`), and an assistant message
        as what it said, its tool calls left out;
        ``max_terms`` keeps only that many of the query's words, the longest (each word is
        probed in every table, so a long message costs in proportion).

        ``replayed_from``: the first message of session ``session_key`` that the caller's
        prompt replays. While all that session's file holds beyond what is indexed comes
        from there on, the file is not indexed before this search: those messages are in
        the prompt (recall before answering leaves them out anyway), and indexing the last
        turn's two messages before every answer cost ~11 ms and ~60 KiB of index writes
        per turn. They are indexed by the first search that needs them: once consolidation
        moves the replay past them, or by any other search.
        """
        if scope not in _SCOPE_KINDS:
            raise RecallError(f"unknown scope {scope!r}; use one of: {', '.join(_SCOPE_KINDS)}")
        k = max(1, min(int(k), 50))
        parsed = parse_query(query)
        if max_terms is not None:
            parsed = parsed.longest(max(1, max_terms))
        if not parsed and (self._vectors is None or not query.strip()):
            return []
        # Embedding the query may wait on an endpoint: do it before taking the index lock.
        qvec = None
        if self._vectors is not None and semantic:
            qvec = vector if vector is not None else self._query_vector(query)
        clock = time.time() if now is None else now
        periods = named_periods(query, clock)

        replayed = None if session_key is None or replayed_from is None else (session_key, replayed_from)

        def run() -> list[Hit]:
            self._auto_sync(replayed)
            found, by_meaning = self._gather(parsed, qvec, max(k, _POOL), scope, session_key,
                                             include_other_sessions, clock, periods)  # fmt: skip
            # Without a vector in scope (none made yet) the hybrid weights would read every
            # candidate as meaning nothing: rank by the keyword weights instead.
            weights = HYBRID if by_meaning else KEYWORD
            for ev in found:
                ev.score = relevance(ev, weights)
            best = _trim(sorted(found, key=lambda e: (-e.score, -e.doc_id)), min_score)[:k]
            notes = {e.doc_id: _explain(e) for e in best} if explain else None
            return load_hits(self._db, [(e.doc_id, e.score) for e in best], parsed, session_key,
                             notes, snippet_chars=snippet_chars, marks=marks,
                             statements=statements)  # fmt: skip

        return self._guard(run)

    def embed_query(self, query: str) -> Any:
        """The query's vector for :meth:`search` (``vector=``), or ``None`` without an
        embedder or when it fails (then :meth:`take_semantic_warning` says why). Takes no
        index lock: a caller may run it apart and stop waiting for it."""
        if self._vectors is None or not query.strip():
            return None
        return self._query_vector(query)

    def candidates(
        self,
        query: str,
        *,
        scope: Scope = "all",
        session_key: str | None = None,
        include_other_sessions: bool = True,
        now: float | None = None,
        pool: int = _POOL,
    ) -> list[tuple[Evidence, str]]:
        """What :meth:`search` ranks, unranked: every candidate's evidence and its citation
        (for fitting the ranking's weights; see ``benchmarks/locomo/tune.py``)."""
        parsed = parse_query(query)
        qvec = self._query_vector(query) if self._vectors is not None else None
        clock = time.time() if now is None else now
        periods = named_periods(query, clock)

        def run() -> list[tuple[Evidence, str]]:
            self._auto_sync()
            found, _ = self._gather(parsed, qvec, pool, scope, session_key,
                                    include_other_sessions, clock, periods)  # fmt: skip
            hits = load_hits(self._db, [(e.doc_id, 0.0) for e in found], parsed, session_key)
            return [(e, h.citation) for e, h in zip(found, hits, strict=True)]

        return self._guard(run)

    def _gather(
        self,
        parsed: ParsedQuery,
        qvec: Any,
        pool: int,
        scope: str,
        session_key: str | None,
        include_other: bool,
        now: float,
        periods: list[Period],
    ) -> tuple[list[Evidence], bool]:
        """Every candidate with its evidence, and whether it includes meaning (vectors)."""
        found, matches = self._keyword_search(parsed, pool, scope, session_key, include_other)
        scores = None
        if qvec is not None:
            scores = self._add_meaning(found, qvec, pool, scope, session_key, include_other)
        self._add_neighbours(found, scores, matches)
        self._add_facts(found, now, parsed, periods)
        return list(found.values()), scores is not None

    def _query_vector(self, query: str) -> Any:
        assert self._vectors is not None
        try:
            return self._vectors.embedder.embed_query(query)
        except EmbeddingsUnavailableError as exc:
            self._embedding_failed(exc)
        except Exception as exc:  # an embedder bug must not break keyword search
            self._embedding_failed(EmbeddingsUnavailableError(f"{type(exc).__name__}: {exc}"))
        return None

    def embed_pending(self, *, max_docs: int = 256, batch_size: int = 32) -> FillStats:
        """Give up to ``max_docs`` documents without a vector one, newest first.

        Meant for a background thread: the embedding runs without the index lock or a
        database transaction held, so searches and syncs go on meanwhile. Stops at the
        first embedding failure (one warning, see :meth:`take_semantic_warning`).
        """
        stats = FillStats()
        store = self._vectors
        if store is None:
            return stats

        def begin() -> None:
            self._db.execute("BEGIN IMMEDIATE")

        def first() -> list[tuple[int, str, str]]:
            self._auto_sync()
            begin()
            try:
                stats.dropped = store.drop_stale(self._db)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return store.next_batch(self._db, min(batch_size, max_docs))

        batch = self._guard(first)
        while batch:
            try:
                rows = store.embed(batch)
            except EmbeddingsUnavailableError as exc:
                self._embedding_failed(exc)
                break

            def save(rows: list[tuple[int, str, bytes]] = rows) -> list[tuple[int, str, str]]:
                begin()
                try:
                    stats.embedded += store.store(self._db, rows)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                left = max_docs - stats.embedded
                return store.next_batch(self._db, min(batch_size, left)) if left > 0 else []

            batch = self._guard(save)
        stats.pending = self._guard(lambda: store.pending(self._db))
        return stats

    def _keyword_search(
        self,
        parsed: ParsedQuery,
        pool: int,
        scope: str,
        session_key: str | None,
        include_other: bool,
    ) -> tuple[dict[int, Evidence], dict[str, list[_TermMatches]]]:
        """Up to ``pool`` candidates per kind with their word evidence, and per kind which
        documents hold each term; the terms are retried as prefixes when nothing matches
        them as words ("sqlite" → "sqlite3")."""
        if not parsed:
            return {}, {}
        for prefix in (False, True):
            found: dict[int, Evidence] = {}
            matches: dict[str, list[_TermMatches]] = {}
            for kind in _SCOPE_KINDS[scope]:
                owners = owner_filter(kind, session_key, include_other)
                evs, matches[kind] = self._kind_candidates(
                    kind, parsed, owner_clause(owners), pool, prefix
                )
                for ev in evs:
                    found[ev.doc_id] = ev
            if found or parsed.only_stopwords:
                return found, matches
        return {}, {}

    def _kind_candidates(
        self, kind: str, parsed: ParsedQuery, owners: str, pool: int, prefix: bool
    ) -> tuple[list[Evidence], list[_TermMatches]]:
        """The best ``pool`` documents of one kind by BM25, in bounded work.

        Each term is probed first (up to ``_RARE_MAX + 1`` of its matches). When some terms
        are rare (at most ``_RARE_MAX`` matches), every document holding one of them is
        ranked by BM25 over all the terms; the rare terms are then named twice in the
        MATCH expression, which doubles their weight (they carry the meaning). When every
        term is common, the newest ``_CANDIDATES`` documents with all of them are ranked,
        and if they are fewer than ``_ENOUGH``, the newest with any (each term named once). Words found in most documents are thus
        never the reason an older exact match is left out.

        The probe's matches of a rare term are also which documents hold it (``cover``).
        """
        table = FTS_TABLES[kind]
        db = self._db
        if parsed.only_stopwords:
            sql = (f"SELECT rowid FROM {table} WHERE {table} MATCH ? "
                   "ORDER BY rowid DESC LIMIT ?")  # fmt: skip
            match = match_expression(parsed, mode="any", prefix=False) + owners
            return [Evidence(r[0], kind) for r in db.execute(sql, (match, pool))], []
        probe = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)"
        holders = f"SELECT rowid FROM {table} WHERE {table} MATCH ?"
        freq: list[tuple[Term, int]] = []
        n_docs = self._doc_count(kind)
        held: list[_TermMatches] = []
        for term in parsed.terms:
            match = f"body : ({term.fts(prefix=prefix)}){owners}"
            df = db.execute(probe, (match, _RARE_MAX + 1)).fetchone()[0]
            if df:
                freq.append((term, df))
                docs = None  # a common term: which documents hold it is not read
                if df <= _RARE_MAX:
                    docs = frozenset(r[0] for r in db.execute(holders, (match,)))
                held.append(_TermMatches(_idf(n_docs, df), docs))
        if not freq:
            return [], []
        terms = [t for t, _ in freq]
        rare = [t for t, df in freq if df <= _RARE_MAX]
        every = _any_of(terms, prefix)
        ranked = f"SELECT rowid, -bm25({table}, 1.0, 0.0) FROM {table} WHERE {table} MATCH ?"
        if rare:
            queries = [(f"{ranked} ORDER BY 2 DESC LIMIT ?", f"{_any_of(rare, prefix)} AND {every}", pool)]
        else:
            # Both expressions name each term once, so their scores are on one scale.
            newest = f"SELECT * FROM ({ranked} ORDER BY rowid DESC LIMIT ?) ORDER BY 2 DESC LIMIT {pool}"
            queries = [(newest, _all_of(terms, prefix), _CANDIDATES)] if len(terms) > 1 else []
            queries.append((newest, every, _CANDIDATES))
        doubled = set(rare)
        norm = sum((2.0 if t in doubled else 1.0) * _idf(n_docs, df) for t, df in freq)
        out: dict[int, Evidence] = {}
        for sql, match, cap in queries:
            if len(out) >= _ENOUGH:
                break  # enough documents with every term: any-term matches score less
            for rank, (doc_id, bm25) in enumerate(db.execute(sql, (match + owners, cap)), start=1):
                if doc_id not in out:
                    words = max(0.0, bm25) / norm if norm > 0 else 0.0
                    out[doc_id] = Evidence(doc_id, kind, words=words, bm25=bm25, bm25_rank=rank)
        return sorted(out.values(), key=lambda e: -e.words)[:pool], held

    def _doc_count(self, kind: str) -> int:
        """Documents of ``kind`` (BM25's N), cached until the index changes."""
        key = (self._db.execute("PRAGMA data_version").fetchone()[0], self._db.total_changes)
        if self._counts_key != key:
            self._counts = {}
            self._counts_key = key
        if kind not in self._counts:
            base = KIND_BASE[kind]
            row = self._db.execute(
                "SELECT count(*) FROM docs WHERE id >= ? AND id < ?", (base, base + KIND_SPAN)
            ).fetchone()
            self._counts[kind] = int(row[0])
        return self._counts[kind]

    def _add_meaning(
        self,
        found: dict[int, Evidence],
        qvec: Any,
        pool: int,
        scope: str,
        session_key: str | None,
        include_other: bool,
    ) -> VectorScores | None:
        """Give every candidate its vector evidence and add the ``pool`` nearest documents
        (other sessions' left out when they must not be seen)."""
        assert self._vectors is not None
        ranges = [(KIND_BASE[kind], KIND_BASE[kind] + KIND_SPAN) for kind in _SCOPE_KINDS[scope]]
        scores = self._vectors.scores(self._db, qvec, id_ranges=ranges)
        if scores is None:
            return None
        similar = scores.top(pool)
        if similar and not include_other and session_key:
            marks = ",".join("?" * len(similar))
            foreign = {
                row[0]
                for row in self._db.execute(
                    f"SELECT id FROM docs WHERE id IN ({marks}) AND id >= ? "
                    "AND session_key IS NOT NULL AND session_key != ?",
                    (*[i for i, _ in similar], KIND_BASE["history"], session_key),
                )
            }
            similar = [(i, sim) for i, sim in similar if i not in foreign]
        for rank, (doc_id, _sim) in enumerate(similar, start=1):
            ev = found.get(doc_id)
            if ev is None:
                found[doc_id] = ev = Evidence(doc_id, _kind_of(doc_id))
            ev.vector_rank = rank
        for doc_id, ev in found.items():
            sim = scores.similarity(doc_id)
            if sim is not None:
                ev.similarity = sim
                ev.meaning = scores.standardise(sim)
        return scores

    def _add_neighbours(
        self,
        found: dict[int, Evidence],
        scores: VectorScores | None,
        matches: dict[str, list[_TermMatches]],
    ) -> None:
        """How much of the query each candidate and the messages around it hold (``cover``,
        ``cover_near``, ``cover_wide``) and the best meaning next to it (``context``): an
        answer is often the reply to the message that matched the question, and a
        question's words are often spread over a few turns. The neighbours of the best
        candidates become candidates too."""
        held = _HeldTerms(matches)
        sessions = [e for e in found.values() if e.kind == "session"]
        for ev in found.values():
            if ev.kind != "session":
                share = held.share(ev.kind, held.mask(ev.kind, ev.doc_id))
                ev.cover = ev.cover_near = ev.cover_wide = share
        if not sessions:
            return
        windows = self._windows([e.doc_id for e in sessions])
        seeds = sorted(sessions, key=lambda e: -e.words)[:_NEIGHBOURS]
        if scores is not None:
            seeds += sorted(sessions, key=lambda e: -(e.meaning or 0.0))[:_NEIGHBOURS]
        joined = []
        for seed in seeds:
            for neighbour, step in windows.get(seed.doc_id, ()):
                if abs(step) <= _JOIN and neighbour not in found:
                    found[neighbour] = ev = Evidence(neighbour, "session", via_neighbour=True)
                    joined.append(neighbour)
                    if scores is not None and (sim := scores.similarity(neighbour)) is not None:
                        ev.similarity = sim
                        ev.meaning = scores.standardise(sim)
        if joined:
            windows.update(self._windows(joined))
        meaning: dict[int, float] = {}
        if scores is not None:
            near_ids = {n for rows in windows.values() for n, _ in rows}
            for doc_id in near_ids:
                sim = scores.similarity(doc_id)
                if sim is not None:
                    meaning[doc_id] = scores.standardise(sim)
        for doc_id, rows in windows.items():
            ev = found[doc_id]
            own = near_mask = wide = held.mask("session", doc_id)
            for neighbour, step in rows:
                bits = held.mask("session", neighbour)
                wide |= bits
                if -1 <= step <= 1:
                    near_mask |= bits
            ev.cover = held.share("session", own)
            ev.cover_near = held.share("session", near_mask)
            ev.cover_wide = held.share("session", wide)
            near = [meaning[n] for n, st in rows if abs(st) <= _CONTEXT and n in meaning]
            if near:
                ev.context = max(near)

    def _windows(self, ids: list[int]) -> dict[int, list[tuple[int, int]]]:
        """For each session message, the messages within ``_WINDOW`` of it in its file, as
        ``(id, step)`` (``step`` < 0 before it)."""
        out: dict[int, list[tuple[int, int]]] = {i: [] for i in ids}
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(
            "SELECT d.id, n.id, n.num - d.num FROM docs d JOIN docs n ON n.file_id = d.file_id "
            f"AND n.num BETWEEN d.num - {_WINDOW} AND d.num + {_WINDOW} AND n.id != d.id "
            f"WHERE d.id IN ({marks})",
            ids,
        )
        for doc_id, neighbour, step in rows:
            out[doc_id].append((neighbour, step))
        return out

    def _add_facts(
        self, found: dict[int, Evidence], now: float, parsed: ParsedQuery, periods: list[Period]
    ) -> None:
        """Age, length, whether the text asks a question, whether the query names its
        speaker and the period it was written in, for every candidate."""
        ids = list(found)
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(
            f"SELECT id, ts, chars, asks, speaker FROM docs WHERE id IN ({marks})", ids
        )
        named: dict[str, bool] = {}
        for doc_id, ts, chars, asks, speaker in rows:
            ev = found[doc_id]
            if ts is not None:
                ev.age_days = max(0.0, now - ts) / 86400.0
                ev.dated = any(start <= ts < end for start, end in periods)
            ev.chars = int(chars or 0)
            ev.asks = bool(asks)
            if speaker:
                if speaker not in named:
                    named[speaker] = any(w in parsed.words for w in name_words(speaker))
                ev.speaker = named[speaker]

    def _redact(self, text: str) -> str:
        return self._redactor(text) if self._redactor is not None else text

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
            return self._redact(expand_citation(self._db, self.workspace, cite, around, private))

        return self._guard(run)


def _kind_of(doc_id: int) -> str:
    for kind, base in KIND_BASE.items():
        if base <= doc_id < base + KIND_SPAN:
            return kind
    return "session"


def _explain(ev: Evidence) -> dict[str, float | int | None]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return {
        "bm25": r(ev.bm25),
        "bm25_rank": ev.bm25_rank,
        "words": round(ev.words, 6),
        # Cosine similarity when the vector search found it among the nearest (the page's
        # "matched by meaning"); ``meaning`` is given for every candidate with a vector.
        "similarity": r(ev.similarity) if ev.vector_rank is not None else None,
        "vector_rank": ev.vector_rank,
        "meaning": r(ev.meaning),
        "context": r(ev.context),
        "cover": round(ev.cover, 6),
        "cover_near": round(ev.cover_near, 6),
        "cover_wide": round(ev.cover_wide, 6),
        "speaker": int(ev.speaker),
        "dated": int(ev.dated),
        "score": round(ev.score, 6),
    }


def _trim(ranked: list[Evidence], min_score: float) -> list[Evidence]:
    """Drop hits below ``min_score``, and the trailing ones found only as a neighbour of a
    match: context may lift a reply above weaker matches, never pad the list."""
    kept = [e for e in ranked if e.score >= min_score]
    last = max((i for i, e in enumerate(kept) if not e.via_neighbour), default=-1)
    return kept[: last + 1]


@dataclass(frozen=True, slots=True)
class _TermMatches:
    """One query term in one kind's table: its idf and, when it is rare (at most
    ``_RARE_MAX`` matches), every document that holds it."""

    idf: float
    docs: frozenset[int] | None


class _HeldTerms:
    """The idf-weighted share of the query's terms that a set of documents holds between
    them (``cover``). A term in more than ``_RARE_MAX`` documents counts as not held (it is
    common, so its idf is small); it still counts in the total, as in ``words``."""

    def __init__(self, matches: dict[str, list[_TermMatches]]) -> None:
        self._terms = matches
        self._total = {kind: sum(t.idf for t in terms) for kind, terms in matches.items()}
        self._masks: dict[int, int] = {}
        self._shares: dict[tuple[str, int], float] = {}

    def mask(self, kind: str, doc_id: int) -> int:
        """The terms ``doc_id`` holds, one bit each (in the order of ``matches[kind]``)."""
        mask = self._masks.get(doc_id)
        if mask is None:
            mask = 0
            for bit, term in enumerate(self._terms.get(kind, ())):
                if term.docs is not None and doc_id in term.docs:
                    mask |= 1 << bit
            self._masks[doc_id] = mask
        return mask

    def share(self, kind: str, mask: int) -> float:
        """The idf-weighted share of the query's terms in ``mask``."""
        if not mask:
            return 0.0
        key = (kind, mask)
        value = self._shares.get(key)
        if value is None:
            terms = self._terms[kind]
            held = sum(terms[bit].idf for bit in range(len(terms)) if mask >> bit & 1)
            value = self._shares[key] = held / self._total[kind]
        return value


def _idf(n_docs: int, df: int) -> float:
    """FTS5's idf (floored like FTS5's); a term past the probe counts as ``_RARE_MAX + 1``."""
    value = math.log((n_docs - df + 0.5) / (df + 0.5)) if n_docs > df else 0.0
    return max(value, 1e-6)


def _any_of(terms: Sequence[Term], prefix: bool) -> str:
    return "body : (" + " OR ".join(t.fts(prefix=prefix) for t in terms) + ")"


def _all_of(terms: Sequence[Term], prefix: bool) -> str:
    return "body : (" + " AND ".join(t.fts(prefix=prefix) for t in terms) + ")"


def _only_replayed_is_new(state: FileState | None, st: os.stat_result, replayed: tuple[str, int]) -> bool:
    """Whether a session file only grew, and only by messages its session's prompt replays
    (``replayed``: the session key and the first message replayed)."""
    key, first = replayed
    return (
        state is not None
        and state.kind == "session"
        and state.session_key == key
        and st.st_ino == state.inode
        and st.st_size > state.size
        and state.next_num >= first
    )


def _is_current(state: FileState | None, st: os.stat_result) -> bool:
    return (
        state is not None
        and st.st_size == state.size
        and st.st_mtime_ns == state.mtime_ns
        and st.st_ino == state.inode
    )

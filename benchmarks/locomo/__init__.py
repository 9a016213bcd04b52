"""LoCoMo, a public benchmark of long conversations, run against hippobot's memory.

``dataset`` reads the file, ``ingest`` writes a conversation as a hippobot workspace,
``retrieval`` measures search (``python -m benchmarks.locomo``); ``synthetic`` writes a
small file of the same shape for tests. See docs/recall.md.
"""

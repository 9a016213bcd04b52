"""The tool loop (model ↔ tools until a final answer) and the events it reports.

Used by a chat turn (:mod:`hippobot.agent`) and by Dream's edit phase
(:mod:`hippobot.lifecycle.dream`); it owns no storage.
"""

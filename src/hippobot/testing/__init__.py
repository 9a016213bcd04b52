"""Testing kit shipped with hippobot: a scripted model, in-process or served over HTTP.

See ``docs/providers.md``. Nothing here imports a vendor SDK.
"""

from __future__ import annotations

from hippobot.testing.scripted import (
    RecordedRequest,
    ScriptedCall,
    ScriptedModel,
    ScriptedProvider,
    UnscriptedCallError,
)
from hippobot.testing.server import ScriptedServer

__all__ = [
    "RecordedRequest",
    "ScriptedCall",
    "ScriptedModel",
    "ScriptedProvider",
    "ScriptedServer",
    "UnscriptedCallError",
]

"""Regular expressions compiled the first time they are used, not when their module loads.

hippobot's modules declare about 90 patterns at module level; a one-shot ``agent -m`` uses
about 20 of them before its reply. Compiling all of them at import cost the one-shot
~18 ms of its ~330 ms to the first model request (measured as whole processes, medians of
eleven alternated runs), paid on every start.

:func:`lazy_compile` returns a stand-in typed as the :class:`re.Pattern` it becomes. Its
first attribute lookup compiles the pattern; each attribute then looked up (``search``,
``sub``, ``pattern`` ...) is stored on the stand-in, so later lookups are plain instance
lookups, as fast as on the compiled pattern. It is not a :class:`re.Pattern` to
``isinstance`` and cannot be handed to ``re.sub(pattern, ...)``; call its methods instead.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

__all__ = ["lazy_compile"]


class _LazyPattern:
    def __init__(self, source: str | bytes, flags: int) -> None:
        self._source = source
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        # Only called for names not yet on the instance: compile once, then keep what was
        # asked for. Two threads racing here compile twice and store equal values.
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = re.compile(self._source, self._flags)
            self.__dict__["_compiled"] = compiled
        value = getattr(compiled, name)
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"lazy_compile({self._source!r}, {self._flags!r})"


def lazy_compile(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, deferred to the pattern's first use."""
    return cast("re.Pattern[AnyStr]", _LazyPattern(pattern, int(flags)))

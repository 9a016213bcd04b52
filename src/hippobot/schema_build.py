"""Building hippobot's own pydantic schemas without pydantic's plugins.

pydantic asks every installed distribution for plugins the first time it builds a
validator: ~17 ms with 170 packages installed, paid by every start (the config's models and
the tools' argument schemas are built before the first request). hippobot's schemas are its
own business, so they are built with pydantic's switch, ``PYDANTIC_DISABLE_PLUGINS``, set
for the moment and then restored: nothing else in the process (a user's program run by the
exec tool included) sees it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["without_pydantic_plugins"]

_SWITCH = "PYDANTIC_DISABLE_PLUGINS"


@contextmanager
def without_pydantic_plugins() -> Iterator[None]:
    before = os.environ.get(_SWITCH)
    os.environ[_SWITCH] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_SWITCH, None)
        else:
            os.environ[_SWITCH] = before

"""hippobot's own cost per turn, measured with the scripted model: ``python -m benchmarks``.

See ``docs/performance.md`` for what is measured, how, and the latest numbers.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout the benchmarks run from

"""Tests of trace_rl.integrations.verl. They need verl, which lives in its own environment (`make verl` builds
.venv-verl; `make verl-test` runs them there, and `make test` runs `make verl-test`). Collected only where verl is
importable, so the main environment's pytest run does not try to import them."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") is not None else ["test_*.py"]

"""Tests of trace_rl.integrations.trl. They need TRL, which lives in its own environment (`make trl` builds
.venv-trl; `make trl-test` runs them there, and `make test` runs `make trl-test`). Collected only where TRL is
importable, so the main environment's pytest run does not try to import them."""

from __future__ import annotations

import importlib.util
import os

collect_ignore_glob = [] if importlib.util.find_spec("trl") is not None else ["test_*.py"]
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

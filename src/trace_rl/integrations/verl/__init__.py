"""TRACE inside verl (docs/integrations.md): root allocation, turn-prefix replays and tree advantages through
verl's own registries, without forking its trainer. Needs verl (``make verl`` builds ``.venv-verl``).

Pieces (verl 0.9.1 seams in brackets):

- `trainer.TraceTrainer` [``register_trainer("trace_sync")``, a ``PPOTrainerSync`` subclass]: each step scores
  a candidate pool with the predictor, solves `allocate_roots`, submits only the active prompts with their
  ``__rollout_n__``, and updates the predictor on the finished trees.
- `worker.TraceAgentLoopWorker` / `worker.TraceAgentLoopManager` [``AgentLoopWorkerTQ._run_prompt``,
  ``agent_loop_manager_class``]: per prompt, roots -> anchors -> predictor -> `allocate_prefixes` -> replays
  from the saved turn prefix with the prompt's request id.
- `agent_loop.TraceAgentLoop` [``register("trace_agent")``]: one trace-rl episode through verl's LLM client.
- `estimators` [``register_adv_est``]: ``trace_treerpo``, ``trace_tree_grpo``.
- `server.ExternalVLLMServer`: a verl server actor in front of a vLLM HTTP server (CPU tests, external servers).

`layout` and `config` are pure; importing this package itself imports nothing from verl. Load everything
into verl with ``VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register``.
"""

import logging
import re

VERL_VERSION = "0.9.1"  # the verl release this adapter is written and tested against (Makefile VERL_PIN)


def check_verl_version(version: str) -> None:
    """Refuse a verl older than `VERL_VERSION` (0.9.0 never calls ``prepare_step``, so root allocation would
    silently not run, and has no per-row ``__rollout_n__``); log a warning for a newer, untested one.

    Raises:
        RuntimeError: ``version`` is older than `VERL_VERSION` or not a version string.
    """
    found, tested = _release(version), _release(VERL_VERSION)
    assert tested is not None  # VERL_VERSION is a release number
    if found is None:
        raise RuntimeError(f"cannot read verl's version {version!r}; trace_sync needs verl {VERL_VERSION}")
    if found < tested:
        raise RuntimeError(
            f"trace_sync needs verl >= {VERL_VERSION} (prepare_step and per-row __rollout_n__); found {version}. "
            f"Install it with `pip install verl=={VERL_VERSION}` (`make verl`)."
        )
    if found != tested:
        logging.getLogger(__name__).warning(
            "verl %s is newer than the tested %s: TRACE's seams may have moved", version, VERL_VERSION
        )


def _release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a version string such as "0.9.1" or "0.10.0.dev"; None when unreadable."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)

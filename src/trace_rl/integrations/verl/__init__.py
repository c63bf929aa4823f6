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

`compat` is the version seam: the one module that imports verl's (and TransferQueue's) names, after checking
verl's version against `VERL_RANGE`. `layout` and `config` are pure. Load everything into verl with
``VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register`` (on CPU: ``...verl.cpu``, see `cpu`).

Import order: where verl is installed, importing this package imports verl first (at its end), so that verl's
``VERL_USE_EXTERNAL_MODULES`` hook, which imports `register` or `cpu` and through them `compat`, runs before any
module of this package that needs `compat`. Otherwise a process that first imports, say, `worker` (a Ray worker
unpickling `worker.TraceAgentLoopWorker`) would import `compat` -> verl -> `register` -> `agent_loop` -> `compat`
half-initialised, an import cycle. Where verl is not installed, nothing is imported.
"""

from trace_rl.integrations.versions import UnsupportedVersionError, VersionRange, release

VERL_VERSION = "0.9.1"  # the verl release this adapter is written and tested against (Makefile VERL_PIN)
VERL_RANGE = VersionRange(
    "verl",
    minimum=(0, 9, 1),
    below=(1, 0, 0),
    tested=VERL_VERSION,
    why_minimum="0.9.0 never calls prepare_step, so root allocation would silently not run, and has no per-row "
    "__rollout_n__",
)
"""The verl releases the adapter supports (0.9.1 up to 1.0, newer ones with a warning) and the tested one;
checked by `trace_rl.integrations.verl.compat`, the one module that imports verl's names."""


def check_verl_version(version: str) -> None:
    """Refuse a verl older than `VERL_VERSION` (0.9.0 never calls ``prepare_step``, so root allocation would
    silently not run, and has no per-row ``__rollout_n__``) or from 1.0 on; log one warning line for a supported
    but untested one (`VERL_RANGE`).

    Raises:
        UnsupportedVersionError (a RuntimeError): outside `VERL_RANGE`, or not a version string; the message
            names the supported and tested releases.
    """
    VERL_RANGE.check(version)


def _release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a version string such as "0.9.1" or "0.10.0.dev"; None when unreadable."""
    return release(version)


__all__ = ["VERL_RANGE", "VERL_VERSION", "UnsupportedVersionError", "check_verl_version"]

try:  # last: verl's external-module hook may import this package's modules, which need the names above
    import verl  # noqa: F401
except ModuleNotFoundError as _exc:  # no verl here: the pure modules still import
    if _exc.name != "verl":
        raise

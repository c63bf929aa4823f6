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

VERL_VERSION = "0.9.1"  # the verl release this adapter is written and tested against (Makefile VERL_PIN)

"""Training: typed configs, the TRACE step (DESIGN.md section 1), policy update, checkpoints, the run loop."""

from trace_rl.train.config import ConfigError, TrainConfig, load_config, preset_names

__all__ = ["ConfigError", "TrainConfig", "load_config", "preset_names"]

"""A CPU platform for verl: FSDP2 training workers on gloo, so that verl's real trainer (``TraceTrainer.init``, the
actor's log-prob recomputation and update, the weight sync, ``fit()``) runs on a machine without an accelerator.

verl 0.9.1 resolves its device through ``verl.plugin.platform`` (``PlatformRegistry``; ``VERL_PLATFORM`` picks one
by name, else it probes and falls back to ``nvidia``). verl removed its own CPU platform ("verl does not support
CPU-only backend"), so this module registers one, ``VERL_PLATFORM=cpu``:

- device ``cpu`` (`PlatformCPU.current_device` is the string ``"cpu"``: verl passes it as ``device=``), collective
  backend ``gloo``; verl's process-group string ``cpu:gloo,{device}:{backend}`` would be ``cpu:gloo,cpu:gloo``,
  which torch refuses, so `register_cpu_engines` makes ``cpu:gloo`` the workers' default
  (`compat.set_process_group_backend`, a named, version-checked monkeypatch of one keyword default);
- a device module, `CPU_DEVICE`: ``torch.cpu`` plus the calls verl makes on ``torch.cuda`` that ``torch.cpu``
  lacks (``empty_cache``, ``mem_get_info``, ``memory_allocated``/``reserved`` and their maxima, RNG state), each
  the CPU's meaning of it (no cache to empty; host memory from /proc/meminfo; the process's RSS);
- Ray resource ``GPU``: verl's resource pools ask Ray for one ``GPU`` bundle per worker; Ray does not check
  hardware for a logical resource, so ``ray.init(num_gpus=1)`` (``+ray_kwargs.ray_init.num_gpus=1``) is one CPU
  "device" per worker. ``trainer.n_gpus_per_node`` counts those workers.

The FSDP training engine registers for devices ``cuda`` and ``npu`` only (``EngineRegistry`` in
``verl/workers/engine/fsdp/transformer_impl.py``); `register_cpu_engines` registers the same classes for ``cpu``
through the registry's public decorator. Nothing in verl's files is changed. Loaded in every verl process by
``VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.cpu`` with ``VERL_PLATFORM=cpu`` (docs/integrations.md,
"Running verl on CPU").
"""

from __future__ import annotations

import os
import resource
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

# Not through `compat`: compat imports verl's trainer, whose FSDP engine module asks for the platform at import
# time, so the platform must be registered before compat is imported. The version check is compat's own.
import verl
from trace_rl.integrations.verl import VERL_RANGE

VERL_RANGE.check(str(getattr(verl, "__version__", "unknown")))
try:
    from verl.plugin.platform import PlatformBase, PlatformRegistry
except ImportError as exc:  # a release that moved the platform registry
    raise VERL_RANGE.moved(str(verl.__version__), "verl.plugin.platform", exc) from exc

PLATFORM_NAME = "cpu"
"""The name ``VERL_PLATFORM`` selects."""


def _meminfo_bytes(field: str) -> int:
    """A /proc/meminfo field in bytes (0 where the file or field is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss_bytes() -> int:
    """This process's resident set size in bytes (/proc/self/statm), else its peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _peak_rss_bytes() -> int:
    """The process's peak RSS (getrusage, KiB on Linux), never below the current RSS (the kernel updates its
    high-water mark lazily, so it can trail /proc's current figure)."""
    return max(int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, _rss_bytes())


def _make_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes that ``torch.cpu`` lacks (module doc)."""
    mod = types.ModuleType("trace_rl_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(mod, name, getattr(torch.cpu, name))
    mod.empty_cache = lambda: None  # type: ignore[attr-defined]
    mod.ipc_collect = lambda: None  # type: ignore[attr-defined]
    mod.set_per_process_memory_fraction = lambda *a, **k: None  # type: ignore[attr-defined]
    mod.reset_peak_memory_stats = lambda *a, **k: None  # type: ignore[attr-defined]
    mod.mem_get_info = lambda *a: (_meminfo_bytes("MemAvailable"), _meminfo_bytes("MemTotal"))  # type: ignore[attr-defined]
    mod.memory_allocated = lambda *a: _rss_bytes()  # type: ignore[attr-defined]
    mod.memory_reserved = lambda *a: _rss_bytes()  # type: ignore[attr-defined]
    mod.max_memory_allocated = lambda *a: _peak_rss_bytes()  # type: ignore[attr-defined]
    mod.max_memory_reserved = lambda *a: _peak_rss_bytes()  # type: ignore[attr-defined]
    mod.get_rng_state = lambda *a: torch.get_rng_state()  # type: ignore[attr-defined]
    mod.set_rng_state = lambda state, *a: torch.set_rng_state(state)  # type: ignore[attr-defined]
    mod.manual_seed = torch.manual_seed  # type: ignore[attr-defined]
    mod.manual_seed_all = torch.manual_seed  # type: ignore[attr-defined]
    mod.get_device_name = lambda *a: "cpu"  # type: ignore[attr-defined]
    return mod


CPU_DEVICE = _make_device_module()
"""The device module `PlatformCPU.device_module` returns (what verl calls ``get_torch_device()``)."""


class PlatformCPU(PlatformBase):  # type: ignore[misc]
    """verl's ``PlatformBase`` for the host CPU (module doc). Profiling hooks are no-ops; there is no IPC."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        """Never auto-detected: only ``VERL_PLATFORM=cpu`` selects it (a GPU host keeps its accelerator)."""
        return False

    def current_device(self) -> str:  # type: ignore[override]
        """``"cpu"``, not an index: verl passes it as ``device=`` (``model.to(device=get_device_id())``), where
        torch reads an int as an accelerator index ("Cannot access accelerator device")."""
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for a logical GPU; nothing on a CPU reads it

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical: ray.init(num_gpus=...) (module doc)

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_cpu_platform() -> None:
    """Register `PlatformCPU` as ``cpu`` in verl's ``PlatformRegistry``. Call it before anything asks verl for
    its platform (verl caches the first answer): `trace_rl.integrations.verl.cpu` does, first thing."""
    PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)


def register_cpu_engines() -> None:
    """Register verl's FSDP language-model and value-model engines for device ``cpu`` (the same classes verl
    registers for ``cuda``), through ``EngineRegistry.register``, and make ``cpu:gloo`` the workers' process-group
    backend (`compat.set_process_group_backend`). Idempotent.

    Raises:
        UnsupportedVersionError: (from `compat`) a verl outside the supported range, or one that moved a name.
    """
    from trace_rl.integrations.verl.compat import (
        EngineRegistry,
        fsdp_engine_classes,
        set_process_group_backend,
    )

    set_process_group_backend("cpu:gloo")  # verl's default "cpu:gloo,cpu:gloo" is refused by torch

    for model_type, cls in fsdp_engine_classes().items():
        for backend in ("fsdp", "fsdp2"):
            try:
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(cls)
            except AssertionError:  # verl's registry refuses a second registration: already done
                pass

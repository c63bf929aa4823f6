"""Print environment speed numbers: sandbox latency and CPU per call per backend, and env-check wall time per env.

Run: .venv/bin/python benchmarks/envs.py [--calls 20 --gap-ms 20 --rounds 3 --sandbox-only]  (numbers, not a test; the
machine may be shared and noisy). The latency line compares calls that start their own sandbox
(``spares=0``) with calls served by sandboxes started ahead (`run_python`'s default), alternating the two (for the
zygote backend a spare is a call forked ahead). The CPU line (root, with a cgroup-v1 ``cpuacct`` or cgroup-v2
hierarchy) is the CPU time of everything a call runs, launchers, sandbox and interpreter included, which
``getrusage`` misses where a launcher does not wait for its children: this process moves into a cgroup of its own
and reads its usage around ``--calls`` calls of each backend (``spares=0``: the start is counted, not hidden).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import statistics
import time
from collections.abc import Callable

from trace_rl.cli.env_check import check_env
from trace_rl.envs import sandbox, sandbox_zygote
from trace_rl.envs.sandbox import DEFAULT_SPARES, available_backends, run_python


def sandbox_latency(backend: str, spares: int, calls: int, gap_s: float) -> float:
    """Median seconds of ``calls`` calls of ``print(6*7)``, ``gap_s`` apart (the generation between two tool calls
    of a rollout, during which started spares are replaced)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        res = run_python("print(6*7)", backend=backend, spares=spares)  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
        if res.stdout != "42\n":
            raise SystemExit(f"sandbox {backend} spares={spares}: unexpected output {res!r}")
        time.sleep(gap_s)
    return statistics.median(times)


def _cgroup_usage_reader() -> Callable[[], float] | None:
    """Move this process into a cgroup of its own; return a reader of its CPU seconds (None where not possible)."""
    for folder, stat in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"), ("/sys/fs/cgroup/unified", "cpu.stat")):
        if not os.path.isdir(folder) or os.geteuid() != 0:
            continue
        group = os.path.join(folder, f"trace-rl-bench-{os.getpid()}")
        try:
            os.makedirs(group, exist_ok=True)
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            continue
        path = os.path.join(group, stat)
        atexit.register(_leave_cgroup, folder, group)
        if stat == "cpuacct.usage":
            return lambda: int(open(path).read()) / 1e9
        return lambda: next(int(row.split()[1]) for row in open(path) if row.startswith("usage_usec")) / 1e6
    return None


def _leave_cgroup(folder: str, group: str) -> None:
    """Stop what this process started in the group (its zygote, its spares), leave the group and remove it."""
    sandbox_zygote.stop_zygote()
    sandbox._SPARES.close()
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        os.rmdir(group)


def sandbox_cpu(backend: str, calls: int, usage: Callable[[], float]) -> float:
    """CPU seconds per call of ``print(6*7)`` (all processes of the call, caller included)."""
    start = usage()
    for _ in range(calls):
        run_python("print(6*7)", backend=backend, spares=0)  # type: ignore[arg-type]
    return (usage() - start) / calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20, help="calls per backend and setting (default 20)")
    p.add_argument("--gap-ms", type=float, default=20.0, help="pause between calls in ms (default 20)")
    p.add_argument(
        "--rounds", type=int, default=3, help="alternations of spares=0 and the default (default 3)"
    )
    p.add_argument("--sandbox-only", action="store_true", help="skip the env-check timings")
    args = p.parse_args()
    if args.calls < 1 or args.rounds < 1 or args.gap_ms < 0:
        p.error("--calls and --rounds must be >= 1 and --gap-ms >= 0")
    usage = _cgroup_usage_reader()
    for backend in available_backends():
        settings = (0, DEFAULT_SPARES)
        by: dict[int, list[float]] = {n: [] for n in settings}
        for r in range(args.rounds):  # alternate, so both settings meet the same machine load
            for spares in settings if r % 2 == 0 else settings[::-1]:
                by[spares].append(sandbox_latency(backend, spares, args.calls, args.gap_ms / 1000))
        cold = statistics.median(by[0])
        line = f"sandbox {backend}: median {1000 * cold:.1f} ms per call started on demand (spares=0)"
        warm = statistics.median(by[DEFAULT_SPARES])
        line += f", {1000 * warm:.1f} ms with {DEFAULT_SPARES} started ahead (ratio {warm / cold:.2f})"
        line += f"; {args.rounds} rounds x {args.calls} calls, {args.gap_ms:g} ms apart"
        if usage is not None:
            line += f"; CPU {1000 * sandbox_cpu(backend, args.calls, usage):.1f} ms per call"
        print(line, flush=True)
    if args.sandbox_only:
        return
    for name in ("math_python", "bfcl", "multihop_qa"):
        t0 = time.perf_counter()
        report = check_env(name, 40)
        print(
            f"env-check {name} --limit 40: {time.perf_counter() - t0:.2f} s, gold {report['gold_success']}/40, empty {report['empty_success']}"
        )


if __name__ == "__main__":
    main()

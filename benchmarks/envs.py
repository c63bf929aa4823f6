"""Print environment speed numbers: sandbox latency per backend and env-check wall time per env.

Run: .venv/bin/python benchmarks/envs.py [--calls 20 --gap-ms 20 --rounds 3 --sandbox-only]  (numbers, not a test; the
machine may be shared and noisy). The sandbox line compares calls that start their own sandbox (``spares=0``) with
calls served by sandboxes started ahead (`run_python`'s default), alternating the two.
"""

from __future__ import annotations

import argparse
import statistics
import time

from trace_rl.cli.env_check import check_env
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
    for backend in available_backends():
        by: dict[int, list[float]] = {0: [], DEFAULT_SPARES: []}
        for r in range(args.rounds):  # alternate, so both settings meet the same machine load
            for spares in (0, DEFAULT_SPARES) if r % 2 == 0 else (DEFAULT_SPARES, 0):
                by[spares].append(sandbox_latency(backend, spares, args.calls, args.gap_ms / 1000))
        cold, warm = statistics.median(by[0]), statistics.median(by[DEFAULT_SPARES])
        print(
            f"sandbox {backend}: median {1000 * cold:.1f} ms per call started on demand (spares=0), "
            f"{1000 * warm:.1f} ms with {DEFAULT_SPARES} started ahead (ratio {warm / cold:.2f}; "
            f"{args.rounds} rounds x {args.calls} calls, {args.gap_ms:g} ms apart)"
        )
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

"""Print environment speed numbers: sandbox latency per backend and env-check wall time per env.

Run: .venv/bin/python benchmarks/envs.py  (numbers, not a test; the machine may be shared and noisy).
"""

from __future__ import annotations

import statistics
import time

from trace_rl.cli.env_check import check_env
from trace_rl.envs.sandbox import available_backends, run_python


def main() -> None:
    for backend in available_backends():
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            run_python("print(6*7)", backend=backend)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        print(f"sandbox {backend}: median {1000 * statistics.median(times):.1f} ms per call (20 calls)")
    for name in ("math_python", "bfcl", "multihop_qa"):
        t0 = time.perf_counter()
        report = check_env(name, 40)
        print(
            f"env-check {name} --limit 40: {time.perf_counter() - t0:.2f} s, gold {report['gold_success']}/40, empty {report['empty_success']}"
        )


if __name__ == "__main__":
    main()

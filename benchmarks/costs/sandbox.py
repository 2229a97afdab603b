"""Per-call overhead of the LM-code sandbox: the bubblewrap jail vs the Python-level isolation.

Times ``Sandbox.evaluate`` on a trivial program (``potential`` returning a constant, numpy
imported as in every call) over ``--repeats`` calls per isolation, after one warm-up call, and
reports the median (and p10/p90) wall time; the difference is what the OS jail costs per call
(namespaces, mounts, seccomp, bwrap's PID 1).  A batch of ``--items`` items costs one call.

    python benchmarks/costs/sandbox.py --repeats 30 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

from llmguide.sandbox import Sandbox, SandboxLimits

PROGRAM = "import numpy as np\n\ndef potential(obs, caption):\n    return 1.0\n"
TARGET_S = 0.5


def measure(isolation: str, repeats: int, items: int) -> dict:
    sandbox = Sandbox(SandboxLimits(timeout=30, isolation=isolation))
    batch = [({"image": np.zeros((7, 7, 3))}, "you see a red ball") for _ in range(items)]
    res = sandbox.evaluate(PROGRAM, "potential", batch)                 # warm-up (page cache, checks)
    assert res.ok, res.error
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = sandbox.evaluate(PROGRAM, "potential", batch)
        times.append(time.perf_counter() - t0)
        assert res.ok, res.error
    t = np.array(times)
    return {"isolation": isolation, "calls": repeats, "items": items, "median_s": float(np.median(t)),
            "p10_s": float(np.percentile(t, 10)), "p90_s": float(np.percentile(t, 90)), "min_s": float(t.min())}


def bwrap_version() -> str:
    try:
        return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not installed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per isolation")
    parser.add_argument("--items", type=int, default=1, help="batch items per call")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    logging.getLogger("llmguide.sandbox").setLevel(logging.ERROR)     # the python-isolation warning, once per call

    rows = [measure(iso, args.repeats, args.items) for iso in ("os", "python")]
    overhead = rows[0]["median_s"] - rows[1]["median_s"]
    summary = {"rows": rows, "os_jail_overhead_s": overhead, "target_s": TARGET_S,
               "meets_target": rows[0]["median_s"] < TARGET_S, "bwrap": bwrap_version(),
               "cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release(),
               "load_avg": os.getloadavg()[0]}
    lines = [f"# Sandbox per-call overhead ({args.repeats} calls, {args.items} item(s) per call)", "",
             "| isolation | median s | p10 s | p90 s | min s |", "|---|---|---|---|---|"]
    lines += [f"| {r['isolation']} | {r['median_s']:.3f} | {r['p10_s']:.3f} | {r['p90_s']:.3f} | {r['min_s']:.3f} |"
              for r in rows]
    lines += ["", f"OS jail ({summary['bwrap']}) costs {overhead * 1000:.0f} ms more per call than the Python-level "
              f"isolation; a whole jailed call takes {rows[0]['median_s']:.3f} s (target < {TARGET_S} s: "
              f"{'met' if summary['meets_target'] else 'NOT met'}).  {summary['cpus']} CPUs, load average "
              f"{summary['load_avg']:.1f}, kernel {summary['kernel']}."]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sandbox.md").write_text(table + "\n")
    (out / "sandbox.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

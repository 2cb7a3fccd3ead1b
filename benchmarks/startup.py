"""Start-up wall time of the `ledger` command against `python -c pass`, in the same run.

Targets (issue 15): `ledger --help` and `ledger --version` under 0.3 s, a one-atom
`ledger atom add` under 0.8 s. Each command runs ``--runs`` times, interleaved with the
others so that a busy moment of a shared machine hits all of them alike; the table gives the
median and the fastest run, and the median less the interpreter's own start.

Run: python benchmarks/startup.py [--runs 9]   (exit 1 when a median misses its target)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
LEDGER = str(BIN / "ledger") if (BIN / "ledger").exists() else None


CPU: dict[str, list[float]] = {}


def wall(cmd: list[str], env: dict[str, str], name: str | None = None) -> float:
    """Wall seconds of one run; its CPU seconds (user + system) go to CPU[name]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                       check=False)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.decode()[-500:]}")
    if name is not None:
        CPU.setdefault(name, []).append(after.ru_utime - before.ru_utime
                                        + after.ru_stime - before.ru_stime)
    return elapsed


LOAD_AT_START = os.getloadavg()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    ledger = [LEDGER] if LEDGER else [sys.executable, "-m", "ledger"]
    # A user's Python caches compiled modules (__pycache__); PYTHONDONTWRITEBYTECODE (set in
    # some sandboxes) would make every run compile the project's modules again (~0.25 s).
    env = {k: v for k, v in os.environ.items()
           if k not in ("LEDGER_NOW", "LEDGER_HOME", "PYTHONDONTWRITEBYTECODE")}
    with tempfile.TemporaryDirectory(prefix="ledger-startup-") as tmp:
        home = str(Path(tmp) / "home")
        subprocess.run([*ledger, "--home", home, "init"], check=True, capture_output=True,
                       env=env)
        subprocess.run([*ledger, "--home", home, "subject", "add", "user_1"], check=True,
                       capture_output=True, env=env)
        cases: dict[str, tuple[list[str], float | None]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], None),
            "ledger --help": ([*ledger, "--help"], 0.3),
            "ledger --version": ([*ledger, "--version"], 0.3),
            "ledger atom add (one atom)": (
                [*ledger, "--home", home, "atom", "add", "--subject", "user_1",
                 "--text", "Prefers tea."], 0.8),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for cmd, _ in cases.values():  # warm the file cache once
            wall(cmd, env)
        for _ in range(args.runs):
            for name, (cmd, _) in cases.items():
                times[name].append(wall(cmd, env, name))
    base = statistics.median(times["python -c pass"])
    print(f"start-up wall time, {args.runs} runs each, interleaved; {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}")
    load = os.getloadavg()
    print(f"load average {' '.join(f'{x:.1f}' for x in load)} at the end, "
          f"{' '.join(f'{x:.1f}' for x in LOAD_AT_START)} at the start (a shared machine "
          "stretches wall times; CPU time is less affected)")
    print(f"{'command':<30} {'median':>8} {'fastest':>8} {'- python':>9} {'x python':>8} "
          f"{'cpu':>7} {'target':>7}  ok")
    failed = False
    for name, (_, target) in cases.items():
        med, fast = statistics.median(times[name]), min(times[name])
        cpu = statistics.median(CPU[name])
        ok = "" if target is None else ("yes" if med < target else "NO")
        failed |= ok == "NO"
        print(f"{name:<30} {med:>7.3f}s {fast:>7.3f}s {med - base:>8.3f}s {med / base:>7.1f}x "
              f"{cpu:>6.3f}s {'' if target is None else f'{target:.1f}s':>7}  {ok}")
    print(f"cpu: user + system seconds of one run (median); python -c pass: "
          f"{statistics.median(CPU['python -c pass']):.3f}s of CPU")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

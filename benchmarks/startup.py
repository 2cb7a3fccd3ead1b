"""CPU time of the `ledger` command against `python -c pass`, in the same run.

Two parts, each run interleaved with `python -c pass` so that a busy moment of a shared
machine hits both alike; the ratio is CPU against CPU (user + system seconds of the child),
which a shared machine stretches less than wall time.

1. `ledger --help`, `ledger --version` and a one-atom `ledger atom add`, ``--runs`` times
   each (goal, issue 30: `ledger --help` within 4x of `python -c pass`).
2. Every `ledger` command of the README's "Use" block, parsed from README.md and run as the
   block runs (tests/test_readme.py): the block is pasted into bash ``--block-runs`` times,
   each time in a fresh folder, with `ledger` a shell function that runs the real command
   once, preceded by one `python -c pass`, and records both CPU times. Goal: every command
   within 10x, except those whose work itself takes longer: those that load the embedder
   model (seen in a first, untimed paste under -X importtime), whose work is measured alone
   in the same run (WORK), like opening a ledger, the floor of every command.

Run: python benchmarks/startup.py [--runs 9] [--block-runs 3]
     (exit 1 when a median misses its goal)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LEDGER = str(BIN / "ledger") if (BIN / "ledger").exists() else None

HELP_GOAL = 4.0   # `ledger --help` within 4x python -c pass's CPU
BLOCK_GOAL = 10.0  # every command of the README's "Use" block within 10x

# Why a command of the README block may take longer than 10 `python -c pass`: its work
# loads the embedder model (seen in an untimed paste under -X importtime; WORK measures
# embedding one text alone).
EMBEDS = ("loaded the embedder model to embed text (its query, the new atom looked up "
          "among similar memories, or atoms the read models catch up on after writes): see "
          "'work: embed one text'")


# Work measured alone in the same run (python -c CODE HOME), to show what a command cannot
# avoid: opening a ledger (the imports of its stores: SQLAlchemy for the keystore and the
# transparency log, eventsourcing, pydantic, cryptography) and embedding one text.
FLOOR = "open a ledger, read its head"
WORK: dict[str, str] = {
    "import sqlalchemy": "import sqlalchemy",
    FLOOR: (
        "import sys; from pathlib import Path; from ledger import logs; logs.configure()\n"
        "from service.root import opened_service\n"
        "with opened_service(Path(sys.argv[1]), lazy=True) as svc: svc.app.reader.head()"),
    "open it with its read models": (
        "import sys; from pathlib import Path; from ledger import logs; logs.configure()\n"
        "from service.root import opened_service\n"
        "with opened_service(Path(sys.argv[1])) as svc: svc.app.reader.head()"),
    "embed one text": (
        "import sys; from pathlib import Path; from projections.embedder import configured\n"
        "configured(Path(sys.argv[1])).embed(['Prefers tea.'])"),
}


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


def use_block(readme: str | None = None) -> str:
    """The README's "Use" block, as tests/test_readme.py runs it."""
    text = readme if readme is not None else (REPO / "README.md").read_text("utf-8")
    section = text[text.index("## Use"):]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    if m is None:
        raise SystemExit("README.md: no sh block after '## Use'")
    return m.group(1)


def ledger_commands(script: str) -> list[str]:
    """The `ledger` commands of a shell block, in order, one per call (those inside
    ``$( ... )`` included), each as its words up to the end of the command."""
    import shlex

    calls = []
    for line in script.replace("\\\n", " ").splitlines():
        for m in re.finditer(r"(?:^|\$\()\s*ledger\s", line):
            lexer = shlex.shlex(line[m.end() - len("ledger "):], posix=True,
                                punctuation_chars=True)
            words = []
            for word in lexer:
                if word in ("|", ")", ";", "&&", "||", "&", ">"):
                    break
                words.append(word)
            calls.append(" ".join(words))
    return calls


# The shell function the block's `ledger` becomes: one `python -c pass`, then the command;
# the child CPU of each is appended to $LEDGER_STARTUP_LOG by a small Python runner. With
# LEDGER_STARTUP_WHY set (a first, untimed paste), the command runs under -X importtime
# instead, and the runner records which of the heavy parts it loaded (its other stderr
# lines are passed on).
RUNNER = r'''
import json, os, resource, subprocess, sys
def cpu(cmd, **kw):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
row = {"argv": sys.argv[2:]}
if os.environ.get("LEDGER_STARTUP_WHY"):
    r, _ = cpu(sys.argv[1:], stderr=subprocess.PIPE, text=True,
               env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    names = set()
    for line in r.stderr.splitlines(keepends=True):
        if line.startswith("import time:"):
            names.add(line.rsplit("|", 1)[-1].strip().split(".")[0])
        else:
            sys.stderr.write(line)
    row["embedder"] = bool(names & {"wordllama", "sentence_transformers", "torch"})
    row["read_models"] = "projections" in names
else:
    _, row["python"] = cpu([sys.executable, "-c", "pass"])
    r, row["cpu"] = cpu(sys.argv[1:])
with open(os.environ["LEDGER_STARTUP_LOG"], "a") as f:
    f.write(json.dumps(row) + "\n")
sys.exit(r.returncode)
'''


def paste(shim: str, script: str, env: dict[str, str], folder: Path, log: Path,
          names: list[str], **extra: str) -> list[dict[str, Any]]:
    """Paste the block once in a fresh ``folder``; the runner's rows, one per command."""
    folder.mkdir()
    block_env = {**env, "TMPDIR": str(folder), "HOME": str(folder),
                 "LEDGER_STARTUP_LOG": str(log), **extra}
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shim + script], cwd=REPO,
                       env=block_env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"the README block failed: {r.stderr[-1500:]}")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    if len(rows) != len(names):
        raise SystemExit(f"the block ran {len(rows)} ledger commands, parsed {len(names)}")
    return rows


def run_block(ledger: list[str], env: dict[str, str], tmp: Path, runs: int,
              progress: bool) -> tuple[list[str], list[list[float]], list[float],
                                       list[dict[str, Any]]]:
    """The block pasted once to see what each command loads, then ``runs`` times timed;
    the command names, the CPU of the i-th command in each run, every interleaved
    `python -c pass`, and what each command loaded."""
    runner = tmp / "runner.py"
    runner.write_text(RUNNER)
    script = use_block()
    names = ledger_commands(script)
    shim = (f"ledger() {{ {sys.executable} -I {runner} {' '.join(ledger)} \"$@\"; }}\n"
            "export -f ledger\n")
    loads = paste(shim, script, env, tmp / "why", tmp / "why.jsonl", names,
                  LEDGER_STARTUP_WHY="1")
    per: list[list[float]] = [[] for _ in names]
    base: list[float] = []
    for i in range(runs):
        rows = paste(shim, script, env, tmp / f"block-{i}", tmp / f"block-{i}.jsonl", names)
        for j, row in enumerate(rows):
            per[j].append(row["cpu"])
            base.append(row["python"])
        if progress:
            print(f"  block run {i + 1}/{runs} done", file=sys.stderr, flush=True)
    return names, per, base, loads


LOAD_AT_START = os.getloadavg()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--block-runs", type=int, default=3)
    args = parser.parse_args()
    tty = sys.stderr.isatty()
    ledger = [LEDGER] if LEDGER else [sys.executable, "-m", "ledger"]
    # A user's Python caches compiled modules (__pycache__); PYTHONDONTWRITEBYTECODE (set in
    # some sandboxes) would make every run compile the project's modules again (~0.25 s).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LEDGER_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="ledger-startup-") as tmpdir:
        tmp = Path(tmpdir)
        home = str(tmp / "home")
        subprocess.run([*ledger, "--home", home, "init"], check=True, capture_output=True,
                       env=env)
        subprocess.run([*ledger, "--home", home, "subject", "add", "user_1"], check=True,
                       capture_output=True, env=env)
        cases: dict[str, tuple[list[str], float | None]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], None),
            "ledger --help": ([*ledger, "--help"], HELP_GOAL),
            "ledger --version": ([*ledger, "--version"], None),
            "ledger atom add (one atom)": (
                [*ledger, "--home", home, "atom", "add", "--subject", "user_1",
                 "--text", "Prefers tea.", "--on-similar", "none"], BLOCK_GOAL),
        }
        for work, code in WORK.items():
            cases[f"work: {work}"] = ([sys.executable, "-c", code, home], None)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for cmd, _ in cases.values():  # warm the file cache once
            wall(cmd, env)
        for i in range(args.runs):
            for name, (cmd, _) in cases.items():
                times[name].append(wall(cmd, env, name))
            if tty:
                print(f"  run {i + 1}/{args.runs} done", file=sys.stderr, flush=True)
        names, per, block_base, loads = run_block(ledger, env, tmp, args.block_runs, tty)
    base_cpu = statistics.median(CPU["python -c pass"])
    print(f"start-up CPU (user + system of the child), {args.runs} runs each, interleaved "
          f"with python -c pass; {os.cpu_count()} cores; python {sys.version.split()[0]}")
    load = os.getloadavg()
    print(f"load average {' '.join(f'{x:.1f}' for x in load)} at the end, "
          f"{' '.join(f'{x:.1f}' for x in LOAD_AT_START)} at the start")
    print(f"{'command':<44} {'cpu':>7} {'x python':>8} {'wall':>7} {'goal':>6}  ok")
    failed = False
    for name, (_, goal) in cases.items():
        cpu = statistics.median(CPU[name])
        ratio = cpu / base_cpu
        ok = "" if goal is None else ("yes" if ratio <= goal else "NO")
        failed |= ok == "NO"
        print(f"{name:<44} {cpu:>6.3f}s {ratio:>7.1f}x {statistics.median(times[name]):>6.3f}s "
              f"{'' if goal is None else f'{goal:.0f}x':>6}  {ok}")
    block_cpu = statistics.median(block_base)
    print(f"\nthe README's \"Use\" block, {len(names)} ledger commands, pasted "
          f"{args.block_runs} times; python -c pass before each: {block_cpu:.3f}s of CPU "
          "(median)")
    floor = statistics.median(CPU[f"work: {FLOOR}"])
    print(f"{'#':>2} {'command':<44} {'cpu':>7} {'x python':>8} {'- open':>7} {'loads':>6} "
          f"{'goal':>6}  ok")
    slow: list[int] = []
    for i, (name, cpus, seen) in enumerate(zip(names, per, loads, strict=True), 1):
        cpu = statistics.median(cpus)
        ratio = cpu / block_cpu
        ok = "yes" if ratio <= BLOCK_GOAL else ("embeds" if seen["embedder"] else "NO")
        failed |= ok == "NO"
        if ok == "embeds":
            slow.append(i)
        what = "E" if seen["embedder"] else "R" if seen["read_models"] else ""
        print(f"{i:>2} {name[:44]:<44} {cpu:>6.3f}s {ratio:>7.1f}x "
              f"{(cpu - floor) / block_cpu:>6.1f}x {what:>6} {BLOCK_GOAL:>5.0f}x  {ok}")
    print(f"- open: CPU beyond 'work: {FLOOR}' (opening a ledger without a command), "
          "in python -c pass units; loads: R the read models, E the embedder model too")
    if slow:
        print(f"embeds: {', '.join(map(str, slow))} {EMBEDS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

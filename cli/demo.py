"""`make demo`: the main job on an embedded SQLite ledger in a folder that stays.

Each step runs the real `ledger` command and shows what it printed. The ledger is kept in
the folder given (default ``demo-ledger``; it is replaced if it holds an earlier demo), and
the demo ends with commands to try on it.
"""

from __future__ import annotations

import io
import shlex
import shutil
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from cli.main import main


def step(home: Path, *args: str, note: str = "") -> str:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["--home", str(home), *args])
    if note:
        print(f"\n# {note}")
    print("$ ledger " + " ".join(shlex.quote(a) for a in args))
    for line in (out.getvalue() + err.getvalue()).rstrip().splitlines():
        print(f"  {line}")
    if code != 0:
        print(f"  (exit {code})")
        raise SystemExit(code)
    return out.getvalue().strip()


MARK = ".memory-ledger-demo"  # only a folder holding this file is replaced


def prepare(folder: Path) -> None:
    if folder.exists():
        if not (folder / MARK).exists() or not folder.is_dir():
            print(f"demo: {folder} exists and is not an earlier demo; give another folder "
                  "(make demo DEMO_HOME=...)", file=sys.stderr)
            raise SystemExit(2)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / MARK).write_text("made by `make demo`; `make demo` replaces this folder\n")


def next_steps(tmp: Path, home: Path) -> list[str]:
    """Commands to try on the demo's ledger (tests/test_demo.py runs each of them)."""
    ledger = shlex.quote(str(Path(sys.executable).parent / "ledger"))
    try:
        ledger = shlex.quote(str((Path(sys.executable).parent / "ledger")
                                 .relative_to(Path.cwd())))
    except ValueError:
        pass
    h, t = shlex.quote(str(home)), tmp
    return [
        f"{ledger} --home {h} keys list",
        f"{ledger} --home {h} verify --checkpoint {shlex.quote(str(t / 'kept.checkpoint'))}",
        f"{ledger} --home {h} recall 'aisle seat' --subject user_7a1c --no-rehearse",
        f"{ledger} --home {h} atom history atom_002",
        f"{ledger} --home {h} audit --format html --out {shlex.quote(str(t / 'audit.html'))}",
        f"{ledger} verify-pack {shlex.quote(str(t / 'evidence.zip'))} --root-key "
        f"{shlex.quote(str(home / 'keys' / 'root.pub'))}",
    ]


def run(folder: str = "demo-ledger") -> None:
    tmp = Path(folder)
    prepare(tmp)
    home = tmp / ".ledger"
    print(f"memory-ledger demo: an embedded SQLite ledger in {home}")
    step(home, "init", note="Create the ledger: keys, config, event store, keystore, roster")
    step(home, "keys", "list", note="The signed key roster")
    step(home, "subject", "add", "user_9f4e", "--name", "J. Miller", "--locale", "en-US",
         note="Register a subject by their opaque id (the name is encrypted)")
    step(home, "artifact", "add", "--subject", "user_9f4e", "--kind", "chat",
         "--ref", "art_101", "--title", "Q4 board prep", "--source", "chatgpt-export",
         "--body", "...the whole conversation transcript...",
         note="Capture the chat the memories come from")
    step(home, "atom", "add", "--subject", "user_9f4e", "--ref", "atom_001",
              "--kind", "preference", "--sensitivity", "public", "--confidence", "0.87",
              "--text", "Prefers direct, unhedged feedback in writing.",
              "--derivation", "inferred", "--artifact", "art_101",
              "--extractor", "claude-opus-4", "--session", "sess:1",
              note="Record an inferred atom; it must cite its artifact")
    step(home, "atom", "add", "--subject", "user_9f4e", "--ref", "atom_002",
         "--kind", "relationship", "--text", "Works at Acme as head of product.",
         "--valid-from", "2025-09-01")
    print("\n# An unsourced inference is refused (Konshus provenance rule):")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["--home", str(home), "atom", "add", "--subject", "user_9f4e",
                     "--text", "Is probably unhappy at work.", "--derivation", "inferred"])
    print("$ ledger atom add --subject user_9f4e --text '...' --derivation inferred")
    print("  " + err.getvalue().strip().replace("\n", "\n  ") + f"\n  (exit {code})")
    a2b = step(home, "atom", "correct", "atom_002", "--text",
               "Works at Beta as head of product.", "--reason", "changed jobs",
               note="Correct a fact: the old atom gets valid_to, a new one supersedes it")
    step(home, "atom", "rehearse", a2b, "--session", "sess:2",
         note="Recall it once (a signed rehearsal event)")
    step(home, "atom", "history", "atom_002", note="The signed history of that fact")
    step(home, "verify", note="Verify every signature against the roster as it stood")
    step(home, "checkpoint", "--out", str(Path(tmp) / "kept.checkpoint"),
         note="Sign a checkpoint of the Merkle tree and keep it outside the ledger")
    step(home, "artifact", "add", "--subject", "user_9f4e", "--kind", "email",
         "--ref", "art_102", "--body", "...an email thread about the offsite...",
         note="More memories of the same person, from a second artifact")
    step(home, "atom", "add", "--subject", "user_9f4e", "--kind", "episodic",
         "--text", "Organised the Lisbon offsite and loved the seafood.",
         "--derivation", "observed", "--artifact", "art_102", "--session", "sess:1",
         "--detail", "rainy evening=0.2", "--detail", "grilled sardines=0.85")
    step(home, "subject", "add", "user_7a1c")
    step(home, "atom", "add", "--subject", "user_7a1c",
         "--text", "Prefers aisle seats on long flights.")
    step(home, "recall", "offsite seafood", "--subject", "user_9f4e", "-k", "3",
         note="Recall for a prompt (each recalled atom gets a signed rehearsal event)")
    erased = step(home, "redact-user", "user_9f4e", "--reason", "GDPR Art. 17 request",
               "--operator", "operator", "--legal-basis", "GDPR Art. 17(1)(a)",
               "--session", "sess:1", "--yes",
               note="Right to be forgotten: receipt, operator-signed batch, hard erasure "
                    "of every copy, probes and a raw scan of every file")
    batch = next(line.split()[1] for line in erased.splitlines()
                 if line.startswith("batch "))
    pack = Path(tmp) / "evidence"
    step(home, "evidence-pack", batch, "--out", str(pack), "--zip",
         note="The Evidence Pack: DSSE-signed in-toto statement, proofs, HTML report")
    step(home, "verify-pack", str(pack.with_suffix(".zip")), "--root-key",
         str(home / "keys" / "root.pub"),
         note="An auditor verifies it offline with the root public key only")
    step(home, "recall", "offsite seafood", "--subject", "user_9f4e", "--no-rehearse",
         note="Recall again: nothing of the subject remains")
    step(home, "recall", "aisle seat flights", "--subject", "user_7a1c", "--no-rehearse",
         note="Other people's memories are untouched")
    step(home, "verify", "--checkpoint", str(Path(tmp) / "kept.checkpoint"),
         note="The log still verifies, and extends the checkpoint kept before the erasure")
    print(f"\nDemo finished. Its ledger stays in {tmp}/ (`make demo` starts it over). "
          "Try:")
    for command in next_steps(tmp, home):
        print(f"  {command}")


if __name__ == "__main__":
    run(*sys.argv[1:2])
    sys.exit(0)

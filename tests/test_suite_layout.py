"""The suite's own bookkeeping: every test named slow and every file named heavy in
conftest.py still exists, and no test reads outside the repository (the seeds live in a
folder beside the clone, there only for the sessions, never in a fresh clone)."""

from __future__ import annotations

from pathlib import Path

from .conftest import HEAVY_FILES, SLOW

TESTS = Path(__file__).resolve().parent
BESIDE = "/".join(("..", "shared"))  # spelled so that this guard does not match itself


def test_every_slow_name_is_a_test() -> None:
    for key in sorted(SLOW):
        file, name = key.split("::")
        assert f"def {name}(" in (TESTS / file).read_text("utf-8"), key


def test_every_heavy_file_is_a_test_file_named_once() -> None:
    assert len(set(HEAVY_FILES)) == len(HEAVY_FILES)
    for name in HEAVY_FILES:
        assert name.startswith("test_") and (TESTS / name).is_file(), name


def test_no_test_reads_the_shared_folder_beside_the_clone() -> None:
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text("utf-8")
        if path.name == "test_suite_layout.py":
            continue
        assert '"shared"' not in text and BESIDE not in text, path

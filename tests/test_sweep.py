"""`ledger sweep`: retention per privacy class, decay, tombstone records (governance/sweep.py,
ADR 0014). Time moves forward with LEDGER_NOW; every storage test runs on both backends.
The acts go through the facade as the local operator (the ``ledger`` command's caller) or
through the command; the lock is tested as the unit it is."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from governance.sweep import sweep_lock
from ledger import clock
from ledger.errors import ConflictError
from service.caller import local_operator
from service.facade import MemoryService
from service.models import AtomIn, RecallIn, SubjectIn

from .conftest import RawStore, files_under, run_cli

T0 = clock.parse_instant("2031-01-01T00:00:00Z")
RETENTION = {"non-pii": 7, "aggregate": 3, "guest-pii": 90, "staff-pii": 365,
             "sensitive-pii": 30, "commercial-confidential": 1095}
DEFAULT_DAYS = 10
BASIS = {"sensitive-pii": "explicit-consent", "guest-pii": "service-delivery",
         "staff-pii": "legal-obligation"}
POLICY = {"memoryPolicy": {
    "enabled": True,
    "retentionPolicy": {"defaultRetentionDays": DEFAULT_DAYS, "perPrivacyClass": RETENTION},
    "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 720,
                              "tombstoneRetentionDays": 5}}}
OP = local_operator()


@pytest.fixture
def clock_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    def move(t: Any) -> None:
        monkeypatch.setenv("LEDGER_NOW", clock.format_instant(t))
    move(T0)
    return move


def _marker() -> str:
    return f"zq{uuid.uuid4().hex[:12]}"


def _atom(cls: str | None, text: str, **kw: Any) -> AtomIn:
    # valence 0.6: a salience floor of 0.18, so decay never archives these atoms
    data: dict[str, Any] = {"subject": "u1", "text": text, "emotional_valence": 0.6,
                            "on_similar": None, **kw}
    if cls is not None:
        data["privacy_class"] = cls
    if cls in BASIS:
        data["consent_basis"] = BASIS[cls]
    return AtomIn(**data)


def _setup(svc: MemoryService, doc: dict[str, Any] = POLICY) -> None:
    svc.set_policy(OP, doc)
    svc.register_subject(OP, SubjectIn(ref="u1"))


def _add(svc: MemoryService, *atoms: AtomIn) -> list[str]:
    """The atoms added in one signed command (all or none); their ids, in order."""
    return svc.add_atoms(OP, atoms).atom_ids


def _recalled(svc: MemoryService, query: str) -> list[str]:
    """`ledger recall QUERY --subject u1 --no-rehearse`: the recalled atoms' ids."""
    got = svc.recall(OP, RecallIn(query=query, subject="u1", k=5, rehearse=False))
    return [item.atom_id for item in got.items]


def _listed(svc: MemoryService) -> set[str]:
    """`ledger memory list --subject u1`: the listed atoms' ids."""
    return {r.atom_id for r in svc.list_memories(OP, "u1")}


@pytest.mark.parametrize("cls", [*RETENTION, None])
def test_each_class_expires_exactly_on_its_day_and_not_before(
        svc: MemoryService, home: Path, clock_at: Any, cls: str | None) -> None:
    _setup(svc)
    marker = _marker()
    atom = svc.add_atom(OP, _atom(cls, f"memory of class {cls} {marker}")).atom_id
    days = RETENTION.get(cls or "", DEFAULT_DAYS)
    archive = cls in ("non-pii", "aggregate")
    clock_at(T0 + timedelta(days=days) - timedelta(seconds=1))  # day N-1, 23:59:59
    rows = RawStore(home).rows()
    early = svc.sweep(OP)
    assert early.status == "nothing-due" and early.due == []
    assert svc.get_atom(OP, atom).status == "active" and RawStore(home).rows() == rows
    clock_at(T0 + timedelta(days=days))  # day N, 00:00:00
    done = svc.sweep(OP)
    assert done.status == "swept"
    (due,) = done.due
    assert due["atom_id"] == atom and due["rule"] == "retention"
    assert due["due_at"] == clock.format_instant(T0 + timedelta(days=days))
    got = svc.get_atom(OP, atom)
    if archive:
        assert done.archived["atom_ids"] == [atom] and done.erased["count"] == 0
        assert got.status == "archived" and not got.content_erased
    else:
        assert done.erased["atom_ids"] == [atom] and done.erased["batch_id"]
        assert got.status == "deleted" and got.content_erased
        assert not [p for p in files_under(home) if marker.encode() in p.read_bytes()]


def test_a_sweep_run_twice_does_the_work_once(svc: MemoryService, home: Path,
                                              clock_at: Any) -> None:
    _setup(svc)
    _add(svc, *[_atom(c, f"fact {c}") for c in ("non-pii", "sensitive-pii", "guest-pii")],
         *[_atom("sensitive-pii", f"more {i}") for i in range(3)])
    clock_at(T0 + timedelta(days=40))
    h = ("--home", str(home))
    first = run_cli(*h, "sweep", "--json")
    assert first.code == 0, first.err
    report = json.loads(first.out)
    assert report["archived"]["count"] == 1 and report["erased"]["count"] == 4
    assert f"batch {report['erased']['batch_id']}" in first.err
    rows = RawStore(home).rows()
    second = run_cli(*h, "sweep", "--json")
    assert second.code == 0 and "nothing due" in second.err
    assert json.loads(second.out)["status"] == "nothing-due"
    assert RawStore(home).rows() == rows  # no new events
    assert run_cli(*h, "verify").code == 0


def test_a_hard_swept_atom_is_not_recalled_and_in_no_file(svc: MemoryService, home: Path,
                                                          clock_at: Any) -> None:
    _setup(svc)
    marker = _marker()
    atom = svc.add_atom(OP, _atom("sensitive-pii", f"Takes lithium daily {marker}",
                                  gist=f"medication {marker}")).atom_id
    svc.add_atom(OP, _atom("non-pii", "Likes green tea"))
    assert atom in _recalled(svc, marker)
    clock_at(T0 + timedelta(days=30))
    result = svc.sweep(OP)
    assert result.erased["atom_ids"] == [atom]
    assert atom not in _recalled(svc, marker)
    assert atom not in _recalled(svc, "Takes lithium daily")
    assert [str(p) for p in files_under(home) if marker.encode() in p.read_bytes()] == []
    hist = run_cli("--home", str(home), "atom", "history", atom, "--json")
    assert "memory-ledger:atom.redacted.v1" in hist.out and marker not in hist.out


def test_dry_run_changes_nothing(svc: MemoryService, home: Path, clock_at: Any) -> None:
    _setup(svc)
    atom = svc.add_atom(OP, _atom("sensitive-pii", "dry run target")).atom_id
    clock_at(T0 + timedelta(days=31))
    rows, keys = RawStore(home).rows(), svc.app.datakeys.count()
    r = run_cli("--home", str(home), "sweep", "--dry-run")
    assert r.code == 0 and "dry run: would archive 0, erase 1" in r.err
    assert r.out.startswith(f"erase  {atom}  retention")
    assert RawStore(home).rows() == rows and svc.app.datakeys.count() == keys


def test_decay_below_minimum_salience_is_archived_on_time(svc: MemoryService,
                                                          clock_at: Any) -> None:
    _setup(svc, {"memoryPolicy": {"enabled": True}})  # no retention: decay only
    # ADR 0050: only an atom with a decay profile decays (here the Persona defaults).
    # arrange: an atom's own decay profile is taken by the application and the importers,
    # not by the facade's AtomIn
    atom = str(svc.app.add_atom({"subject": "u1", "text": "fading memory", "salience": 0.5,
                                 "decay_profile": {"halfLifeDays": 14}}))
    still = svc.add_atom(OP, AtomIn(subject="u1", text="lasting fact", salience=0.5,
                                    on_similar=None)).atom_id
    # 0.5 * 2**(-t/14) < 0.05  <=>  t > 14 * log2(10) = 46.507 days
    clock_at(T0 + timedelta(days=46.5))
    assert svc.sweep(OP).status == "nothing-due"
    clock_at(T0 + timedelta(days=46.51))
    done = svc.sweep(OP)
    assert done.archived["atom_ids"] == [atom] and done.due[0]["rule"] == "decay"
    assert done.archived["by_rule"] == {"retention": 0, "decay": 1}
    assert svc.get_atom(OP, atom).status == "archived"
    assert svc.get_atom(OP, still).status == "active"  # no profile: it does not decay


def test_tombstone_records_are_kept_for_their_retention_then_dropped(
        svc: MemoryService, home: Path, clock_at: Any) -> None:
    _setup(svc)
    atom = svc.add_atom(OP, _atom("sensitive-pii", "kept thirty days")).atom_id
    clock_at(T0 + timedelta(days=30))
    svc.sweep(OP)
    tombstoned = T0 + timedelta(days=30)
    assert atom in _listed(svc)
    clock_at(tombstoned + timedelta(days=5) - timedelta(seconds=1))
    assert svc.sweep(OP).status == "nothing-due"
    assert atom in _listed(svc)
    clock_at(tombstoned + timedelta(days=5))
    rows = RawStore(home).rows()
    done = svc.sweep(OP)
    assert done.tombstone_records_dropped == {"count": 1, "atom_ids": [atom]}
    assert atom not in _listed(svc)
    assert RawStore(home).rows() == rows  # the signed tombstone stays in the log
    assert svc.get_atom(OP, atom).status == "deleted"
    assert svc.sweep(OP).status == "nothing-due"
    assert run_cli("--home", str(home), "verify").code == 0


def test_no_policy_sweeps_nothing(home: Path) -> None:
    rows = RawStore(home).rows()
    r = run_cli("--home", str(home), "sweep", "--json")
    assert r.code == 0 and "no memoryPolicy is in force" in r.err
    assert json.loads(r.out)["status"] == "no-policy"
    assert RawStore(home).rows() == rows


def test_a_second_concurrent_sweep_stops_at_once(svc: MemoryService, home: Path,
                                                 clock_at: Any) -> None:
    _setup(svc)
    rows = RawStore(home).rows()
    # arrange: the lock a running `ledger sweep` holds, taken as that sweep takes it
    with sweep_lock(svc.app), pytest.raises(ConflictError, match="another `ledger sweep`"):
        svc.sweep(OP)
    assert RawStore(home).rows() == rows


def test_unauthorized_sweeper_is_refused_before_anything_is_written(
        svc: MemoryService, home: Path, clock_at: Any) -> None:
    _setup(svc)
    svc.add_atom(OP, _atom("sensitive-pii", "due later"))
    clock_at(T0 + timedelta(days=30))
    rows = RawStore(home).rows()
    r = run_cli("--home", str(home), "sweep", "--as", "writer")
    assert r.code == 2 and "not an authorized operator" in r.err
    assert RawStore(home).rows() == rows


def test_due_atoms_are_found_by_index_not_by_scan(svc: MemoryService, backend: str,
                                                  clock_at: Any) -> None:
    _setup(svc)
    _add(svc, *[_atom("non-pii", f"n {i}") for i in range(20)])
    assert svc.sweep(OP, dry_run=True).status == "nothing-due"
    if backend != "sqlite":
        return  # the SQLite plan is checked; PostgreSQL picks plans by table statistics
    proj = svc.proj  # the atom store's table and index, the unit of this check
    a = proj.atoms.atoms
    q = sa.select(a.c.atom_id).where(a.c.privacy_class == "non-pii",
                                     a.c.status.in_(["active", "soft-redacted"]),
                                     a.c.created_at <= "2031-01-01")
    with proj.store.engine.connect() as conn:
        sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "proj_atoms_retention" in plan, plan


def test_the_write_lock_and_the_sweep_lock_are_one_implementation(
        tmp_path: Path) -> None:
    """ADR 0038: ``ledger.locks.held`` is both locks; the advisory-lock keys are those the
    two copies used (so old and new processes still exclude each other), and a busy lock
    raises the given error at once instead of waiting."""
    import hashlib

    from ledger import locks

    lid = "6c1b6d1e-0000-4000-8000-000000000000"
    assert locks.lock_key(lid, "write") == int.from_bytes(
        hashlib.sha256(lid.encode()).digest()[:8], "big", signed=True)
    assert locks.lock_key(lid, "sweep") == int.from_bytes(
        hashlib.sha256(f"{lid}/sweep".encode()).digest()[:8], "big", signed=True)
    config = SimpleNamespace(home=tmp_path, ledger_id=lid,
                             events=SimpleNamespace(is_postgres=False))
    busy = ConflictError("busy")
    with locks.held(config, "sweep", busy=busy):  # type: ignore[arg-type]
        with pytest.raises(ConflictError, match="busy"):
            with locks.held(config, "sweep", busy=busy):  # type: ignore[arg-type]
                pass
        with locks.held(config, "write", busy=busy):  # type: ignore[arg-type]
            pass  # another name, another lock
    assert (tmp_path / "sweep.lock").exists() and (tmp_path / "write.lock").exists()


def test_a_large_sweep_prints_a_summary_and_v_lists_every_atom(
        svc: MemoryService, home: Path, clock_at: Any) -> None:
    _setup(svc)
    atoms = _add(svc, *[_atom("sensitive-pii", f"sweep target {i}") for i in range(12)])
    clock_at(T0 + timedelta(days=31))
    r = run_cli("--home", str(home), "sweep")
    assert r.code == 0 and "12 erased" in r.err, r.err
    assert r.out.splitlines() == ["erase  12 atoms", "(-v lists them, --json gives them)"]
    assert not any(a in r.out for a in atoms)
    more = _add(svc, *[_atom("sensitive-pii", f"second target {i}") for i in range(11)])
    clock_at(T0 + timedelta(days=62))
    r = run_cli("-v", "--home", str(home), "sweep")
    assert r.code == 0  # -v: a line per atom (the first sweep's tombstone rows go too)
    assert sorted(line.split()[1] for line in r.out.splitlines()
                  if line.startswith("erase ")) == sorted(more)

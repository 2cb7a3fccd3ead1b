"""The ledger-wide use cases of the facade: checkpoints and their witnesses, verification
and proofs, the key roster, the policy, the audit report, and the upkeep of the read
models and the keystore. Joined into :class:`service.facade.MemoryService`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger import clock
from ledger.errors import NotFound
from service.caller import Caller
from service.core import (
    FacadeCore,
    Forbidden,
    _jsonable,
)
from service.models import (
    CheckpointOut,
    CheckpointSigned,
    KekEpoch,
    KekRotated,
    KeyAuthorized,
    KeyRevoked,
    KeyRotated,
    LogVkey,
    PolicyRecorded,
    ReachProbe,
    ReadModelsRebuilt,
    ReadModelStatus,
    RepairReport,
    RosterEntry,
    VerificationOut,
    WitnessForgotten,
    WitnessPolicyOut,
    WitnessUsed,
)

if TYPE_CHECKING:
    from ledger.progress import Steps
    from ledger.verification import LedgerVerdict


class LedgerCases(FacadeCore):
    """The log itself: checkpoints, verification, keys, policy, audit, read models."""

    def checkpoint(self, caller: Caller) -> CheckpointOut:
        """The latest recorded signed checkpoint (C2SP note)."""
        from ledger.transparency import b64

        cp = self.app.latest_checkpoint()
        return CheckpointOut(origin=cp.checkpoint.origin, size=cp.size, root_hash=b64(cp.root),
                             note=cp.note)

    def sign_checkpoint(self, caller: Caller, witness_urls: Sequence[str] = (),
                        witness_keys: Sequence[str] = ()) -> CheckpointSigned:
        """Sign the current tree head with the log key, have the witnesses cosign it
        (``witness_urls``, with a vkey each in ``witness_keys`` unless config.toml has
        it; default: the configured witnesses) and record it (`ledger checkpoint`)."""
        self._require_ledger_operator(caller)
        from ledger.transparency import b64
        from ledger.witness.client import checkpoint_witnesses

        done = self.app.checkpoint_witnessed(checkpoint_witnesses(
            list(witness_urls), list(witness_keys), self.app.config.witnesses))
        cp = done.checkpoint
        return CheckpointSigned(
            origin=cp.checkpoint.origin, size=cp.size, root_hash=b64(cp.root), note=cp.note,
            witnesses=[r.as_json() for r in done.results])

    def log_vkey(self, caller: Caller) -> LogVkey:
        """The C2SP verifier key of this ledger's checkpoints (origin as its name)."""
        self._require(caller, "operator", "auditor")
        return LogVkey(origin=self.app.config.origin, vkey=self.app.log_vkey())

    def use_witness(self, caller: Caller, url: str, vkey: str) -> WitnessUsed:
        """Have this ledger's checkpoints cosigned by the witness at ``url`` (its verifier
        key ``vkey``), written to config.toml; a witness of the same key is replaced."""
        self._require_ledger_operator(caller)
        import dataclasses

        from ledger.home import Config
        from ledger.witness.client import WitnessTarget

        target = WitnessTarget.of(url, vkey)
        config = Config.load(self.app.config.home)
        pairs = [p for p in config.witnesses if p[1] != target.key.vkey]
        dataclasses.replace(config, witnesses=(*pairs, (target.url, target.key.vkey))).write()
        return WitnessUsed(url=target.url, vkey=target.key.vkey)

    def forget_witness(self, caller: Caller, key: str) -> WitnessForgotten:
        """Stop asking the witness named by its vkey or URL (config.toml)."""
        self._require_ledger_operator(caller)
        import dataclasses

        from ledger.home import Config

        config = Config.load(self.app.config.home)
        pairs = [p for p in config.witnesses if key not in (p[0], p[1], p[0].rstrip("/"))]
        if len(pairs) == len(config.witnesses):
            raise NotFound(f"no witness {key!r} in config.toml")
        dataclasses.replace(config, witnesses=tuple(pairs)).write()
        return WitnessForgotten(removed=key)

    def witness_policy(self, caller: Caller, quorum: str = "all") -> WitnessPolicyOut:
        """A c2sp.org/tlog-policy for this ledger's checkpoints: the log's vkey, the
        witnesses of config.toml and a quorum of them (``all``, ``any``, a number, or
        ``none``), for `verify-pack --policy` and `verify-receipt --policy`."""
        self._require(caller, "operator", "auditor")
        from ledger.witness.policy import format_policy, parse_policy

        about = (f"c2sp.org/tlog-policy for the checkpoints of {self.app.config.origin}: "
                 "the witnesses it asks (ledger witness policy)")
        vkey = self.app.log_vkey()
        used = self.app.config.witnesses
        text = format_policy(vkey, used, quorum, about)
        return WitnessPolicyOut(policy=text, log=vkey,
                                witnesses=[WitnessUsed(url=u, vkey=k) for u, k in used],
                                quorum=parse_policy(text.encode()).describe())

    def verification(self, caller: Caller) -> VerificationOut:
        """`ledger verify --since` from the latest recorded checkpoint: the events after it
        are verified (signatures, roles, sequence, tree), at a cost that follows them."""
        self._require(caller, "operator", "auditor")
        from ledger.verification import verify_since

        root = self.app.root_public_key
        if root is None:
            from ledger.errors import EnvironmentProblem

            raise EnvironmentProblem("no trusted root key: keys/root.pub is missing")
        cp = self.app.latest_checkpoint()
        report, extra = verify_since(self.app.reader, cp.note, root)
        data = {**report.as_json(), **extra}
        events = int(data.get("events", 0))
        ok = bool(data.get("ok"))
        if not ok:
            detail = "verification failed: see failure"
        elif events == 0:  # an ok of nothing is not a verdict: say so
            detail = (f"no event was appended after the latest checkpoint (size {cp.size}): "
                      "nothing was checked yet; `ledger verify` checks the whole log")
        else:
            detail = (f"{events} event{'s' if events != 1 else ''} appended after the "
                      f"checkpoint of size {cp.size} verified")
        return VerificationOut(ok=ok, events=events, checked=events > 0, detail=detail,
                               checked_at=clock.format_instant(clock.now()),
                               **{k: v for k, v in data.items()
                                  if k not in ("ok", "events", "checked_at", "checked",
                                               "detail")})

    def verify_log(self, caller: Caller, root_public_key: bytes | None = None, *,
                   since: str | None = None, checkpoints: Sequence[tuple[str, str]] = (),
                   progress: Callable[[str, int, int], None] | None = None
                   ) -> LedgerVerdict:
        """`ledger verify`: every event and the checkpoints the log must extend (the latest
        recorded one and ``checkpoints``, ``(label, note)``), or with ``since`` (a trusted
        checkpoint note) only the events after it (ledger/verification.py). The trusted
        root key defaults to the home's ``keys/root.pub``."""
        self._require(caller, "operator", "auditor")
        from ledger.errors import EnvironmentProblem
        from ledger.verification import verify_ledger

        root = root_public_key or self.app.root_public_key
        if root is None:
            raise EnvironmentProblem("no trusted root key: keys/root.pub is missing",
                                     hint="pass --root-key FILE")
        return verify_ledger(self.app.reader, root, since=since, checkpoints=checkpoints,
                             progress=progress)

    def _require_whole_log(self, caller: Caller) -> None:
        """Proofs name any event of the log: operators and auditors of the whole ledger."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not ask for "
                            "proofs of the whole log",
                            hint="use an unrestricted operator or auditor credential")

    def prove_inclusion(self, caller: Caller, event_id: str) -> dict[str, Any]:
        """`ledger prove EVENT_ID`: the event's leaf and its inclusion proof in the tree of
        the latest checkpoint, checked before it is returned (ledger/proofs.py)."""
        self._require_whole_log(caller)
        from ledger.proofs import prove_inclusion

        return prove_inclusion(self.app, event_id)

    def prove_consistency(self, caller: Caller, old_note: str) -> dict[str, Any]:
        """`ledger prove --consistency OLD`: the latest checkpoint extends a kept one."""
        self._require_whole_log(caller)
        from ledger.proofs import prove_consistency

        return prove_consistency(self.app, old_note)

    def roster(self, caller: Caller) -> list[RosterEntry]:
        """The key roster as `ledger keys list --json` gives it: one row per key and role,
        with its validity (and the C2SP vkey of log keys)."""
        self._require(caller, "operator", "auditor")
        rows = self.app.reader.roster().state.rows()
        vkeys = self.app.reader.log_vkeys()
        for r in rows:
            if r["role"] == "log" and r["kid"] in vkeys:
                r["vkey"] = vkeys[r["kid"]]
        return [RosterEntry(**{k: _jsonable(v) for k, v in r.items()}) for r in rows]

    def held_keys(self, caller: Caller) -> list[str]:
        """Names of the keys whose private key this ledger home holds (which of the
        roster's keys can sign here)."""
        self._require(caller, "operator", "auditor")
        return self.app.reader.key_names()

    def authorize_key(self, caller: Caller, name: str, role: str,
                      public_key: bytes | None = None, valid_from: datetime | None = None
                      ) -> KeyAuthorized:
        """Authorize a key for a role, signed by the root key (`ledger keys authorize`);
        without ``public_key`` a new key is made in the home."""
        self._require_ledger_operator(caller)
        kid = self.app.authorize_key(name, role, public_key, valid_from)
        return KeyAuthorized(kid=kid, name=name, role=role)

    def revoke_key(self, caller: Caller, kid: str, role: str | None = None,
                   revoked_from: datetime | None = None, reason: str | None = None
                   ) -> KeyRevoked:
        """Revoke a key (one role or all) from a time (default now)."""
        self._require_ledger_operator(caller)
        self.app.revoke_key(kid, role, revoked_from, reason)
        return KeyRevoked(kid=kid)

    def rotate_key(self, caller: Caller, name: str, reason: str | None = None) -> KeyRotated:
        """Replace a key of the home with a new one holding its roles; the old is revoked."""
        self._require_ledger_operator(caller)
        old, new = self.app.rotate_key(name, reason)
        return KeyRotated(name=name, old_kid=old, new_kid=new)

    def rotate_kek(self, caller: Caller, to_store: str | None = None,
                   progress: Steps | None = None) -> KekRotated:
        """Start a new KEK epoch, re-wrap every data key under it and destroy the old KEK
        (`ledger keys rotate-kek`; resumes an interrupted one). ``to_store``: move the
        ledger's KEKs to another store (a pkcs11: URI). Signed with the caller's key."""
        self._require_ledger_operator(caller)
        from ledger.epochs import rotate_kek

        done = rotate_kek(self.app, self._signing_key(caller), to_store, progress)
        return KekRotated(**done.as_json())

    def kek_epochs(self, caller: Caller) -> list[KekEpoch]:
        """The keystore's KEK epochs with how many keys each wraps (`ledger keys epochs`)."""
        self._require(caller, "operator", "auditor")
        from dataclasses import asdict

        from ledger.epochs import epoch_states

        return [KekEpoch(**asdict(e)) for e in epoch_states(self.app)]

    def policy(self, caller: Caller) -> dict[str, Any] | None:
        self._require(caller, "operator", "auditor")
        return self.app.reader.policy()

    def set_policy(self, caller: Caller, document: dict[str, Any]) -> PolicyRecorded:
        """Record a memoryPolicy, signed with the caller's operator key."""
        self._require_ledger_operator(caller)
        key = self._signing_key(caller)
        return PolicyRecorded(event_id=self.app.set_policy(document, key))

    def audit_report(self, caller: Caller, from_: str | None = None, to: str | None = None,
                     *, subject: str | None = None, verify: str = "full",
                     now: datetime | None = None,
                     progress: Callable[[str, int, int], None] | None = None
                     ) -> dict[str, Any]:
        """The memory audit report of a period (`ledger audit`; docs/adr/0013). ``subject``
        limits the per-subject sections; ``verify``: full, since or none; ``progress(stage,
        done, total)`` counts the events read and verified (ADR 0036)."""
        self._require(caller, "operator", "auditor")
        from governance.audit import build_report, parse_period

        at = now or clock.now()
        period = parse_period(from_, to, at)
        if subject is not None and not caller.unrestricted:
            subject = self.subject_id(caller, subject)
        report: dict[str, Any] = build_report(self.app, period, subject=subject, verify=verify,
                                              now=now, progress=progress)
        return report

    def read_models_status(self, caller: Caller) -> list[ReadModelStatus]:
        """Position, head and lag of every read model (`ledger projections status`)."""
        self._require(caller, "operator", "auditor")
        return [ReadModelStatus(**s.as_json()) for s in self.proj.status()]

    def probe_reach(self, caller: Caller, item: str, text: str | None = None) -> ReachProbe:
        """Every route's reach of one item id, caught up first: rows keyed by the id and,
        with ``text``, stored values holding it and near-duplicate vectors."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not probe items "
                            "by id", hint="use an unrestricted operator or auditor credential")
        self.proj.catch_up()
        routes = [r.as_json() for r in self.proj.probe(item, text)]
        return ReachProbe(item_id=item, routes=routes,
                          reachable=[r["route"] for r in routes if r["reach"] == "reachable"])

    def rebuild_read_models(self, caller: Caller, name: str | None = None,
                            progress: Callable[[int, int], None] | None = None
                            ) -> ReadModelsRebuilt:
        """Drop read models (``name``, default all) and replay the whole log into them;
        ``progress(done, total)`` hears the events applied."""
        self._require_ledger_operator(caller)
        report = self.proj.rebuild(name, progress)
        return ReadModelsRebuilt(report=report.as_json(), head=report.head,
                                 notifications=report.notifications, seconds=report.seconds)

    def witness_lag(self, caller: Caller) -> tuple[int, float | None] | None:
        """How far the witnesses' cosignatures trail the log: events appended after the
        largest cosigned checkpoint, and seconds since it was cosigned (None: never).
        None when no witness is configured and none ever cosigned (metrics, ADR 0054)."""
        self._require(caller, "operator", "auditor")
        latest = self.app.reader.latest_cosignature()
        if latest is None and not self.app.config.witnesses:
            return None
        head = self.app.reader.head_position()  # the log's, not the read models': none opened
        if latest is None:
            return head, None
        size, at = latest
        return max(head - size, 0), max(time.time() - at, 0.0)

    def read_models_behind(self, caller: Caller) -> int:
        """Events the slowest read model is behind the log (0: all current)."""
        runner = self.proj.runner
        return runner.head() - min(runner.positions().values(), default=0)

    def catch_up_read_models(self, caller: Caller,
                             progress: Callable[[str, int, int], None] | None = None) -> None:
        """Apply the events the read models are behind (a recall does it too; this one
        tells ``progress`` the events applied)."""
        self.proj.catch_up_steps(progress)

    def repair(self, caller: Caller, dry_run: bool = False) -> RepairReport:
        """`ledger repair`: discard (or, ``dry_run``, list) every data key stored for an
        event that was never committed."""
        self._require_ledger_operator(caller)
        return RepairReport(**self.app.repair(dry_run=dry_run))


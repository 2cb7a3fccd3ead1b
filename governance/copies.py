"""The copies statement of an erasure: which copies of its erased data keys can still be
decrypted, and from when none can (issue 27, ADR 0044; docs/spec/evidence-pack.md step 8,
docs/spec/erasure-receipt.md step R7).

An erasure destroys data keys in the live keystore at T. A copy of the keystore made
before T (a backup, a WAL segment, a replica, a dump) still holds each key, wrapped under
the KEK of an epoch no later than E, the ``kek_epoch`` its signed ``*.data-key-destroyed``
event records. Such a copy is beyond use once a rotation that *started after T* (a signed
``kek.epoch-started`` event after the destruction, for an epoch above E) has destroyed the
KEK of every epoch up to E (signed ``kek.epoch-destroyed`` events). Until then the copies
are *pending* until the next rotation is due: the start of epoch E plus the policy's
``kekRotationDays``. A key destroyed while keys were not wrapped (``kek_epoch`` 0, or None
on events recorded before epochs existed) is held as it is by every copy made before T, and
no rotation bounds it; nor does one bound a key that existed before the ledger began
wrapping (the start of epoch 1 with ``previous`` 0), in a copy made before that.

Everything here is computed from signed events only, so what the pack or the receipt
states can be checked by anyone holding those events: the pure functions take
:class:`Fact` values (an event's id, position, topic, time and payload, already verified
by the caller) and return or check the statement; the readers at the end gather the
events from a ledger. The statement's shape is ``$defs/Copies`` of
schemas/evidence-pack-predicate.v1.json.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.batch_events import erasure_rows
from ledger import clock, envelope, policy_rules

if TYPE_CHECKING:
    from governance.i18n import Words
    from ledger.application import LedgerApp

KEY_DESTROYED_SUFFIX = ".data-key-destroyed.v1"
EPOCHS_CREATED = "memory-ledger:kek.epochs-started.v1"
EPOCH_STARTED = "memory-ledger:kek.epoch-started.v1"
EPOCH_DESTROYED = "memory-ledger:kek.epoch-destroyed.v1"
KEK_TOPICS = (EPOCHS_CREATED, EPOCH_STARTED, EPOCH_DESTROYED)
POLICY_SET = "memory-ledger:policy.set.v1"
BATCH_EXECUTED = "memory-ledger:batch.executed.v1"

UNRECOVERABLE, PENDING, UNBOUNDED = "unrecoverable", "pending", "unbounded"
READ_MODEL_COPIES = "read-model-copies"
OUTSIDE_THE_LEDGER = "outside-the-ledger"

__all__ = ["NOT_COVERED_WORDS", "PENDING", "UNBOUNDED", "UNRECOVERABLE", "CopiesInvalid",
           "Fact", "check_statement", "copies_line", "day", "evidence_rows",
           "fact_of", "facts_of", "group_words", "keystore_words", "overall_words",
           "resting_rows", "shared_rows", "statement", "statement_for_batch",
           "subject_words", "summary"]


class CopiesInvalid(ValueError):
    """A copies statement the signed events do not support; ``step`` is the sub-step
    (``"1"``-``"4"``), which the pack reports as 8.N and the receipt as R7."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class Fact:
    """One signed event as the statement reads it (its signature and inclusion checked by
    whoever made the fact)."""

    originator_id: str
    version: int
    seq: int
    topic: str
    timestamp: str
    payload: Mapping[str, Any]

    @property
    def event_id(self) -> str:
        return envelope.event_id(self.originator_id, self.version)


def fact_of(state: bytes) -> Fact:
    """The fact of stored event bytes (docs/spec/event-envelope.md; not verified here)."""
    env = envelope.open_state(state).envelope
    return Fact(str(env["originator_id"]), int(env["version"]), int(env["seq"]),
                str(env["topic"]), str(env["timestamp"]), env["payload"])


def facts_of(states: Iterable[bytes]) -> list[Fact]:
    return [fact_of(s) for s in states]


# ----------------------------------------------------------------------------- the basis
@dataclass(frozen=True)
class _Key:
    fact: Fact
    epoch: int | None
    before_wrapping: bool


@dataclass(frozen=True)
class _Basis:
    """What the statement rests on, read from the facts (pure)."""

    keys: list[_Key]
    started: dict[int, Fact]
    destroyed: dict[int, Fact]
    kek_versions: list[int]
    kek_ids: set[str]
    wrapping_began: Fact | None
    genesis: Fact | None
    policy: Fact | None
    executed: Fact | None


def _epoch_of(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise CopiesInvalid("1", f"a key destruction names kek_epoch {value!r}, not an epoch")
    return value


def _basis(facts: Sequence[Fact], batch_id: str | None) -> _Basis:
    ordered = sorted(facts, key=lambda f: f.seq)
    started: dict[int, Fact] = {}
    destroyed: dict[int, Fact] = {}
    kek = [f for f in ordered if f.topic in KEK_TOPICS]
    for f in kek:
        if f.topic == EPOCH_STARTED:
            started.setdefault(int(f.payload["epoch"]), f)
        elif f.topic == EPOCH_DESTROYED:
            destroyed.setdefault(int(f.payload["epoch"]), f)
    began = next((f for f in started.values() if int(f.payload.get("previous", -1)) == 0),
                 None)
    created = {f.originator_id: f.seq for f in ordered if f.version == 1}
    keys = []
    for f in ordered:
        if not f.topic.endswith(KEY_DESTROYED_SUFFIX):
            continue
        epoch = _epoch_of(f.payload.get("kek_epoch"))
        born = created.get(f.originator_id)
        before = (began is not None and epoch is not None and epoch >= 1
                  and (born is None or born < began.seq))
        keys.append(_Key(f, epoch, before))
    policies = [f for f in ordered if f.topic == POLICY_SET]
    executed = [f for f in ordered if f.topic == BATCH_EXECUTED
                and (batch_id is None or f.originator_id == batch_id)]
    return _Basis(keys, started, destroyed, [f.version for f in kek],
                  {f.originator_id for f in kek}, began,
                  next((f for f in ordered if f.seq == 1), None),
                  policies[-1] if policies else None, executed[-1] if executed else None)


def _rotation_days(policy: Fact | None) -> int | None:
    """``kekRotationDays`` of the policy in force, when it is enforced (as `ledger sweep`
    reads it: the sweep rotates only under an enforced policy)."""
    if policy is None:
        return None
    doc = policy_rules.enforced(policy.payload.get("document"))
    sla = (doc or {}).get("rightToBeForgottenSla")
    days = sla.get("kekRotationDays") if isinstance(sla, Mapping) else None
    return days if type(days) is int else None


def _epoch_start(b: _Basis, epoch: int) -> str | None:
    """When ``epoch`` began: its signed start, or the log's first event for the epoch a
    ledger is made with (epoch 1 with no start event: `ledger init` made it)."""
    if epoch in b.started:
        return b.started[epoch].timestamp
    if epoch == 1 and b.genesis is not None:
        return b.genesis.timestamp
    return None


def _plus_days(at: str, days: int) -> str:
    return clock.format_instant(clock.parse_instant(at) + timedelta(days=days))


def _ref(f: Fact, epoch: int) -> dict[str, Any]:
    return {"epoch": epoch, "started_at": f.timestamp, "event_id": f.event_id}


def _covering(b: _Basis, epoch: int, last_seq: int) -> Fact | None:
    """The first rotation started after ``last_seq`` to an epoch above ``epoch``."""
    after = [f for e, f in b.started.items() if e > epoch and f.seq > last_seq]
    return min(after, key=lambda f: f.seq) if after else None


def _group_statement(b: _Basis, epoch: int | None, keys: list[_Key]) -> dict[str, Any]:
    last = max(keys, key=lambda k: k.fact.seq).fact
    group: dict[str, Any] = {
        "kek_epoch": epoch, "keys": len(keys),
        "destroyed_at": max(k.fact.timestamp for k in keys),
        "unwrapped_until": (b.wrapping_began.timestamp
                            if keys[0].before_wrapping and b.wrapping_began else None)}
    if epoch is None or epoch == 0:
        group.update(state=UNBOUNDED, wrapping_began=(
            b.wrapping_began.timestamp if b.wrapping_began is not None else None))
        return group
    rotation = _covering(b, epoch, last.seq)
    mine = b.destroyed.get(epoch)
    if mine is not None and mine.seq > last.seq:
        successor = b.started.get(int(mine.payload.get("successor", -1)))
        if successor is not None and successor.seq > last.seq:
            rotation = successor
    kept = [e for e in range(1, epoch + 1) if e not in b.destroyed]
    if rotation is not None and not kept and mine is not None and mine.seq > rotation.seq:
        done = [b.destroyed[e] for e in range(1, epoch + 1)]
        group.update(state=UNRECOVERABLE,
                     rotation=_ref(rotation, int(rotation.payload["epoch"])),
                     kek_destroyed=[{"epoch": e, "at": f.timestamp, "event_id": f.event_id}
                                    for e, f in zip(range(1, epoch + 1), done, strict=True)],
                     since=max(f.timestamp for f in done))
        return group
    began = _epoch_start(b, epoch)
    days = _rotation_days(b.policy)
    group.update(state=PENDING, epoch_began_at=began, rotation_days=days,
                 policy_event=b.policy.event_id if b.policy is not None else None,
                 due=_plus_days(began, days) if began is not None and days is not None
                 else None,
                 rotation=(_ref(rotation, int(rotation.payload["epoch"]))
                           if rotation is not None else None))
    return group


def _group_key(epoch: int | None, before: bool) -> tuple[int, bool]:
    return (-1 if epoch is None else epoch, before)


def _groups(b: _Basis) -> dict[tuple[int, bool], list[_Key]]:
    groups: dict[tuple[int, bool], list[_Key]] = {}
    for k in b.keys:
        groups.setdefault(_group_key(k.epoch, k.before_wrapping), []).append(k)
    return dict(sorted(groups.items()))


def _overall(groups: list[dict[str, Any]]) -> tuple[str, str | None]:
    if not groups:
        return UNRECOVERABLE, None
    if any(g["state"] == UNBOUNDED or g["unwrapped_until"] for g in groups):
        return UNBOUNDED, None
    ends = [g.get("since") if g["state"] == UNRECOVERABLE else g.get("due") for g in groups]
    state = PENDING if any(g["state"] == PENDING for g in groups) else UNRECOVERABLE
    return state, None if any(e is None for e in ends) else max(str(e) for e in ends)


def statement(facts: Sequence[Fact], batch_id: str | None = None) -> dict[str, Any]:
    """The copies statement of the key destructions among ``facts`` (pure).

    ``facts``: every key destruction of the erasure, every event of the ledger's
    ``KekEpochs`` aggregate, the policy in force's ``policy.set`` event, the log's first
    event, the batch's ``batch.executed`` event and, in a ledger that began wrapping after
    it was made, the first event of each item whose key was destroyed (what
    :func:`evidence_rows` gathers).
    """
    b = _basis(facts, batch_id)
    groups = [_group_statement(b, None if key[0] < 0 else key[0], keys)
              for key, keys in _groups(b).items()]
    state, until = _overall(groups)
    done = b.executed.timestamp if b.executed is not None else None
    return {
        "keystore": {"keys": len(b.keys),
                     "destroyed_at": max((k.fact.timestamp for k in b.keys), default=None)},
        "older_copies": groups,
        "state": state,
        "until": until,
        "not_covered": [] if done is None else [
            {"what": READ_MODEL_COPIES, "made_before": done},
            {"what": OUTSIDE_THE_LEDGER, "made_before": done}],
    }


def summary(s: Mapping[str, Any], now: str | None = None) -> dict[str, Any]:
    """The statement in a line's worth: ``state``; ``until`` (the date after which no copy
    of the keys can be decrypted, or when ``pending`` the due date of the rotation that
    makes it so; None: not bounded, or no rotation scheduled); ``unwrapped_until`` (copies
    made before it hold some keys unwrapped); ``rotation_overdue`` (pending past its due
    date at ``now``)."""
    groups = s.get("older_copies", [])
    unwrapped = [g["unwrapped_until"] or g["destroyed_at"] for g in groups
                 if g["state"] == UNBOUNDED or g["unwrapped_until"]]
    until = s.get("until")
    return {"state": s["state"], "until": until,
            "unwrapped_until": max(unwrapped, default=None),
            "rotation_overdue": bool(s["state"] == PENDING and until and now
                                     and clock.parse_instant(until) <= clock.parse_instant(now))}


# ----------------------------------------------------------------------------- wording
def copies_line(summ: Mapping[str, Any] | None) -> str:
    """A :func:`summary` in a few words, for a command's output: ``copies pending until
    T3`` (and whether the rotation is overdue), ``copies pending: no KEK rotation
    scheduled``, ``copies unrecoverable since T2`` or ``copies not bounded``."""
    if not summ:
        return ""
    until = summ.get("until")
    if summ["state"] == UNRECOVERABLE:
        return f"copies unrecoverable since {until}"
    if summ["state"] == PENDING:
        if until is None:
            return "copies pending: no KEK rotation scheduled"
        return f"copies pending until {until}" + (
            " (the rotation is overdue)" if summ.get("rotation_overdue") else "")
    return ("copies not bounded: copies made before "
            f"{summ.get('unwrapped_until')} hold keys unwrapped")


def day(instant: str | None) -> str:
    """``2026-03-04 10:00 UTC``: an instant as people read it (:func:`ledger.clock.for_people`)."""
    return clock.for_people(instant)


def group_words(g: Mapping[str, Any], generated_at: str | None = None,
                as_of: str = "when this pack was built") -> str:
    """One group of older copies, for an auditor (the pack's report; the console says
    ``as_of`` "by now"): a rotation due before ``generated_at`` is said overdue."""
    n = g["keys"]
    keys = f"{n} data key{'s' if n != 1 else ''}"
    t = day(g["destroyed_at"])
    if g["state"] == UNBOUNDED:
        began = (f"the ledger began wrapping keys on {day(g['wrapping_began'])}, after that"
                 if g.get("wrapping_began") else "the ledger does not wrap keys yet")
        text = (f"Not bounded. {keys} destroyed on {t} while keys were not wrapped "
                f"({began}): a copy made before {t} holds them as they were; no rotation "
                "can put it beyond use, and it stays decryptable for as long as it is kept.")
    elif g["state"] == UNRECOVERABLE:
        rot, epoch = g["rotation"], g["kek_epoch"]
        kek = (f"the KEK of epoch 1 was destroyed on {day(g['since'])}" if epoch == 1 else
               f"the KEKs of epochs 1 to {epoch} are destroyed, epoch {epoch}'s on "
               f"{day(g['since'])}")
        text = (f"Unrecoverable since {day(g['since'])}. {keys}, destroyed on {t}, were "
                f"wrapped under the KEK of epoch {epoch} or an earlier one in every copy made "
                f"before then. A rotation to epoch {rot['epoch']} started on "
                f"{day(rot['started_at'])}, after the destruction, and {kek}: no copy can "
                "unwrap these keys.")
    else:
        epoch = g["kek_epoch"]
        text = (f"Pending. {keys}, destroyed on {t}, are wrapped under the KEK of epoch "
                f"{epoch} in every copy made before then; a copy can be decrypted together "
                f"with that KEK until a rotation destroys it. ")
        if g.get("rotation"):
            rot = g["rotation"]
            text += (f"A rotation to epoch {rot['epoch']} started on "
                     f"{day(rot['started_at'])} and has not destroyed it yet.")
        elif g.get("due"):
            text += (f"The rotation is due on {day(g['due'])} (epoch {epoch} began on "
                     f"{day(g['epoch_began_at'])}; kekRotationDays "
                     f"{g['rotation_days']}; `ledger sweep` rotates when it runs then).")
            if generated_at and clock.parse_instant(g["due"]) <= clock.parse_instant(
                    generated_at):
                text += f" It is overdue: it had not run {as_of}."
        else:
            text += ("No rotation is scheduled: the policy in force sets no "
                     "kekRotationDays (or is not enforced), so these copies stay decryptable "
                     "until someone runs `ledger keys rotate-kek`.")
    if g.get("unwrapped_until"):
        text += (f" These keys existed before the ledger began wrapping keys on "
                 f"{day(g['unwrapped_until'])}: a copy made before that holds them "
                 "unwrapped, and no rotation reaches it.")
    return text


def overall_words(s: Mapping[str, Any]) -> str:
    """The statement's conclusion, for an auditor."""
    if s["state"] == UNRECOVERABLE:
        return (f"After {day(s['until'])}, no copy of the keystore, wherever it is kept, can "
                "decrypt the erased memory.")
    if s["state"] == PENDING:
        if s["until"]:
            return (f"Copies made before the erasure can be decrypted until the rotation due "
                    f"on {day(s['until'])}; after it, none can. Build the pack again after "
                    "the rotation: it then states the date.")
        return ("Copies made before the erasure stay decryptable until a KEK rotation runs; "
                "none is scheduled, so no date bounds them yet.")
    return ("Some copies made before the erasure hold keys unwrapped: no rotation reaches "
            "them, and no date bounds them.")


NOT_COVERED_WORDS = {
    READ_MODEL_COPIES: (
        "Copies of the read models made before {at}",
        "Not reached by the erasure. The memory store and the search indexes hold memory "
        "content in plaintext; the erasure purged them in place, and `ledger backup` never "
        "copies them. A PostgreSQL base backup, a replica or a WAL archive of the read-model "
        "tables, or a file copy of projections.sqlite, made outside the ledger before {at} "
        "holds the erased content, and no key destruction reaches it: such copies are the "
        "operator's responsibility."),
    OUTSIDE_THE_LEDGER: (
        "Data the erasure never held",
        "Not reached by the erasure. Anything read or taken out of the ledger before {at} "
        "(exports, .mem bundles, an assistant's own logs, prompts or caches) is outside the "
        "ledger."),
}
"""What the erasure cannot reach: (label, words), ``{at}`` its ``made_before``."""


def keystore_words(s: Mapping[str, Any]) -> str:
    ks = s["keystore"]
    return (f"Destroyed. {ks['keys']} data keys deleted on {day(ks['destroyed_at'])}: the "
            "erased items' keys and the erasure's own (its request's and batch's, which "
            "sealed the reason and the identifiers given).")


def subject_words(s: Mapping[str, Any], w: Words | None = None,
                  controller: str | None = None) -> str:
    """The statement for the person who asked to be forgotten (the receipt), in the
    language of ``w`` (governance/i18n.py; English by default), dates written for people;
    ``controller``: who the person can ask (the controller's name)."""
    if w is None:
        from governance.i18n import Words

        w = Words("en")
    who = controller or w._("the organisation that kept this memory")
    if s["state"] == UNRECOVERABLE:
        return w._("Copies of the key store made before the erasure (backups, database "
                   "logs, replicas) held the keys only locked under a key-encryption key. "
                   "That key was destroyed too: since %(date)s, no copy of the key store "
                   "anywhere can decrypt what was erased.", date=w.when(s["until"]))
    if s["state"] == PENDING:
        if s["until"]:
            return w._("Copies of the key store made before the erasure (backups, database "
                       "logs, replicas) still hold the keys, locked under a key-encryption "
                       "key that the next key rotation destroys. It is due on %(date)s: "
                       "after that date, no copy of the key store anywhere can decrypt what "
                       "was erased. A receipt issued after the rotation states the date it "
                       "happened.", date=w.when(s["until"]))
        return w._("Copies of the key store made before the erasure (backups, database logs, "
                   "replicas) still hold the keys, locked under a key-encryption key that "
                   "stays until it is rotated. No rotation is scheduled, so there is no date "
                   "yet after which no copy can decrypt what was erased; ask %(controller)s "
                   "for a new receipt after the next rotation.", controller=who)
    return w._("Some copies of the ledger made before the erasure hold keys as they were, "
               "not locked: no key rotation can reach them, so they can decrypt what was "
               "erased for as long as they are kept. Ask %(controller)s how long backups are "
               "kept.", controller=who)


# ----------------------------------------------------------------------------- checking
def _fail(step: str, message: str) -> CopiesInvalid:
    return CopiesInvalid(step, message)


def _check_history(b: _Basis) -> None:
    """Step 2: the KekEpochs events are one aggregate's versions 1..n, without a gap (a
    rotation left out between two others is caught; after the last one, nothing can be)."""
    if len(b.kek_ids) > 1:
        raise _fail("2", "the kek events belong to more than one aggregate")
    if b.kek_versions and sorted(b.kek_versions) != list(range(1, len(b.kek_versions) + 1)):
        raise _fail("2", f"the kek events are versions {sorted(b.kek_versions)}, not 1.."
                         f"{len(b.kek_versions)}: a rotation's events are missing")
    for epoch, f in b.started.items():
        previous = int(f.payload.get("previous", -1))
        if previous >= epoch:
            raise _fail("2", f"epoch {epoch} started after epoch {previous}, not a later one")


_FIELDS = {"kek_epoch", "keys", "destroyed_at", "state", "unwrapped_until"}
FIELDS = {UNBOUNDED: _FIELDS | {"wrapping_began"},
          UNRECOVERABLE: _FIELDS | {"rotation", "kek_destroyed", "since"},
          PENDING: _FIELDS | {"epoch_began_at", "rotation_days", "policy_event", "due",
                              "rotation"}}
"""The fields of a group of older copies, by its state."""


def _same(step: str, what: str, claimed: Any, signed: Any) -> None:
    if claimed != signed:
        raise _fail(step, f"{what} is {claimed!r}; the signed events say {signed!r}")


def _check_unrecoverable(b: _Basis, g: Mapping[str, Any], keys: list[_Key]) -> None:
    """Step 3: a rotation started after the destruction, and the KEK of every epoch up to
    the keys' epoch destroyed, each by a signed event of the pack."""
    epoch = int(g["kek_epoch"])
    label = f"copies of keys destroyed under epoch {epoch}"
    last = max(keys, key=lambda k: k.fact.seq).fact
    rot = g.get("rotation")
    if not isinstance(rot, Mapping):
        raise _fail("3", f"{label}: unrecoverable without a rotation")
    started = b.started.get(int(rot["epoch"]))
    if started is None or started.event_id != rot["event_id"]:
        raise _fail("3", f"{label}: the pack holds no signed start of epoch {rot['epoch']} "
                         f"({rot['event_id']})")
    _same("3", f"{label}: the rotation's start", rot["started_at"], started.timestamp)
    if int(rot["epoch"]) <= epoch:
        raise _fail("3", f"{label}: the rotation to epoch {rot['epoch']} is not to a later "
                         f"epoch than {epoch}")
    if started.seq <= last.seq or started.timestamp < last.timestamp:
        raise _fail("3", f"{label}: the rotation to epoch {rot['epoch']} started at "
                         f"{started.timestamp} (seq {started.seq}), before the keys were "
                         f"destroyed at {last.timestamp} (seq {last.seq}); copies made "
                         "between the two still hold them under its KEK")
    claimed = {int(d["epoch"]): d for d in g.get("kek_destroyed", [])}
    wanted = list(range(1, epoch + 1))
    if sorted(claimed) != wanted or len(g.get("kek_destroyed", [])) != len(wanted):
        raise _fail("3", f"{label}: the destroyed KEKs named are of epochs {sorted(claimed)}, "
                         f"not of every epoch up to {epoch}")
    for e in wanted:
        f = b.destroyed.get(e)
        if f is None:
            raise _fail("3", f"{label}: the pack holds no signed kek.epoch-destroyed event for "
                             f"epoch {e}")
        _same("3", f"{label}: epoch {e}'s destruction", (claimed[e]["event_id"],
              claimed[e]["at"]), (f.event_id, f.timestamp))
    mine = b.destroyed[epoch]
    if mine.seq <= started.seq or int(mine.payload.get("successor", -1)) != int(rot["epoch"]):
        raise _fail("3", f"{label}: epoch {epoch}'s KEK was not destroyed by the rotation to "
                         f"epoch {rot['epoch']} (successor {mine.payload.get('successor')})")
    _same("3", f"{label}: since", g.get("since"),
          max(b.destroyed[e].timestamp for e in wanted))


def _check_pending(b: _Basis, g: Mapping[str, Any], keys: list[_Key]) -> None:
    """Step 4: the due date is the start of the keys' epoch plus the policy's
    kekRotationDays, each as the signed events say; an in-progress rotation is one."""
    epoch = int(g["kek_epoch"])
    label = f"copies of keys destroyed under epoch {epoch}"
    _same("4", f"{label}: the epoch's start", g.get("epoch_began_at"), _epoch_start(b, epoch))
    _same("4", f"{label}: the policy in force", g.get("policy_event"),
          b.policy.event_id if b.policy is not None else None)
    _same("4", f"{label}: kekRotationDays", g.get("rotation_days"), _rotation_days(b.policy))
    began, days = g.get("epoch_began_at"), g.get("rotation_days")
    _same("4", f"{label}: the rotation's due date", g.get("due"),
          _plus_days(began, days) if began is not None and days is not None else None)
    rot = g.get("rotation")
    if rot is not None:
        last = max(keys, key=lambda k: k.fact.seq).fact
        started = b.started.get(int(rot["epoch"]))
        if started is None or started.event_id != rot["event_id"] or \
                started.timestamp != rot["started_at"] or started.seq <= last.seq or \
                int(rot["epoch"]) <= epoch:
            raise _fail("4", f"{label}: the rotation in progress to epoch {rot['epoch']} is "
                             "not a signed start after the destruction")


def _check_group(b: _Basis, g: Mapping[str, Any], keys: list[_Key], wrapping: str | None
                 ) -> None:
    """Step 1 for one stated group of older copies (and steps 3-4 by its state)."""
    epoch = g["kek_epoch"]
    if set(g) != FIELDS.get(g["state"]):
        raise _fail("1", f"the group of epoch {epoch} ({g['state']}) has the fields "
                         f"{sorted(g)}, not {sorted(FIELDS.get(g['state'], ()))}")
    _same("1", f"the time keys of epoch {epoch} were destroyed", g["destroyed_at"],
          max(k.fact.timestamp for k in keys))
    _same("1", f"when epoch {epoch}'s keys were first wrapped", g["unwrapped_until"],
          wrapping if keys[0].before_wrapping else None)
    if epoch is None or epoch == 0:
        _same("1", f"the state of keys destroyed unwrapped (epoch {epoch})", g["state"],
              UNBOUNDED)
        _same("1", "when wrapping began", g.get("wrapping_began"), wrapping)
    elif g["state"] == UNRECOVERABLE:
        _check_unrecoverable(b, g, keys)
    elif g["state"] == PENDING:
        _check_pending(b, g, keys)
    else:
        raise _fail("1", f"keys wrapped under epoch {epoch} are said {g['state']}: they "
                         "are pending or unrecoverable")


def check_statement(claimed: Mapping[str, Any], facts: Sequence[Fact],
                    batch_id: str | None = None) -> None:
    """Check a statement against the signed ``facts`` (pure); raise :class:`CopiesInvalid`.

    1. **Keys**: the groups are the facts' key destructions, by ``kek_epoch`` (and whether
       the item predates wrapping), with their counts and latest times; a group whose keys
       were not wrapped says ``unbounded``, a wrapped one ``pending`` or ``unrecoverable``;
       the keystore line, the overall state and date and the dates of what is not covered
       follow from them and from the batch's execution.
    2. **Epochs**: the KekEpochs events are versions 1..n of one aggregate.
    3. **Unrecoverable**: the rotation started after the destruction, to a later epoch; the
       KEK of every epoch up to the keys' epoch is destroyed by a signed event, the keys'
       own by that rotation; ``since`` is the last of those destructions.
    4. **Pending**: the due date is the epoch's signed start plus the enforced policy's
       ``kekRotationDays`` (none: no date); a rotation said to be in progress started after
       the destruction. A pending statement needs no destruction: it claims none.
    """
    b = _basis(facts, batch_id)
    _check_history(b)
    groups = _groups(b)
    stated = claimed.get("older_copies", [])
    keys_of = []
    for g in stated:
        epoch = g.get("kek_epoch")
        key = _group_key(epoch, g.get("unwrapped_until") is not None)
        keys_of.append(groups.get(key))
    found = [(k[0] if k[0] >= 0 else None, len(v)) for k, v in groups.items()]
    said = [(g.get("kek_epoch"), g.get("keys")) for g in stated]
    if sorted(found, key=str) != sorted(said, key=str) or any(k is None for k in keys_of):
        raise _fail("1", f"the key destructions by KEK epoch are {found} (epoch, keys); the "
                         f"statement says {said}")
    wrapping = b.wrapping_began.timestamp if b.wrapping_began is not None else None
    for g, keys in zip(stated, keys_of, strict=True):
        assert keys is not None
        _check_group(b, g, keys, wrapping)
    _same("1", "the live keystore", claimed.get("keystore"),
          {"keys": len(b.keys),
           "destroyed_at": max((k.fact.timestamp for k in b.keys), default=None)})
    _same("1", "the overall state and date", (claimed.get("state"), claimed.get("until")),
          _overall(list(stated)))
    done = b.executed.timestamp if b.executed is not None else None
    _same("1", "what the erasure does not cover", claimed.get("not_covered"),
          [] if done is None else [{"what": READ_MODEL_COPIES, "made_before": done},
                                   {"what": OUTSIDE_THE_LEDGER, "made_before": done}])


# ----------------------------------------------------------------------------- reading
def shared_rows(app: LedgerApp) -> list[Any]:
    """The stored events every statement of this ledger rests on: every event of the
    KekEpochs aggregate, the log's first event and the policy in force's event (read once
    for a list of requests)."""
    rows: list[Any] = list(app.reader.notifications(start=1, limit=10**9, topics=list(KEK_TOPICS)))
    rows += list(app.reader.notifications(start=1, limit=1))
    policy = app.reader.policy()
    if policy is not None:
        oid, version = str(policy["event_id"]).rsplit("/", 1)
        rows += app.reader.stored_events(UUID(oid), gt=int(version) - 1, lte=int(version))
    return rows


def evidence_rows(app: LedgerApp, erasure_rows: Sequence[Any],
                  shared: Sequence[Any] | None = None) -> list[Any]:
    """The stored events the statement rests on beyond ``erasure_rows`` (the batch's and
    its request's own events, the tombstones and key destructions): :func:`shared_rows`
    and, when the ledger began wrapping after it was made, the first event of each item
    whose key was destroyed under an epoch (whether it predates wrapping), in log order."""
    have = {(str(r.originator_id), r.originator_version) for r in erasure_rows}
    out: dict[tuple[str, int], Any] = {}
    base = list(shared_rows(app) if shared is None else shared)
    began = any(r.topic == EPOCH_STARTED and fact_of(r.state).payload.get("previous") == 0
                for r in base)
    if began:
        for r in erasure_rows:
            if r.topic.endswith(KEY_DESTROYED_SUFFIX) and \
                    fact_of(r.state).payload.get("kek_epoch"):
                base += app.reader.stored_events(UUID(str(r.originator_id)), lte=1)
    for r in base:
        k = (str(r.originator_id), r.originator_version)
        if k not in have:
            out[k] = r
    return sorted(out.values(), key=lambda r: fact_of(r.state).seq)


def resting_rows(erasure: Sequence[Any], evidence: Sequence[Any], batch_id: str
                 ) -> list[Any]:
    """Of an erasure's rows and its :func:`evidence_rows`, the ones its statement reads:
    the key destructions, the batch's execution, the KEK epochs' events, the log's first
    event, the policy's and, when wrapping began after the ledger was made, each destroyed
    key's item's first event (what a receipt carries to be checked alone)."""
    rows = list({(str(r.originator_id), r.originator_version): r
                 for r in [*erasure, *evidence]}.values())
    keyed = {str(r.originator_id) for r in rows if r.topic.endswith(KEY_DESTROYED_SUFFIX)}
    began = any(r.topic == EPOCH_STARTED and fact_of(r.state).payload.get("previous") == 0
                for r in rows)
    out = [r for r in rows
           if r.topic.endswith(KEY_DESTROYED_SUFFIX) or r.topic in KEK_TOPICS
           or r.topic == POLICY_SET
           or (r.topic == BATCH_EXECUTED and str(r.originator_id) == batch_id)
           or (r.originator_version == 1 and (
               fact_of(r.state).seq == 1 or (began and str(r.originator_id) in keyed)))]
    return sorted(out, key=lambda r: fact_of(r.state).seq)


def statement_for_batch(app: LedgerApp, batch: Any, request: Any,
                        shared: Sequence[Any] | None = None) -> dict[str, Any]:
    """The statement of a closed batch as the ledger's signed events say it now."""
    rows = erasure_rows(app, batch, request)
    rows += evidence_rows(app, rows, shared)
    return statement(facts_of(r.state for r in rows), str(batch.id))

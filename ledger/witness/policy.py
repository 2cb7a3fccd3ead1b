"""Witness policies in the c2sp.org/tlog-policy format, and quorum evaluation. Pure.

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <member>...
    quorum <name>|none
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger.checkpoint import parse_vkey
from ledger.errors import InputError
from ledger.witness.cosign import CosignatureError, WitnessKey, parse_witness_vkey

_WS = re.compile(r"[ \t]+")
_BAD_OCTET = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")
LIMIT = 32


class PolicyError(InputError):
    """The policy file is not a valid tlog-policy; the message names the line."""


@dataclass(frozen=True)
class Group:
    name: str
    threshold: int
    members: tuple[str, ...]


@dataclass
class Policy:
    logs: list[tuple[str, bytes]] = field(default_factory=list)  # (key name, public key)
    witnesses: dict[str, WitnessKey] = field(default_factory=dict)  # policy name -> key
    groups: dict[str, Group] = field(default_factory=dict)
    quorum: str = ""

    def satisfied(self, cosigned: set[str]) -> bool:
        """Whether witnesses named in ``cosigned`` (policy names) meet the quorum."""
        return self._witnessed(self.quorum, cosigned)

    def _witnessed(self, name: str, cosigned: set[str]) -> bool:
        if name == "none":
            return True
        if name in self.witnesses:
            return name in cosigned
        group = self.groups[name]
        count = sum(self._witnessed(m, cosigned) for m in group.members)
        return count >= group.threshold

    def describe(self) -> str:
        if self.quorum == "none":
            return "quorum none"
        if self.quorum in self.witnesses:
            return f"quorum: witness {self.quorum}"
        g = self.groups[self.quorum]
        return f"quorum: group {g.name} needs {g.threshold} of {', '.join(g.members)}"


def parse_policy(data: bytes) -> Policy:
    if _BAD_OCTET.search(data):
        raise PolicyError("the policy holds a control character other than tab and newline")
    policy = Policy()
    names: set[str] = {"none"}
    seen_keys: set[bytes] = set()
    used_members: set[str] = set()
    quorum_seen = False
    for number, raw in enumerate(data.decode("utf-8", "surrogateescape").split("\n"), start=1):
        line = raw.strip(" \t")
        if not line or line.startswith("#"):
            continue
        words = _WS.split(line)
        kind = words[0]
        where = f"policy line {number}"
        try:
            if kind == "log" and len(words) in (2, 3):
                name, pub = parse_vkey(words[1])
                if pub in seen_keys:
                    raise PolicyError(f"{where}: duplicate key")
                seen_keys.add(pub)
                policy.logs.append((name, pub))
            elif kind == "witness" and len(words) in (3, 4):
                name = words[1]
                if name in names:
                    raise PolicyError(f"{where}: name {name!r} is already defined")
                key = parse_witness_vkey(words[2])
                if key.public_key in seen_keys:
                    raise PolicyError(f"{where}: duplicate witness key")
                seen_keys.add(key.public_key)
                names.add(name)
                policy.witnesses[name] = key
            elif kind == "group" and len(words) >= 4:
                name, k, members = words[1], words[2], tuple(words[3:])
                if name in names:
                    raise PolicyError(f"{where}: name {name!r} is already defined")
                for m in members:
                    if m == "none" or m not in names:
                        raise PolicyError(f"{where}: member {m!r} is not defined above")
                    if m in used_members:
                        raise PolicyError(f"{where}: {m!r} is already a member of a group")
                    used_members.add(m)
                if k == "all":
                    threshold = len(members)
                elif k == "any":
                    threshold = 1
                elif re.fullmatch(r"[1-9][0-9]*", k) and int(k) <= len(members):
                    threshold = int(k)
                else:
                    raise PolicyError(f"{where}: threshold {k!r} is not all, any or 1..n")
                names.add(name)
                policy.groups[name] = Group(name, threshold, members)
            elif kind == "quorum" and len(words) == 2:
                if quorum_seen:
                    raise PolicyError(f"{where}: a second quorum line")
                if words[1] not in names:
                    raise PolicyError(f"{where}: quorum {words[1]!r} is not defined above")
                policy.quorum, quorum_seen = words[1], True
            else:
                raise PolicyError(f"{where}: not a log, witness, group or quorum line")
        except (ValueError, CosignatureError) as e:
            if isinstance(e, PolicyError):
                raise
            raise PolicyError(f"{where}: {e}") from e
    if not quorum_seen:
        raise PolicyError("the policy has no quorum line", hint="add `quorum none` or "
                          "`quorum <witness or group>`")
    if max(len(policy.logs), len(policy.witnesses), len(policy.groups)) > LIMIT:
        raise PolicyError(f"the policy lists more than {LIMIT} logs, witnesses or groups")
    return policy


def format_policy(log_vkey: str, witnesses: Sequence[tuple[str, str]], quorum: str = "all",
                  about: str = "") -> str:
    """A tlog-policy for one log and the witnesses it asks: ``log_vkey`` (type 0x01, named
    by its origin), ``witnesses`` as ``(url, vkey)``, and a quorum over them: ``all``,
    ``any``, a number k (at least k of them) or ``none``. Each witness is named in the
    policy by its key's name (``-2``, ``-3``... when two keys share one). One witness is
    the quorum itself; several form the group ``witnesses``. The text parses with
    :func:`parse_policy`; ``about`` is a comment line put first."""
    parse_vkey(log_vkey)
    n = len(witnesses)
    if quorum == "none":
        threshold = 0
    elif quorum == "all":
        threshold = n
    elif quorum == "any":
        threshold = 1
    elif re.fullmatch(r"[1-9][0-9]{0,2}", quorum):
        threshold = int(quorum)
    else:
        raise PolicyError(f"quorum {quorum!r} is not all, any, none or a number of witnesses")
    if quorum != "none" and n == 0:
        raise PolicyError("this ledger asks no witness, so no quorum of witnesses can be met",
                          hint="add one with `ledger witness use URL --key VKEY`, or write "
                               "`--quorum none` for a policy that requires no cosignature")
    if threshold > n:
        raise PolicyError(f"a quorum of {threshold} witnesses, but this ledger asks "
                          f"{n} witness{'es' if n != 1 else ''}",
                          hint="`ledger witness use` more witnesses, or lower --quorum")
    lines = [f"# {about}"] if about else []
    lines += [f"log {log_vkey}", ""]
    names: list[str] = []
    for url, vkey in witnesses:
        base = parse_witness_vkey(vkey).name
        name, k = base, 1
        while name in names or name in ("none", "witnesses"):
            k += 1
            name = f"{base}-{k}"
        names.append(name)
        lines.append(f"witness {name} {vkey} {url}")
    if quorum == "none":
        lines.append("quorum none")
    elif n == 1:
        lines.append(f"quorum {names[0]}")
    else:
        k_text = "all" if threshold == n else "any" if threshold == 1 else str(threshold)
        lines += [f"group witnesses {k_text} {' '.join(names)}", "quorum witnesses"]
    text = "\n".join(lines) + "\n"
    parse_policy(text.encode())  # what is written is a policy this module reads
    return text

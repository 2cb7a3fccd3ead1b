"""Regenerate tests/vectors/envelope.json from fixed seeds (deterministic Ed25519).

Run: python -m tests.vectors.make_vectors  (then review the diff; vectors change only
when the envelope format does, which is a breaking change for old logs).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from keys.signing import Signer
from ledger import envelope

SEED = bytes(range(32))
OTHER_SEED = bytes(range(32, 64))
ENVELOPE = {
    "v": 1, "ledger": "00000000-0000-4000-8000-000000000001", "seq": 7,
    "topic": "memory-ledger:atom.created.v1",
    "originator_id": "00000000-0000-4000-8000-0000000000aa", "version": 1,
    "timestamp": "2026-01-12T18:44:00.000000Z", "kid": "",
    "payload": {"kind": "preference", "confidence": 0.87, "salience": 1e-7, "big": 1e21,
                "valence": -0.0, "derivation": "inferred", "artifact_ids": ["b", "a"],
                "unicode": "caf\u00e9 \u20ac \U0001f600", "sealed": {"alg": "A256GCM"}},
}


def build() -> dict[str, object]:
    signer = Signer.from_seed("vector", SEED)
    other = Signer.from_seed("other", OTHER_SEED)
    env = dict(ENVELOPE, kid=signer.kid)
    good = envelope.seal(env, signer)
    body = envelope.canonical(env)
    cases = [{"name": "valid", "state": good.decode(), "verdict": "valid"}]
    flipped = good.replace(b'"preference"', b'"preferencf"')
    cases.append({"name": "payload byte changed", "state": flipped.decode(),
                  "verdict": "invalid", "step": "5"})
    spaced = good.replace(b',"signature":', b', "signature":', 1)
    cases.append({"name": "whitespace in the frame", "state": spaced.decode(),
                  "verdict": "invalid", "step": "1.1"})
    wrong_type = base64.b64encode(signer.sign(envelope.pae("application/vnd.in-toto+json",
                                                           body))).decode()
    cases.append({"name": "signature made for another payload type",
                  "state": good.replace(json.loads(good)["signature"].encode(),
                                        wrong_type.encode()).decode(),
                  "verdict": "invalid", "step": "5"})
    cases.append({"name": "signed by another key",
                  "state": envelope.seal(env, other).decode(), "verdict": "invalid", "step": "5"})
    return {
        "description": "Event envelope vectors: state bytes, verdict, and the failing step "
                       "(docs/spec/event-envelope.md). Public key is the trusted key.",
        "public_key": base64.b64encode(signer.public_key).decode(),
        "canonical_envelope": body.decode(),
        "cases": cases,
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("envelope.json")
    out.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(out)

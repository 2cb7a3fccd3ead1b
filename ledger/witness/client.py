"""The ledger asks its witnesses to cosign a checkpoint (tlog-witness client, httpx).

For each witness: send the checkpoint with a consistency proof from the size that witness
last cosigned (as far as this ledger knows); on a 409 that names another size, send once
more from that size; keep only cosignature lines that verify under the witness key this
ledger trusts. A witness that is down or refuses never blocks the write: its result says
why, and the next checkpoint tries again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog

from ledger.checkpoint import parse_body, parse_note
from ledger.witness.cosign import (
    CosignatureError,
    WitnessKey,
    check_cosignatures,
    parse_witness_vkey,
)
from ledger.witness.wire import (
    SIZE_CONTENT_TYPE,
    AddCheckpoint,
    WireError,
    parse_cosignature_lines,
    parse_size,
)

log = structlog.get_logger("witness.client")
TIMEOUT = 5.0


@dataclass(frozen=True)
class WitnessTarget:
    url: str
    key: WitnessKey

    @classmethod
    def of(cls, url: str, vkey: str) -> WitnessTarget:
        from ledger.errors import InputError

        if not url.startswith(("http://", "https://")):
            raise InputError(f"witness URL {url!r} is not http:// or https://")
        try:
            return cls(url.rstrip("/"), parse_witness_vkey(vkey))
        except CosignatureError as e:
            raise InputError(f"witness key for {url}: {e}",
                             hint="give the vkey printed by `ledger witness init`") from e


@dataclass(frozen=True)
class WitnessResult:
    url: str
    vkey: str
    status: str  # cosigned | refused | unreachable | ahead
    size: int  # the size this witness is now known to have cosigned (or claims)
    line: str | None = None
    timestamp: int | None = None
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return {"url": self.url, "witness": self.vkey, "status": self.status,
                "size": self.size, "timestamp": self.timestamp, "detail": self.detail}


def ask(client: object, target: WitnessTarget, note: str, known_size: int,
        consistency: Callable[[int, int], Sequence[bytes]]) -> WitnessResult:
    """One witness, at most two requests. Never raises for a network or protocol problem."""
    try:
        return _ask(client, target, note, known_size, consistency)
    except Exception as e:  # a bug or a store error must not undo the caller's write
        log.warning("witness.failed", error=e.__class__.__name__)
        return WitnessResult(target.url, target.key.vkey, "refused", known_size,
                             detail=f"{e.__class__.__name__}: {e}"[:200])


def _ask(client: object, target: WitnessTarget, note: str, known_size: int,
         consistency: Callable[[int, int], Sequence[bytes]]) -> WitnessResult:
    import httpx

    assert isinstance(client, httpx.Client)
    body, _ = parse_note(note)
    cp = parse_body(body)
    vkey = target.key.vkey
    old = known_size if known_size <= cp.size else 0
    for _attempt in range(2):
        try:
            request = AddCheckpoint(old, tuple(consistency(old, cp.size)), note)
            resp = client.post(target.url + "/add-checkpoint", content=request.body(),
                               headers={"content-type": "text/plain; charset=utf-8"})
        except httpx.HTTPError as e:
            log.warning("witness.unreachable", error=e.__class__.__name__)
            return WitnessResult(target.url, vkey, "unreachable", known_size,
                                 detail=f"{e.__class__.__name__}: {e}"[:200])
        if resp.status_code == 200:
            try:
                lines = parse_cosignature_lines(resp.content)
                found = check_cosignatures(note + "".join(lines), [target.key])
            except (WireError, CosignatureError) as e:
                return WitnessResult(target.url, vkey, "refused", old,
                                     detail=f"answer did not verify: {e}"[:300])
            cosig = found.valid.get(vkey)
            if cosig is None:
                return WitnessResult(target.url, vkey, "refused", old,
                                     detail="the answer holds no cosignature by the trusted "
                                            "witness key")
            return WitnessResult(target.url, vkey, "cosigned", cp.size, cosig.line(),
                                 cosig.timestamp)
        ctype = resp.headers.get("content-type", "")
        if resp.status_code == 409 and ctype.startswith(SIZE_CONTENT_TYPE):
            try:
                theirs = parse_size(resp.content)
            except WireError as e:
                return WitnessResult(target.url, vkey, "refused", old, detail=str(e))
            if theirs > cp.size:
                return WitnessResult(target.url, vkey, "ahead", theirs,
                                     detail=f"the witness has cosigned size {theirs}, newer "
                                            f"than this checkpoint ({cp.size})")
            if theirs != old:
                old = theirs
                continue
        text = resp.content[:300].decode("utf-8", "replace").strip()
        return WitnessResult(target.url, vkey, "refused", old,
                             detail=f"HTTP {resp.status_code}: {text}")
    return WitnessResult(target.url, vkey, "refused", old, detail="the witness moved its size "
                                                                  "twice; try again")


def make_client() -> object:
    """An httpx client with bounded timeouts and TCP_NODELAY: the request head and body are
    two writes, and without it Nagle's algorithm meets the witness's delayed ACK (about
    40 ms per request on Linux loopback; benchmarks/witness.py)."""
    import socket

    import httpx

    transport = httpx.HTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], retries=0)
    return httpx.Client(timeout=httpx.Timeout(TIMEOUT, connect=2.0), transport=transport)


def ask_all(targets: Sequence[WitnessTarget], note: str, known: dict[str, int],
            consistency: Callable[[int, int], Sequence[bytes]],
            client: object | None = None) -> list[WitnessResult]:
    """Ask every witness in parallel; results in the order of ``targets``."""
    import httpx

    if not targets:
        return []
    http = client if client is not None else shared_client()
    assert isinstance(http, httpx.Client)
    if len(targets) == 1:
        t = targets[0]
        return [ask(http, t, note, known.get(t.key.vkey, 0), consistency)]
    with ThreadPoolExecutor(min(len(targets), 8), thread_name_prefix="witness") as pool:
        futures = [pool.submit(ask, http, t, note, known.get(t.key.vkey, 0), consistency)
                   for t in targets]
        return [f.result() for f in futures]


_shared: list[object] = []
_shared_lock = threading.Lock()


def shared_client() -> object:
    """One client per process: building one loads the CA store (~70 ms), and its
    keep-alive connections serve the next checkpoint."""
    with _shared_lock:
        if not _shared:
            import atexit

            client = make_client()
            _shared.append(client)
            atexit.register(client.close)  # type: ignore[attr-defined]
        return _shared[0]


def checkpoint_witnesses(urls: list[str] | None, keys: list[str] | None,
                         configured: tuple[tuple[str, str], ...]) -> list[tuple[str, str]] | None:
    """The ``(url, vkey)`` pairs for ``ledger checkpoint --witness URL [--witness-key VKEY]``.

    A URL configured in config.toml brings its key; others need a ``--witness-key`` each,
    in the same order. None: use the configured witnesses.
    """
    from ledger.errors import InputError

    if not urls:
        if keys:
            raise InputError("--witness-key needs a --witness URL")
        return None
    known = {url.rstrip("/"): vkey for url, vkey in configured}
    extra = list(keys or [])
    pairs = []
    for url in urls:
        if url.rstrip("/") in known and not extra:
            pairs.append((url, known[url.rstrip("/")]))
        elif extra:
            pairs.append((url, extra.pop(0)))
        else:
            raise InputError(f"no key for witness {url}",
                             hint="give --witness-key VKEY after it, or add it with "
                                  "`ledger witness use URL --key VKEY`")
    if extra:
        raise InputError("more --witness-key options than --witness URLs")

    for url, vkey in pairs:
        WitnessTarget.of(url, vkey)  # a usage error now, not a silent skip later
    return pairs

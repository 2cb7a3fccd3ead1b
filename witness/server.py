"""The witness's HTTP API (c2sp.org/tlog-witness) as an ASGI app (starlette), run by uvicorn.

    POST <prefix>/add-checkpoint          body: old size, proof lines, blank line, checkpoint
    GET  <prefix>/<origin hash>/checkpoint   the latest checkpoint cosigned for that log

One prefix serves as both the submission and the monitoring prefix (the spec allows it).

Requests are bounded in size (:data:`ledger.witness.wire.MAX_BODY_BYTES`, 413) and in the
time their body may take to arrive (408); at most ``limit_concurrency`` are served at
once. Log lines carry the status and sizes, never a request body.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ledger.witness.wire import MAX_BODY_BYTES
from witness.state import Answer, Witness

log = structlog.get_logger("witness.http")
BODY_TIMEOUT = 10.0


async def _read_body(request: Request) -> bytes | Answer:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        return Answer.text(413, f"request body over {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    total = 0

    async def read() -> Answer | None:
        nonlocal total
        async for chunk in request.stream():
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                return Answer.text(413, f"request body over {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        return None

    try:
        problem = await asyncio.wait_for(read(), BODY_TIMEOUT)
    except TimeoutError:
        return Answer.text(408, f"request body not received within {BODY_TIMEOUT:.0f} s")
    return problem if problem is not None else b"".join(chunks)


def make_app(witness: Witness, prefix: str = "") -> Starlette:
    async def add_checkpoint(request: Request) -> Response:
        body = await _read_body(request)
        if isinstance(body, Answer):
            answer = body
        else:
            answer = await run_in_threadpool(witness.add_checkpoint, body)
        log.info("witness.request", path="add-checkpoint", status=answer.status,
                 bytes=len(body) if isinstance(body, bytes) else None)
        return _response(answer)

    async def checkpoint(request: Request) -> Response:
        answer = await run_in_threadpool(witness.checkpoint,
                                         str(request.path_params["origin_hash"]))
        log.info("witness.request", path="checkpoint", status=answer.status)
        return _response(answer)

    prefix = prefix.rstrip("/")
    return Starlette(routes=[
        Route(f"{prefix}/add-checkpoint", add_checkpoint, methods=["POST"]),
        Route(f"{prefix}/{{origin_hash}}/checkpoint", checkpoint, methods=["GET"]),
    ])


def _response(answer: Answer) -> Response:
    return Response(answer.body, status_code=answer.status,  # content type exactly as given
                    headers={"content-type": answer.content_type})


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit TCP_NODELAY: an answer is two writes (head, body), and
    # with Nagle's algorithm the second waits for the client's delayed ACK (~40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(home: Path, host: str, port: int, prefix: str = "", port_file: Path | None = None,
          announce: Any = None) -> None:
    """Serve until interrupted. ``port`` 0 picks a free port, written to ``port_file``."""
    import uvicorn

    witness = Witness(home)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    url = f"http://{host}:{actual}{prefix.rstrip('/')}"
    if port_file is not None:
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(f"{actual}\n", encoding="utf-8")
        tmp.replace(port_file)
    if announce is not None:
        announce(url, witness.vkey)
    config = uvicorn.Config(make_app(witness, prefix), log_level="warning", access_log=False,
                            limit_concurrency=64, timeout_keep_alive=5,
                            h11_max_incomplete_event_size=16 * 1024)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        witness.close()

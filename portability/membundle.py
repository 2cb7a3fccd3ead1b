"""Strict verification of a ``.mem`` bundle: bytes and trusted keys in, verified
records out. Opens no ledger.

Steps (numbers appear in every error message; each names the attack it stops):

1. The bundle is a real directory; ``manifest.json`` is within the size cap, strict
   JSON, and decodes as a manifest with RFC 3339 times (malformed input).
2. The major format version is 1 (a reader must not guess at another major).
3. ``manifest.sig``, when present, is checked against the trusted keys (forged origin).
4. Every listed path is relative, has no ``.``/``..``/empty segment, backslash, colon
   or NUL, is listed once, is not a symlink and resolves inside the bundle
   (path traversal).
5. ``CHECKSUMS`` is exactly the manifest's file list and hashes to ``bundleDigest``
   (a second, inconsistent integrity record).
6. Every listed file has its listed size, then its listed SHA-256, checked before
   it is parsed (corruption, tampering); sizes are checked before reading.
7. No unlisted file or directory under ``items/``, ``audit/``, ``embeddings/``
   (smuggled data).
8. Every JSONL line is at most ``max_line_bytes`` (checked before parsing: a 50 MB
   field is refused unread), is one strict JSON object, and every known record has
   its required fields with the right types and RFC 3339 times; ids are unique;
   the manifest counts match (malformed or truncated streams).
9. Tombstone signatures are checked against the trusted keys: trusted, untrusted
   (another key, or a malformed token) or unsigned. A tombstone that names a trusted
   key but does not verify is a forgery and fails the whole bundle.
"""

from __future__ import annotations

import gc
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from portable_memory import MemFormat, MemKind, MemManifest, Tombstone, from_wire, to_line
from portable_memory.records import (
    PortableCategory,
    PortableChunk,
    PortableCommunity,
    PortableContext,
    PortableCore,
    PortableEdge,
    PortableEntity,
    PortableEpisode,
    PortableEpisodeLink,
    PortableFact,
    PortableFactLink,
    PortablePreference,
    PortableProcedure,
    PortableResource,
    PortableSecretRef,
)
from portable_memory.signing import PortableSigning, PortableVerifyingKey

from ledger.errors import InputError, VerificationFailed
from portability.common import (
    MAX_BUNDLE_FILE_BYTES,
    MAX_LINE_BYTES,
    loads_strict,
    parse_instant,
)

RECORD_TYPES: dict[str, type] = {
    MemKind.EPISODE.value: PortableEpisode, MemKind.ENTITY.value: PortableEntity,
    MemKind.EDGE.value: PortableEdge, MemKind.FACT.value: PortableFact,
    MemKind.FACT_LINK.value: PortableFactLink, MemKind.EPISODE_LINK.value: PortableEpisodeLink,
    MemKind.RESOURCE.value: PortableResource, MemKind.CHUNK.value: PortableChunk,
    MemKind.CORE.value: PortableCore, MemKind.PROCEDURE.value: PortableProcedure,
    MemKind.CONTEXT.value: PortableContext, MemKind.COMMUNITY.value: PortableCommunity,
    MemKind.CATEGORY.value: PortableCategory, MemKind.PREFERENCE.value: PortablePreference,
    MemKind.SECRET_REF.value: PortableSecretRef,
}
CHECKED_DIRS = ("items", "audit", "embeddings")
TRUSTED, UNTRUSTED, UNSIGNED, UNCHECKED = "trusted", "untrusted", "unsigned", "unchecked"


# ------------------------------------------------------------------ compiled record specs
_CHECKS: dict[str, Any] = {
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "list": lambda v: isinstance(v, list),
    "dict[str,str]": lambda v: isinstance(v, dict)
    and all(isinstance(x, str) for x in v.values()),
    "dict": lambda v: isinstance(v, dict),
    "any": lambda v: True,
}


@dataclass(frozen=True)
class _Spec:
    """The JSON shape of one portable-memory record type, grouped for fast checks."""

    name: str
    required: frozenset[str]
    typed: tuple[tuple[str, str, Any], ...]  # (key, kind, check) for plain kinds
    times: tuple[str, ...]
    enums: tuple[tuple[str, frozenset[str]], ...]
    objects: tuple[tuple[str, _Spec], ...]


def _kind_of(hint: Any) -> tuple[str, Any, bool]:
    args = get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = get_origin(hint)
    if hint is datetime:
        return "time", None, optional
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "enum", frozenset(str(m.value) for m in hint), optional
    if is_dataclass(hint):
        return "obj", hint, optional
    if origin is list:
        (elem,) = get_args(hint) or (Any,)
        return ("list[str]" if elem is str else "list"), None, optional
    if origin is dict:
        return "dict[str,str]" if get_args(hint)[1:] == (str,) else "dict", None, optional
    return {str: "str", int: "int", float: "float", bool: "bool"}.get(hint, "any"), None, \
        optional


def compile_spec(cls: type) -> _Spec:
    """Compile a portable-memory dataclass once (no type-hint work per record)."""
    hints = get_type_hints(cls)
    required, typed, times, enums, objects = set(), [], [], [], []
    for f in fields(cls):
        key = f.metadata.get("json", f.name)
        kind, extra, optional = _kind_of(hints[f.name])
        if not optional and f.default is MISSING and f.default_factory is MISSING:
            required.add(key)
        if kind == "time":
            times.append(key)
        elif kind == "enum":
            enums.append((key, extra))
        elif kind == "obj":
            objects.append((key, compile_spec(extra)))
        else:
            typed.append((key, kind, _CHECKS[kind]))
    return _Spec(cls.__name__, frozenset(required), tuple(typed), tuple(times), tuple(enums),
                 tuple(objects))


_SPECS = {kind: compile_spec(cls) for kind, cls in RECORD_TYPES.items()}
_TOMBSTONE = compile_spec(Tombstone)
_MANIFEST = compile_spec(MemManifest)


def check_record(obj: Any, spec: _Spec, where: str) -> None:
    """Required keys present, every known key of the right type, times RFC 3339."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a record must be a JSON object (step 8)")
    if not spec.required <= obj.keys() or None in map(obj.__getitem__, spec.required):
        missing = sorted(k for k in spec.required if obj.get(k) is None)
        raise InputError(f"{where}: {spec.name} has no {missing[0]!r} (step 8)")
    get = obj.get
    for key, kind, check in spec.typed:
        v = get(key)
        if v is not None and not check(v):
            raise InputError(f"{where}: {spec.name}.{key} is not a valid {kind} (step 8)")
    for key in spec.times:
        v = get(key)
        if v is not None:
            parse_instant(v, f"{where}: {key}")
    for key, allowed in spec.enums:
        v = get(key)
        if v is not None and v not in allowed:
            raise InputError(f"{where}: {spec.name}.{key} {v!r} is not one of "
                             f"{', '.join(sorted(allowed))} (step 8)")
    for key, sub in spec.objects:
        v = get(key)
        if v is not None:
            check_record(v, sub, f"{where}: {key}")


# ------------------------------------------------------------------ the verified bundle
@dataclass(frozen=True)
class CheckedTombstone:
    tombstone: Tombstone
    raw: dict[str, Any]
    trust: str
    signer: str | None


@dataclass(frozen=True)
class VerifiedBundle:
    root: Path
    manifest: MemManifest
    manifest_trust: str
    streams: dict[str, list[dict[str, Any]]]
    tombstones: list[CheckedTombstone]

    def records(self, kind: str) -> list[dict[str, Any]]:
        return self.streams.get(kind, [])


def safe_relative(path: str) -> bool:
    """Step 4 on the path string alone."""
    if not path or path.startswith(("/", "~")) or any(c in path for c in "\\:\x00"):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _no_symlinks(root: Path, rel: str) -> Path:
    p = root
    for part in rel.split("/"):
        p = p / part
        if p.is_symlink():
            raise InputError(f"bundle path {rel} goes through a symlink (step 4: path "
                             "traversal)")
    real_root = os.path.realpath(root)
    real = os.path.realpath(p)
    if not real.startswith(real_root + os.sep):
        raise InputError(f"bundle path {rel} escapes the bundle (step 4: path traversal)")
    return p


def _read_listed(path: Path, rel: str, expect: int, limit: int) -> bytes:
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise InputError(f"bundle file {rel} is listed in the manifest but missing (step 6)"
                         ) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"bundle path {rel} is not a regular file (step 6)")
    if st.st_size > limit:
        raise InputError(f"bundle file {rel} is {st.st_size} bytes, over the {limit} byte "
                         "limit; it was not read (step 6)", hint="pass --max-bytes")
    if st.st_size != expect:
        raise InputError(f"bundle file {rel} is {st.st_size} bytes, the manifest says {expect} "
                         "(step 6: size mismatch)")
    with path.open("rb") as f:
        return f.read(expect + 1)


def verify_bundle(root: Path, trusted: Sequence[bytes] = (), *,
                  max_file_bytes: int = MAX_BUNDLE_FILE_BYTES,
                  max_line_bytes: int = MAX_LINE_BYTES) -> VerifiedBundle:
    """Run steps 1-9 on the bundle at ``root``; raise InputError (or VerificationFailed
    for a forged signature by a trusted key) naming the first problem."""
    keys = [PortableVerifyingKey(raw_representation=k) for k in trusted]
    manifest, mbytes = _read_manifest(root, max_line_bytes)
    _check_version(manifest)
    manifest_trust = _manifest_trust(root, mbytes, keys)
    listed = _listed_paths(manifest)
    _check_checksums(root, manifest, listed)
    data = _read_files(root, listed, max_file_bytes)
    _check_nothing_unlisted(root, listed)
    streams = _parse_streams(data, max_line_bytes)
    _check_streams(manifest, streams)
    tombstones = _check_tombstones(streams.pop("tombstone", []), keys)
    return VerifiedBundle(root, manifest, manifest_trust, streams, tombstones)


def _read_manifest(root: Path, max_line_bytes: int) -> tuple[MemManifest, bytes]:
    """1. The manifest: a bounded regular file that decodes; returns it and its bytes."""
    if root.is_symlink() or not root.is_dir():
        raise InputError(f"{root} is not a .mem bundle directory (step 1)")
    mpath = root / "manifest.json"
    if mpath.is_symlink() or not mpath.is_file():
        raise InputError(f"{root} has no manifest.json (step 1)")
    msize = mpath.stat().st_size
    if msize > max_line_bytes:
        raise InputError(f"manifest.json is {msize} bytes, over the {max_line_bytes} byte "
                         "limit (step 1)")
    mbytes = mpath.read_bytes()
    mdoc = loads_strict(mbytes, "manifest.json (step 1)")
    check_record(mdoc, _MANIFEST, "manifest.json (step 1)")
    try:
        manifest: MemManifest = from_wire(MemManifest, mdoc)
    except (TypeError, ValueError) as e:
        raise InputError(f"manifest.json does not decode (step 1): {e}") from None
    return manifest, mbytes


def _check_version(manifest: MemManifest) -> None:
    """2. The bundle's major version is ours."""
    if manifest.format.split(".")[0] != MemFormat.VERSION.split(".")[0]:
        raise InputError(f"bundle format {manifest.format} has another major version than "
                         f"{MemFormat.VERSION} (step 2)")


def _manifest_trust(root: Path, mbytes: bytes, keys: list[PortableVerifyingKey]) -> str:
    """3. The manifest's signature, if it has one: how far it is trusted."""
    sig = root / "manifest.sig"
    if not sig.exists():
        return UNSIGNED
    if sig.is_symlink() or sig.stat().st_size > 4096:
        raise InputError("manifest.sig is not a small regular file (step 3)")
    token = sig.read_bytes().decode("utf-8", "replace").strip()
    return _token_trust(token, mbytes, keys, "manifest.sig (step 3)")


def _listed_paths(manifest: MemManifest) -> dict[str, Any]:
    """4. Every listed path is a safe relative path, listed once."""
    listed: dict[str, Any] = {}
    for entry in manifest.files:
        if not safe_relative(entry.path):
            raise InputError(f"bundle path {entry.path!r} is not a safe relative path "
                             "(step 4: path traversal)")
        if entry.path in listed:
            raise InputError(f"bundle path {entry.path} is listed twice (step 4)")
        listed[entry.path] = entry
    return listed


def _check_checksums(root: Path, manifest: MemManifest, listed: dict[str, Any]) -> None:
    """5. CHECKSUMS is the manifest's file list, and hashes to its bundleDigest."""
    ordered = sorted(listed.values(), key=lambda f: f.path)
    expected = ("\n".join(f"{f.sha256}  {f.path}" for f in ordered) + "\n").encode()
    cpath = root / "CHECKSUMS"
    if cpath.is_symlink() or not cpath.is_file():
        raise InputError("the bundle has no CHECKSUMS file (step 5)")
    if cpath.stat().st_size > max(len(expected) * 2, 4096):
        raise InputError("CHECKSUMS is far larger than the manifest's file list (step 5)")
    checksums = cpath.read_bytes()
    if checksums != expected:
        raise InputError("CHECKSUMS disagrees with manifest.json (step 5): "
                         + _first_difference(checksums, expected))
    if manifest.bundle_digest is not None and \
            hashlib.sha256(checksums).hexdigest() != manifest.bundle_digest:
        raise InputError("CHECKSUMS does not hash to the manifest's bundleDigest (step 5)")


def _read_files(root: Path, listed: dict[str, Any], max_file_bytes: int) -> dict[str, bytes]:
    """6. Every listed file has its size and hash; returns their bytes."""
    data: dict[str, bytes] = {}
    for rel, entry in listed.items():
        path = _no_symlinks(root, rel)
        body = _read_listed(path, rel, entry.bytes, max_file_bytes)
        digest = hashlib.sha256(body).hexdigest()
        if digest != entry.sha256:
            raise InputError(f"checksum mismatch for {rel}: the manifest says "
                             f"{entry.sha256[:16]}..., the file hashes to {digest[:16]}... "
                             "(step 6: corrupt or tampered)")
        data[rel] = body
    return data


def _check_nothing_unlisted(root: Path, listed: dict[str, Any]) -> None:
    """7. No file or directory the manifest does not list."""
    for sub in CHECKED_DIRS:
        d = root / sub
        if d.is_symlink():
            raise InputError(f"bundle directory {sub}/ is a symlink (step 7)")
        if not d.exists():
            continue
        for p in d.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if p.is_dir() and not p.is_symlink():
                if not any(k.startswith(rel + "/") for k in listed):
                    raise InputError(f"unlisted directory {rel}/ in the bundle (step 7)")
                continue
            if rel not in listed:
                raise InputError(f"unlisted file {rel} in the bundle (step 7: smuggled data)")


def _parse_streams(data: dict[str, bytes], max_line_bytes: int
                   ) -> dict[str, list[dict[str, Any]]]:
    """8. The streams, parsed (the collector paused: parsing makes many objects and frees
    none)."""
    streams: dict[str, list[dict[str, Any]]] = {}
    collecting = gc.isenabled()
    gc.disable()
    try:
        for rel, body in data.items():
            if not rel.endswith(".jsonl") or rel.count("/") != 1:
                continue
            folder, name = rel.split("/")
            kind = name[: -len(".jsonl")]
            if folder == "items":
                streams[kind] = _parse_stream(body, rel, _SPECS.get(kind), max_line_bytes)
            elif rel == "audit/tombstones.jsonl":
                streams["tombstone"] = _parse_stream(body, rel, _TOMBSTONE, max_line_bytes)
    finally:
        if collecting:
            gc.enable()
    return streams


def _check_streams(manifest: MemManifest, streams: dict[str, list[dict[str, Any]]]) -> None:
    """8. Each stream has the count the manifest declares, and no id twice."""
    for kind, recs in streams.items():
        declared = manifest.counts.get(kind, 0)
        if declared != len(recs):
            raise InputError(f"the manifest counts {declared} {kind} records, the stream has "
                             f"{len(recs)} (step 8)")
        if kind in _SPECS and kind not in ("factLink", "episodeLink", "category",
                                           "preference"):
            ids = [r.get("id") for r in recs]
            if len(set(ids)) != len(ids):
                raise InputError(f"items/{kind}.jsonl names one id twice (step 8)")


def _check_tombstones(raws: list[dict[str, Any]], keys: list[PortableVerifyingKey]
                      ) -> list[CheckedTombstone]:
    """9. Each tombstone decodes, and its signature (if any) is checked."""
    tombstones = []
    for i, raw in enumerate(raws):
        where = f"audit/tombstones.jsonl record {i + 1} (step 9)"
        try:
            t: Tombstone = from_wire(Tombstone, raw)
        except (TypeError, ValueError) as e:
            raise InputError(f"{where}: does not decode: {e}") from None
        trust, signer = UNSIGNED, None
        if t.signature is not None:
            body = to_line(replace(t, signature=None)).encode()
            trust = _token_trust(t.signature, body, keys, where)
            signer = t.signature.split(":")[1] if t.signature.count(":") == 2 else None
        tombstones.append(CheckedTombstone(t, raw, trust, signer))
    return tombstones


def _token_trust(token: str, data: bytes, keys: list[PortableVerifyingKey], where: str) -> str:
    if PortableSigning.verify(token, data, keys):
        return TRUSTED
    parts = token.split(":")
    if len(parts) == 3:
        try:
            pub = bytes.fromhex(parts[1])
        except ValueError:
            return UNTRUSTED
        if PortableVerifyingKey(raw_representation=pub) in keys:
            raise VerificationFailed(f"{where}: the signature names trusted key "
                                     f"{parts[1][:16]}... but does not verify (forged or "
                                     "altered)")
    return UNTRUSTED


def _parse_stream(body: bytes, rel: str, spec: _Spec | None, max_line: int
                  ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    start = 0
    n = 0
    size = len(body)
    while start < size:
        end = body.find(b"\n", start)
        if end < 0:
            end = size
        n += 1
        if end - start > max_line:
            raise InputError(f"{rel} line {n} is {end - start} bytes, over the {max_line} byte "
                             "record limit; it was not parsed (step 8)",
                             hint="pass --max-bytes if such records are genuine")
        line = body[start:end]
        start = end + 1
        if not line.strip():
            continue
        where = f"{rel} line {n}"
        obj = loads_strict(line, f"{where} (step 8)")
        if not isinstance(obj, dict):
            raise InputError(f"{where}: a record must be a JSON object (step 8)")
        if spec is not None:
            check_record(obj, spec, where)
        out.append(obj)
    return out


def _first_difference(got: bytes, want: bytes) -> str:
    g = got.decode("utf-8", "replace").splitlines()
    w = want.decode("utf-8", "replace").splitlines()
    for a, b in zip(g, w, strict=False):
        if a != b:
            return f"CHECKSUMS has {a[:100]!r}, the manifest implies {b[:100]!r}"
    return f"CHECKSUMS has {len(g)} lines, the manifest lists {len(w)} files"

"""Key-encryption keys in a PKCS#11 token (an HSM, a smart card, SoftHSM2).

The KEK of an epoch is an AES-256 secret key generated inside the token (C_GenerateKey),
stored on it (CKA_TOKEN), private, sensitive and never extractable, labelled
``OBJECT/epoch-NNNNNN``. Its bytes never leave the token: wrapping and unwrapping are
AES-GCM run by the token (CKM_AES_GCM), with a 12-byte nonce this process draws and the
AAD of :func:`keys.wrapped.wrap_aad`, so a wrapped key has the very bytes a
:class:`keys.kek.FileKekStore` would write (``0x01 || nonce || ciphertext+tag``) and the
two stores are interchangeable row for row. Destroying an epoch is C_DestroyObject.

The store is named by an RFC 7512 URI, for example::

    pkcs11:token=ledger;object=memory-ledger?module-path=/usr/lib/softhsm/libsofthsm2.so
        &pin-source=file:/etc/memory-ledger/token.pin

``pin-value=`` is accepted too, and ``LEDGER_PKCS11_PIN`` when the URI gives neither.
The PIN is never part of :attr:`Pkcs11KekStore.spec`, of a message or of a log line.

PKCS#11 logs in an *application* to a token, not a session: every session of a process
shares one login, and logging one out logs out all. So the stores of a process that name
the same token share one logged-in session (counted, closed with the last store), and
each store does its work in a session of its own opened under that login. A second store
on a token the process is already logged in to therefore joins that login without its
PIN being checked again; PKCS#11 gives no way to check it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast
from urllib.parse import unquote_to_bytes

import pkcs11
from pkcs11 import Attribute, GCMParams, KeyType, Mechanism, ObjectClass
from pkcs11 import exceptions as pe

from keys.errors import KekUnavailable, KeystoreError
from keys.wrapped import NONCE_BYTES, WRAP_VERSION, WRAPPED_BYTES, check_form, wrap_aad

if TYPE_CHECKING:
    from pkcs11.types import DecryptMixin, EncryptMixin, Session, Token

    class _AesKey(EncryptMixin, DecryptMixin):
        """What a KEK handle offers here: the token's encrypt and decrypt."""

T = TypeVar("T")

PIN_ENV = "LEDGER_PKCS11_PIN"
DATA_KEY_BYTES = 32
TAG_BITS = 128
NO_EPOCH = -1
"""The ``epoch`` of a :class:`KekUnavailable` raised where no single epoch is concerned
(listing the epochs)."""

_PATH_ATTRS = frozenset({"token", "object", "serial", "manufacturer", "model", "type"})
_QUERY_ATTRS = frozenset({"module-path", "pin-value", "pin-source"})
_EXAMPLE = ("pkcs11:token=LABEL;object=PREFIX?module-path=/usr/lib/softhsm/libsofthsm2.so"
            "&pin-source=file:/path/to/pin")

_GONE = (pe.ObjectHandleInvalid, pe.KeyHandleInvalid)
"""A cached key handle no longer names an object: destroyed, perhaps by another process."""
_STALE = (pe.SessionHandleInvalid, pe.SessionClosed, pe.UserNotLoggedIn, pe.DeviceRemoved,
          pe.TokenNotPresent, pe.TokenNotRecognised)
"""The session is no longer usable (token removed or restarted, login lost): open anew."""
_REFUSED = (pe.DeviceError, pe.DeviceMemory, pe.HostMemory, pe.SessionCount,
            pe.FunctionRejected, pe.FunctionNotSupported, pe.MechanismInvalid,
            pe.MechanismParamInvalid)
"""Errors that say the token does not do the work, rather than that a wrapped key is bad
(a decryption that fails otherwise is a tag that does not verify)."""


@dataclass(frozen=True)
class Pkcs11Uri:
    """The parts of an RFC 7512 URI this store uses, percent-decoded. ``spec`` is the URI
    as given with any ``pin-value`` removed, so it can be written to a config or shown."""

    spec: str
    module_path: str
    token: str
    object: str
    serial: str | None = None
    manufacturer: str | None = None
    model: str | None = None
    pin_source: str | None = None
    pin_value: str | None = field(default=None, repr=False)


def _decode(raw: str, name: str) -> str:
    if re.search(r"%(?![0-9A-Fa-f]{2})", raw):
        raise ValueError(f"pkcs11 URI: the value of {name} has a % not followed by two hex "
                         "digits (write a literal % as %25)")
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"pkcs11 URI: the value of {name} is not UTF-8 once "
                         "percent-decoded") from None


def _attributes(part: str, sep: str, allowed: frozenset[str], where: str
                ) -> tuple[dict[str, str], list[tuple[str, str]]]:
    values: dict[str, str] = {}
    raw_items: list[tuple[str, str]] = []
    for item in part.split(sep) if part else []:
        name, eq, raw = item.partition("=")
        if not eq or not name:
            raise ValueError(f"pkcs11 URI: {item!r} in the {where} is not NAME=VALUE")
        name = _decode(name, "an attribute name").lower()
        if name not in allowed:
            raise ValueError(f"pkcs11 URI: attribute {name!r} is not supported in the {where} "
                             f"(supported: {', '.join(sorted(allowed))})")
        if name in values:
            raise ValueError(f"pkcs11 URI: attribute {name!r} is given twice")
        values[name] = _decode(raw, name)
        raw_items.append((name, item))
    return values, raw_items


def parse_uri(uri: str) -> Pkcs11Uri:
    """Parse ``pkcs11:PATH?QUERY`` per RFC 7512: path attributes separated by ``;``, query
    attributes by ``&``, each value percent-decoded (``+`` is a plus, not a space).
    Raises :class:`ValueError` saying what to change; the message never holds a PIN."""
    scheme, colon, rest = uri.partition(":")
    if scheme.lower() != "pkcs11" or not colon:
        raise ValueError(f"not a pkcs11 URI; give one like {_EXAMPLE}")
    if "#" in rest:
        raise ValueError("pkcs11 URI: a # has no meaning here (write a literal # as %23)")
    path_part, _, query_part = rest.partition("?")
    path, _ = _attributes(path_part, ";", _PATH_ATTRS, "path (before ?, separated by ;)")
    query, raw_query = _attributes(query_part, "&", _QUERY_ATTRS,
                                   "query (after ?, separated by &)")
    missing = [hint for name, hint in (
        ("module-path", "?module-path=/path/to/the/module.so (the token's PKCS#11 library)"),
        ("token", "token=LABEL (the token's label, as softhsm2-util --show-slots prints it)"),
        ("object", "object=PREFIX (the KEKs are labelled PREFIX/epoch-NNNNNN)"),
    ) if not (query if name == "module-path" else path).get(name)]
    if missing:
        raise ValueError("pkcs11 URI: add " + " and ".join(missing) + f"; for example {_EXAMPLE}")
    if "type" in path and path["type"] != "secret-key":
        raise ValueError("pkcs11 URI: type= can only be secret-key here (the KEKs are AES keys)")
    if "pin-value" in query and "pin-source" in query:
        raise ValueError("pkcs11 URI: give pin-value or pin-source, not both")
    source = query.get("pin-source")
    if source is not None and _pin_path(source) is None:
        raise ValueError("pkcs11 URI: pin-source must name a file (file:/path or /path)")
    kept = [item for name, item in raw_query if name != "pin-value"]
    spec = f"{scheme}:{path_part}" + (f"?{'&'.join(kept)}" if kept else "")
    return Pkcs11Uri(spec=spec, module_path=query["module-path"], token=path["token"],
                     object=path["object"], serial=path.get("serial"),
                     manufacturer=path.get("manufacturer"), model=path.get("model"),
                     pin_source=source, pin_value=query.get("pin-value"))


def _pin_path(source: str) -> Path | None:
    if source.startswith("file://"):
        rest = source[len("file://"):]
        if not rest.startswith("/"):  # file://host/path: only the local host
            host, _, tail = rest.partition("/")
            if host not in ("", "localhost"):
                return None
            rest = "/" + tail
        return Path(rest)
    if source.startswith("file:"):
        return Path(source[len("file:"):])
    if source.startswith("/"):
        return Path(source)
    return None


class _Login:
    """The one logged-in session of this process on one token, and how many stores use it."""

    def __init__(self, session: Session | None) -> None:
        self.session = session  # None: logged in by someone else in this process
        self.users = 0


_logins: dict[tuple[str, int], _Login] = {}
_logins_lock = threading.Lock()
_generation = 0
"""Counts the forks this process came through: a child must not use its parent's sessions
(PKCS#11 asks it to initialise the library anew)."""
_lib_generation: dict[str, int] = {}


def _after_fork_in_child() -> None:
    global _generation, _logins_lock
    _generation += 1
    _logins.clear()
    _logins_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Pkcs11KekStore:
    """KEKs as non-extractable AES-256 keys of a PKCS#11 token, used where they are.

    A store opens its session on first use, keeps it, and keeps the handle of each
    epoch's key it has found; one lock makes it safe to share between threads (a PKCS#11
    session does one operation at a time). :meth:`close` closes the session.
    """

    kind = "pkcs11"

    def __init__(self, uri: Pkcs11Uri) -> None:
        self.uri = uri
        self.spec = uri.spec
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._login_key: tuple[str, int] | None = None
        self._generation = _generation
        self._keys: dict[int, _AesKey] = {}

    @classmethod
    def from_uri(cls, uri: str) -> Pkcs11KekStore:
        """The store an RFC 7512 URI names; :class:`ValueError` when the URI lacks a part.
        Nothing is opened until the first operation."""
        return cls(parse_uri(uri))

    def __repr__(self) -> str:
        return f"Pkcs11KekStore({self.spec!r})"

    def label(self, epoch: int) -> str:
        return f"{self.uri.object}/epoch-{epoch:06d}"

    # -- the KekStore operations ---------------------------------------------------------

    def epochs(self) -> list[int]:
        pattern = re.compile(re.escape(self.uri.object) + r"/epoch-(\d{6})")

        def run(session: Session) -> list[int]:
            found = set()
            for obj in session.get_objects({Attribute.CLASS: ObjectClass.SECRET_KEY,
                                            Attribute.KEY_TYPE: KeyType.AES,
                                            Attribute.TOKEN: True}):
                m = pattern.fullmatch(obj[Attribute.LABEL])
                if m:
                    found.add(int(m.group(1)))
            return sorted(found)

        return self._run(NO_EPOCH, run)

    def create(self, epoch: int) -> None:
        def run(session: Session) -> None:
            if self._find(session, epoch) is not None:
                return
            key = session.generate_key(
                KeyType.AES, 256, label=self.label(epoch), store=True,
                capabilities=pkcs11.MechanismFlag.ENCRYPT | pkcs11.MechanismFlag.DECRYPT,
                template={
                    Attribute.TOKEN: True,
                    Attribute.PRIVATE: True,  # visible only to a logged-in session
                    Attribute.SENSITIVE: True,  # CKA_VALUE never readable
                    Attribute.EXTRACTABLE: False,  # never wrapped out (C_WrapKey refuses)
                    Attribute.ENCRYPT: True,
                    Attribute.DECRYPT: True,
                    Attribute.WRAP: False,  # the data keys are encrypted as data
                    Attribute.UNWRAP: False,
                    Attribute.SIGN: False,
                    Attribute.VERIFY: False,
                    Attribute.DERIVE: False,
                })
            self._keys[epoch] = cast("_AesKey", key)

        self._run(epoch, run)

    def wrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        for key_id, dek in items:
            if len(dek) != DATA_KEY_BYTES:
                raise ValueError(f"data key {key_id} is {len(dek)} bytes, not "
                                 f"{DATA_KEY_BYTES}")

        def run(session: Session) -> list[bytes]:
            key = self._key(session, epoch)
            out = []
            for key_id, dek in items:
                nonce = os.urandom(NONCE_BYTES)
                params = GCMParams(nonce, wrap_aad(key_id, epoch), TAG_BITS)
                sealed = cast(bytes, key.encrypt(dek, mechanism=Mechanism.AES_GCM,
                                                 mechanism_param=params))
                wrapped = WRAP_VERSION + nonce + sealed
                if len(wrapped) != WRAPPED_BYTES:
                    raise KeystoreError(
                        f"the token {self.uri.token!r} returned {len(sealed)} bytes for "
                        f"data key {key_id}, not {WRAPPED_BYTES - 1 - NONCE_BYTES}: it does "
                        "not do AES-GCM with a 128-bit tag")
                out.append(wrapped)
            return out

        return self._run(epoch, run)

    def unwrap(self, epoch: int, items: list[tuple[str, bytes]]) -> list[bytes]:
        for key_id, wrapped in items:
            check_form(key_id, wrapped)

        def run(session: Session) -> list[bytes]:
            key = self._key(session, epoch)
            out = []
            for key_id, wrapped in items:
                params = GCMParams(wrapped[1:1 + NONCE_BYTES], wrap_aad(key_id, epoch),
                                   TAG_BITS)
                try:
                    dek = key.decrypt(wrapped[1 + NONCE_BYTES:], mechanism=Mechanism.AES_GCM,
                                      mechanism_param=params)
                except (*_GONE, *_STALE, *_REFUSED):
                    raise
                except pe.PKCS11Error:
                    # A tag that does not verify: CKR_ENCRYPTED_DATA_INVALID, or
                    # CKR_GENERAL_ERROR from SoftHSM2 2.6.
                    raise KeystoreError(
                        f"the wrapped data key {key_id} does not open under the KEK of "
                        f"epoch {epoch}: the keystore row was altered or belongs to another "
                        "ledger") from None
                out.append(cast(bytes, dek))
            return out

        return self._run(epoch, run)

    def destroy(self, epoch: int) -> None:
        def run(session: Session) -> None:
            self._keys.pop(epoch, None)
            for obj in list(session.get_objects({Attribute.CLASS: ObjectClass.SECRET_KEY,
                                                 Attribute.LABEL: self.label(epoch)})):
                try:
                    obj.destroy()
                except _GONE:
                    pass  # destroyed meanwhile by another session

        self._run(epoch, run)

    def close(self) -> None:
        with self._lock:
            self._keys.clear()
            self._drop_session()

    # -- the session, the handles, and what the token's errors mean ----------------------

    def _run(self, epoch: int, work: Callable[[Session], T]) -> T:
        """Do ``work`` in this store's session, opening it when needed. A session or a
        cached handle that went stale (the token restarted, another process destroyed a
        key) is dropped and the work tried once more; a token that still does not do it
        raises :class:`KekUnavailable`."""
        with self._lock:
            for attempt in (1, 2):
                session = self._open(epoch)
                try:
                    return work(session)
                except _GONE:
                    self._keys.clear()
                    if attempt == 2:
                        raise self._unavailable(epoch, "a key handle stayed invalid") from None
                except _STALE as e:
                    self._keys.clear()
                    self._drop_session()
                    if attempt == 2:
                        raise self._unavailable(epoch, _name(e)) from None
                except pe.PKCS11Error as e:
                    raise self._unavailable(epoch, _name(e)) from None
            raise AssertionError("unreachable")

    def _unavailable(self, epoch: int, why: str) -> KekUnavailable:
        return KekUnavailable(
            f"the PKCS#11 token {self.uri.token!r} did not do the work ({why}): check that "
            f"the token is present and {self.uri.module_path} answers", epoch)

    def _find(self, session: Session, epoch: int) -> _AesKey | None:
        key = self._keys.get(epoch)
        if key is not None:
            return key
        found = list(session.get_objects({Attribute.CLASS: ObjectClass.SECRET_KEY,
                                          Attribute.LABEL: self.label(epoch)}))
        if not found:
            return None
        if len(found) > 1:
            raise KekUnavailable(
                f"{len(found)} keys are labelled {self.label(epoch)!r} on the PKCS#11 token "
                f"{self.uri.token!r}: which one wrapped the data keys is unknown; find the "
                "one that unwraps them and remove the others", epoch)
        key = self._keys[epoch] = cast("_AesKey", found[0])
        return key

    def _key(self, session: Session, epoch: int) -> _AesKey:
        key = self._find(session, epoch)
        if key is None:
            raise KekUnavailable(
                f"the key-encryption key of epoch {epoch} ({self.label(epoch)!r}) is not on "
                f"the PKCS#11 token {self.uri.token!r} (destroyed by a rotation, or this is "
                "not the ledger's token or object prefix)", epoch)
        return key

    def _open(self, epoch: int) -> Session:
        if self._generation != _generation:  # forked: the parent's session is not ours
            self._session, self._login_key, self._generation = None, None, _generation
            self._keys.clear()
        if self._session is not None:
            return self._session
        token = self._token(epoch)
        login_key = (self.uri.module_path, token.slot.slot_id)
        with _logins_lock:
            login = _logins.get(login_key)
            if login is None:
                login = _logins[login_key] = _Login(self._login(token, epoch))
            login.users += 1
        self._login_key = login_key
        try:
            self._session = token.open(rw=True)  # no PIN: it shares the login above
        except pe.PKCS11Error as e:
            self._release_login()
            raise self._unavailable(epoch, f"opening a session: {_name(e)}") from None
        return self._session

    def _token(self, epoch: int) -> Token:
        path = self.uri.module_path
        if not Path(path).is_file():
            raise KekUnavailable(f"the PKCS#11 module {path} does not exist: install the "
                                 "token's library or correct module-path in the URI", epoch)
        try:
            lib = pkcs11.lib(path)
            if _lib_generation.setdefault(path, _generation) != _generation:
                lib.reinitialize()
                _lib_generation[path] = _generation
        except pe.PKCS11Error as e:
            raise KekUnavailable(f"cannot load the PKCS#11 module {path} ({e}): check that "
                                 "module-path names the token's PKCS#11 library", epoch) from None
        try:
            tokens = [t for t in lib.get_tokens(token_label=self.uri.token)
                      if (self.uri.serial is None
                          or t.serial.decode(errors="replace").strip() == self.uri.serial)
                      and (self.uri.manufacturer is None
                           or t.manufacturer_id == self.uri.manufacturer)
                      and (self.uri.model is None or t.model == self.uri.model)]
        except pe.PKCS11Error as e:
            raise self._unavailable(epoch, f"listing the tokens: {_name(e)}") from None
        if not tokens:
            conf = os.environ.get("SOFTHSM2_CONF")
            raise KekUnavailable(
                f"no PKCS#11 token labelled {self.uri.token!r} in {path}"
                + (" with the serial, manufacturer and model the URI gives"
                   if self.uri.serial or self.uri.manufacturer or self.uri.model else "")
                + ": check token= in the URI and that the token is initialised"
                + (f" (SOFTHSM2_CONF={conf})" if conf else ""), epoch)
        if len(tokens) > 1:
            raise KekUnavailable(f"{len(tokens)} PKCS#11 tokens are labelled "
                                 f"{self.uri.token!r}: add serial= to the URI", epoch)
        return tokens[0]

    def _login(self, token: Token, epoch: int) -> Session | None:
        pin = self._pin(epoch)
        try:
            return token.open(rw=True, user_pin=pin)
        except pe.UserAlreadyLoggedIn:
            return None  # logged in by other code of this process: its login serves
        except (pe.PinIncorrect, pe.PinInvalid, pe.PinLenRange):
            raise KekUnavailable(
                f"the PKCS#11 token {self.uri.token!r} refused the PIN: check "
                + self._pin_origin(), epoch) from None
        except (pe.PinLocked, pe.PinExpired) as e:
            raise KekUnavailable(f"the PIN of the PKCS#11 token {self.uri.token!r} is "
                                 f"{'locked' if isinstance(e, pe.PinLocked) else 'expired'}: "
                                 "the token's security officer must reset it", epoch) from None
        except pe.PKCS11Error as e:
            raise self._unavailable(epoch, f"logging in: {_name(e)}") from None

    def _pin_origin(self) -> str:
        if self.uri.pin_value is not None:
            return "pin-value in the URI"
        if self.uri.pin_source is not None:
            return f"the PIN file {_pin_path(self.uri.pin_source)}"
        return f"the environment variable {PIN_ENV}"

    def _pin(self, epoch: int) -> str:
        """The PIN, read when a session is opened (a PIN file may change) and kept no longer
        than the login takes."""
        if self.uri.pin_value is not None:
            return self.uri.pin_value
        if self.uri.pin_source is not None:
            path = _pin_path(self.uri.pin_source)
            assert path is not None  # parse_uri checked it
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as e:
                why = e.strerror if isinstance(e, OSError) else "not UTF-8"
                raise KekUnavailable(f"cannot read the PIN file {path} named by pin-source: "
                                     f"{why}", epoch) from None
            return lines[0] if lines else ""  # the first line, without its line end
        pin = os.environ.get(PIN_ENV)
        if pin is None:
            raise KekUnavailable(
                f"no PIN for the PKCS#11 token {self.uri.token!r}: add pin-source=file:PATH "
                f"to the URI or set {PIN_ENV}", epoch)
        return pin

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except pe.PKCS11Error:
                pass  # a token that went away took the session with it
        self._release_login()

    def _release_login(self) -> None:
        key, self._login_key = self._login_key, None
        if key is None:
            return
        with _logins_lock:
            login = _logins.get(key)
            if login is None:
                return
            login.users -= 1
            if login.users > 0:
                return
            del _logins[key]
        if login.session is not None:
            try:
                login.session.close()  # C_Logout, then C_CloseSession
            except pe.PKCS11Error:
                pass


def _name(e: Exception) -> str:
    """An error of the binding by its name (``PinIncorrect``), with its text when it has one;
    never a PIN (the binding does not put one in its errors)."""
    text = str(e)
    name = f"{type(e).__name__}: {text}" if text else type(e).__name__
    if isinstance(e, (pe.MechanismInvalid, pe.MechanismParamInvalid)):
        name += ("; the token must offer CKM_AES_GCM with a 12-byte nonce chosen by the "
                 "caller (some HSMs in FIPS mode refuse one and draw their own)")
    return name

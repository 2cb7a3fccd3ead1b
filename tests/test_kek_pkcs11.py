"""The KEK store in a PKCS#11 token (keys/kek_pkcs11.py), on a throwaway SoftHSM2 token:
wrapping in the token with the FileKekStore's bytes, the epochs' life cycle, the token's
refusals as KekUnavailable without the PIN, and a KEK that cannot leave the token."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pkcs11
import pytest
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
from pkcs11 import exceptions as pe
from pkcs11.types import Session, WrapMixin

from keys.errors import KekUnavailable, KeystoreError
from keys.kek import FileKekStore, KekStore, open_kek_store
from keys.kek_pkcs11 import PIN_ENV, Pkcs11KekStore, parse_uri
from keys.wrapped import NONCE_BYTES, WRAP_VERSION, WRAPPED_BYTES

from .softhsm import MODULE, OTHER_TOKEN, PIN, TOKEN, SoftHsm, pkcs11_uri, softhsm

__all__ = ["pkcs11_uri", "softhsm"]  # fixtures imported for pytest, not unused

DEKS = [(f"dk_{i}", os.urandom(32)) for i in range(5)]


@pytest.fixture
def store(pkcs11_uri: str) -> Iterator[Pkcs11KekStore]:
    s = Pkcs11KekStore.from_uri(pkcs11_uri)
    yield s
    s.close()


def raw_session(token: str = TOKEN) -> Session:
    """A session of this process on the token, beside the store's. It opens without a PIN:
    it shares the login of a store that is open (PKCS#11 logs in a process, not a session),
    and closing it does not log that store out."""
    return pkcs11.lib(MODULE).get_token(token_label=token).open(rw=True)


# -- the URI --------------------------------------------------------------------------------

URI = "pkcs11:token=ledger;object=kek?module-path=/usr/lib/softhsm/libsofthsm2.so"


def test_uri_parts_are_percent_decoded_and_the_pin_is_left_out_of_spec() -> None:
    u = parse_uri("pkcs11:token=my%20token;object=a%2Fb+c;serial=00ff"
                  "?module-path=/opt/p%261.so&pin-value=12%2634")
    assert (u.token, u.object, u.serial, u.module_path) == ("my token", "a/b+c", "00ff",
                                                            "/opt/p&1.so")
    assert u.pin_value == "12&34"
    assert u.spec == "pkcs11:token=my%20token;object=a%2Fb+c;serial=00ff?module-path=/opt/p%261.so"
    assert "12" not in repr(u).split("serial")[1] and "pin_value" not in repr(u)
    assert parse_uri(URI + "&pin-value=1234").spec == URI
    assert parse_uri("pkcs11:token=t;object=o?pin-value=9&module-path=/m.so").spec == \
        "pkcs11:token=t;object=o?module-path=/m.so"
    src = parse_uri(URI + "&pin-source=file:/run/pin")
    assert src.pin_source == "file:/run/pin" and src.spec == URI + "&pin-source=file:/run/pin"


@pytest.mark.parametrize(("uri", "says"), [
    ("pkcs11:token=t;object=o", "add ?module-path="),
    ("pkcs11:object=o?module-path=/m.so", "add token=LABEL"),
    ("pkcs11:token=t?module-path=/m.so", "add object=PREFIX"),
    ("pkcs11:?module-path=/m.so", "add token=LABEL"),
    ("pkcs11:token=t;object=o;id=%01?module-path=/m.so", "'id' is not supported"),
    ("pkcs11:token=t;token=u;object=o?module-path=/m.so", "given twice"),
    ("pkcs11:token=t;object=o?module-path=/m.so&pin-value=4321&pin-source=/p", "not both"),
    ("pkcs11:token=t;object=o?module-path=/m.so&pin-source=|cat", "must name a file"),
    ("pkcs11:token=t%zz;object=o?module-path=/m.so", "two hex digits"),
    ("pkcs11:token=t;object=o;type=private?module-path=/m.so", "secret-key"),
    ("pkcs11:token;object=o?module-path=/m.so", "NAME=VALUE"),
    ("file:kek", "not a pkcs11 URI"),
])
def test_uri_without_a_part_says_what_to_add(uri: str, says: str) -> None:
    with_pin = uri + "&pin-value=4321" if "?" in uri and "pin-" not in uri else uri
    with pytest.raises(ValueError) as e:
        parse_uri(with_pin)
    assert says in str(e.value) and "4321" not in str(e.value)


def test_open_kek_store_dispatches_pkcs11_uris(tmp_path: Path) -> None:
    s = open_kek_store(URI + "&pin-value=4321", tmp_path)
    assert isinstance(s, Pkcs11KekStore) and isinstance(s, KekStore)
    assert (s.kind, s.spec) == ("pkcs11", URI)
    assert "4321" not in repr(s) and "4321" not in repr(s.__dict__)


# -- wrapping ------------------------------------------------------------------------------

def test_round_trip(store: Pkcs11KekStore) -> None:
    store.create(1)
    wrapped = store.wrap(1, DEKS)
    assert store.unwrap(1, list(zip([k for k, _ in DEKS], wrapped, strict=True))) == \
        [d for _, d in DEKS]
    assert len({w[1:1 + NONCE_BYTES] for w in wrapped}) == len(DEKS)  # a nonce each
    assert store.wrap(1, []) == [] and store.unwrap(1, []) == []


def test_wrapped_bytes_are_the_file_stores_bytes(store: Pkcs11KekStore, softhsm: SoftHsm,
                                                 tmp_path: Path) -> None:
    """The same KEK in both stores (imported into the token for this test only: the store
    itself only generates them there) opens what the other wrapped, both ways."""
    kek = os.urandom(32)
    store.epochs()  # logged in
    with raw_session() as session:
        session.create_object({
            Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.KEY_TYPE: KeyType.AES,
            Attribute.VALUE: kek, Attribute.TOKEN: True, Attribute.PRIVATE: True,
            Attribute.ENCRYPT: True, Attribute.DECRYPT: True, Attribute.LABEL: store.label(7)})
    files = FileKekStore(tmp_path / "kek", "file:kek")
    files.create(7)
    files.path(7).write_bytes(kek)
    from_token = store.wrap(7, DEKS)
    from_file = files.wrap(7, DEKS)
    for a, b in zip(from_token, from_file, strict=True):
        assert len(a) == len(b) == WRAPPED_BYTES and a[:1] == b[:1] == WRAP_VERSION
    ids = [k for k, _ in DEKS]
    assert files.unwrap(7, list(zip(ids, from_token, strict=True))) == [d for _, d in DEKS]
    assert store.unwrap(7, list(zip(ids, from_file, strict=True))) == [d for _, d in DEKS]
    files.close()


def test_a_wrapped_key_moved_or_altered_does_not_open(store: Pkcs11KekStore) -> None:
    store.create(1)
    store.create(2)
    [w] = store.wrap(1, [("dk_a", b"k" * 32)])
    with pytest.raises(KeystoreError, match="dk_b does not open") as e:
        store.unwrap(1, [("dk_b", w)])  # another key id: another AAD
    assert not isinstance(e.value, KekUnavailable)
    with pytest.raises(KeystoreError, match="does not open under the KEK of epoch 2"):
        store.unwrap(2, [("dk_a", w)])  # another epoch
    flipped = w[:-1] + bytes([w[-1] ^ 1])
    with pytest.raises(KeystoreError, match="does not open"):
        store.unwrap(1, [("dk_a", flipped)])
    with pytest.raises(KeystoreError, match="is not a wrapped key"):
        store.unwrap(1, [("dk_a", w[:-1])])
    with pytest.raises(KeystoreError, match="is not a wrapped key"):
        store.unwrap(1, [("dk_a", b"\x02" + w[1:])])
    assert store.unwrap(1, [("dk_a", w)]) == [b"k" * 32]  # the session still works


def test_unwrap_after_destroy_is_kek_unavailable(store: Pkcs11KekStore, pkcs11_uri: str) -> None:
    other = Pkcs11KekStore.from_uri(pkcs11_uri)  # holds a handle of the key when destroyed
    try:
        store.create(3)
        [w] = store.wrap(3, [("dk_a", b"k" * 32)])
        assert other.unwrap(3, [("dk_a", w)]) == [b"k" * 32]
        store.destroy(3)
        for s in (store, other):
            with pytest.raises(KekUnavailable, match=r"epoch 3 .* is not on the PKCS#11") as e:
                s.unwrap(3, [("dk_a", w)])
            assert e.value.epoch == 3
            with pytest.raises(KekUnavailable):
                s.wrap(3, [("dk_a", b"k" * 32)])
    finally:
        other.close()


def test_epochs_create_and_destroy_are_idempotent(store: Pkcs11KekStore,
                                                  softhsm: SoftHsm) -> None:
    assert store.epochs() == []
    for epoch in (2, 1, 2, 10):
        store.create(epoch)
    assert store.epochs() == [1, 2, 10]
    [w] = store.wrap(2, [("dk", b"d" * 32)])
    store.create(2)  # a resumed rotation: the same key, so what it wrapped still opens
    assert store.unwrap(2, [("dk", w)]) == [b"d" * 32]
    store.destroy(2)
    store.destroy(2)
    store.destroy(99)
    assert store.epochs() == [1, 10]
    # Another prefix, even one that starts with this one, is another set of epochs.
    longer = Pkcs11KekStore.from_uri(softhsm.uri(store.uri.object + "x"))
    try:
        longer.create(5)
        assert store.epochs() == [1, 10] and longer.epochs() == [5]
    finally:
        longer.destroy(5)
        longer.close()


def test_two_stores_of_one_process_share_the_login(pkcs11_uri: str) -> None:
    """Closing one store logs the process out only with the last one (PKCS#11 logs in a
    process): the other keeps seeing its keys."""
    a, b = Pkcs11KekStore.from_uri(pkcs11_uri), Pkcs11KekStore.from_uri(pkcs11_uri)
    a.create(1)
    [w] = a.wrap(1, [("dk", b"d" * 32)])
    assert b.unwrap(1, [("dk", w)]) == [b"d" * 32]
    a.close()
    assert b.epochs() == [1] and b.unwrap(1, [("dk", w)]) == [b"d" * 32]
    b.destroy(1)
    b.close()
    b.close()  # twice is nothing


def test_a_session_that_went_away_is_opened_anew(store: Pkcs11KekStore) -> None:
    """A token restarted under a long-lived server closes its sessions: the store opens a
    new one and does the work, rather than failing every call until restarted itself."""
    store.create(1)
    [w] = store.wrap(1, [("dk", b"d" * 32)])
    assert store._session is not None
    store._session.close()  # behind the store's back: the handle is now invalid
    assert store.unwrap(1, [("dk", w)]) == [b"d" * 32]


def test_threads_share_one_store(store: Pkcs11KekStore) -> None:
    store.create(1)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                wrapped = store.wrap(1, DEKS)
                ids = [k for k, _ in DEKS]
                assert store.unwrap(1, list(zip(ids, wrapped, strict=True))) == \
                    [d for _, d in DEKS]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


FORK_CHILD = """
import os, sys
from keys.kek_pkcs11 import Pkcs11KekStore
store = Pkcs11KekStore.from_uri(sys.argv[1])
store.create(1)
[w] = store.wrap(1, [("dk", b"d" * 32)])
parents = store._session
assert parents is not None
pid = os.fork()
if pid == 0:  # the forked child: only an exit code
    code = 1
    try:
        opened = store.unwrap(1, [("dk", w)]) == [b"d" * 32]
        fresh = store._session is not None and store._session is not parents
        code = 0 if opened and fresh else 2
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert store.unwrap(1, [("dk", w)]) == [b"d" * 32]  # the parent's session still works
store.close()
"""


def test_a_forked_child_opens_its_own_session(pkcs11_uri: str) -> None:
    """PKCS#11 sessions do not cross a fork (PKCS#11 2.40 section 6.7.7): the child
    initialises the module anew, logs in again in a session of its own, and unwraps what
    the parent wrapped. SoftHSM2 would let the child use the parent's session; an HSM's
    module need not, so the test looks at the session itself. It forks in a process of
    its own: a pytest worker has threads, and a fork of a threaded process may inherit a
    lock another thread held (it failed so under load)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORK_CHILD, pkcs11_uri], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


# -- the token's refusals ------------------------------------------------------------------

def test_wrong_pin_is_kek_unavailable_without_the_pin(softhsm: SoftHsm) -> None:
    s = Pkcs11KekStore.from_uri(softhsm.uri("kek", token=OTHER_TOKEN, pin="98761"))
    with pytest.raises(KekUnavailable, match="refused the PIN: check pin-value") as e:
        s.epochs()
    assert "98761" not in str(e.value) and "98761" not in repr(e.value.args)
    assert e.value.__cause__ is None and e.value.__suppress_context__
    s.close()


def test_pin_from_a_file_or_the_environment(softhsm: SoftHsm, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pin_file = tmp_path / "pin"
    pin_file.write_text("99999\n")
    bare = softhsm.uri("kek", token=OTHER_TOKEN, pin=None)
    s = Pkcs11KekStore.from_uri(bare + f"&pin-source=file:{pin_file}")
    with pytest.raises(KekUnavailable, match=re.escape(f"check the PIN file {pin_file}")) as e:
        s.epochs()
    assert "99999" not in str(e.value)
    pin_file.write_text(PIN + "\n")
    assert s.epochs() == []  # read again when the session is opened
    s.close()
    monkeypatch.delenv(PIN_ENV, raising=False)
    s = Pkcs11KekStore.from_uri(bare)
    with pytest.raises(KekUnavailable, match=f"no PIN .* set {PIN_ENV}"):
        s.epochs()
    monkeypatch.setenv(PIN_ENV, PIN)
    assert s.epochs() == []
    s.close()
    s = Pkcs11KekStore.from_uri(bare + f"&pin-source=file:{tmp_path / 'none'}")
    with pytest.raises(KekUnavailable, match="cannot read the PIN file"):
        s.epochs()


def test_missing_token_or_module_is_kek_unavailable(softhsm: SoftHsm, tmp_path: Path) -> None:
    s = Pkcs11KekStore.from_uri(softhsm.uri("kek", token="no-such-token", pin="4321"))
    with pytest.raises(KekUnavailable, match="no PKCS#11 token labelled 'no-such-token'") as e:
        s.create(1)
    assert e.value.epoch == 1 and "4321" not in str(e.value)
    gone = Pkcs11KekStore.from_uri("pkcs11:token=t;object=o?module-path="
                                   f"{tmp_path / 'gone.so'}&pin-value=4321")
    with pytest.raises(KekUnavailable, match=r"gone\.so does not exist"):
        gone.unwrap(4, [])
    (tmp_path / "bad.so").write_bytes(b"not a library")
    bad = Pkcs11KekStore.from_uri("pkcs11:token=t;object=o?module-path="
                                  f"{tmp_path / 'bad.so'}&pin-value=4321")
    with pytest.raises(KekUnavailable, match="cannot load the PKCS#11 module") as e:
        bad.wrap(4, [])
    assert "4321" not in str(e.value)


# -- the KEK stays in the token -------------------------------------------------------------

def test_the_kek_cannot_be_exported(store: Pkcs11KekStore) -> None:
    store.create(1)
    with raw_session() as session:
        kek = session.get_key(ObjectClass.SECRET_KEY, label=store.label(1))
        got = kek.get_attributes([
            Attribute.EXTRACTABLE, Attribute.SENSITIVE, Attribute.NEVER_EXTRACTABLE,
            Attribute.ALWAYS_SENSITIVE, Attribute.LOCAL, Attribute.TOKEN, Attribute.PRIVATE,
            Attribute.VALUE_LEN, Attribute.KEY_GEN_MECHANISM, Attribute.WRAP])
        assert got == {
            Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True,
            Attribute.NEVER_EXTRACTABLE: True, Attribute.ALWAYS_SENSITIVE: True,
            Attribute.LOCAL: True,  # generated in the token, never imported
            Attribute.TOKEN: True, Attribute.PRIVATE: True, Attribute.VALUE_LEN: 32,
            Attribute.KEY_GEN_MECHANISM: Mechanism.AES_KEY_GEN, Attribute.WRAP: False}
        with pytest.raises(pe.AttributeSensitive):
            kek[Attribute.VALUE]  # C_GetAttributeValue(CKA_VALUE)
        wrapper = cast(WrapMixin, session.generate_key(
            KeyType.AES, 256, label="wrapper", template={Attribute.WRAP: True,
                                                         Attribute.TOKEN: False}))
        for mechanism in (Mechanism.AES_KEY_WRAP, Mechanism.AES_KEY_WRAP_PAD):
            with pytest.raises(pe.KeyUnextractable):
                wrapper.wrap_key(kek, mechanism=mechanism)  # C_WrapKey
        with pytest.raises(pe.AttributeReadOnly):  # once False, CKA_EXTRACTABLE stays False
            kek[Attribute.EXTRACTABLE] = True
        with pytest.raises(pe.AttributeReadOnly):  # and once True, CKA_SENSITIVE stays True
            kek[Attribute.SENSITIVE] = False
        assert kek.get_attributes([Attribute.EXTRACTABLE, Attribute.SENSITIVE]) == {
            Attribute.EXTRACTABLE: False, Attribute.SENSITIVE: True}
    assert store.wrap(1, [("dk", b"d" * 32)])  # and the store still uses it


# -- the same operations through both stores ------------------------------------------------

def _story(s: KekStore) -> list[object]:
    """Every operation of a KekStore, and what each gave (errors by type and epoch)."""
    seen: list[object] = [s.epochs()]
    for epoch in (1, 2, 1):
        s.create(epoch)
    seen.append(s.epochs())
    wrapped = s.wrap(1, DEKS)
    seen.append([(len(w), w[:1]) for w in wrapped])
    ids = [k for k, _ in DEKS]
    seen.append(s.unwrap(1, list(zip(ids, wrapped, strict=True))) == [d for _, d in DEKS])
    for epoch, key_id, w in ((1, "other", wrapped[0]), (2, ids[0], wrapped[0]),
                             (1, ids[0], wrapped[0][:20])):
        try:
            s.unwrap(epoch, [(key_id, w)])
            seen.append("opened")
        except KeystoreError as e:
            seen.append(type(e).__name__)
    s.destroy(1)
    s.destroy(1)
    seen.append(s.epochs())
    for op, items in ((s.unwrap, [(ids[0], wrapped[0])]), (s.wrap, DEKS)):
        try:
            op(1, items)
            seen.append("worked")
        except KekUnavailable as e:
            seen.append(("KekUnavailable", e.epoch))
    s.close()
    return seen


def test_parity_with_the_file_store(pkcs11_uri: str, tmp_path: Path) -> None:
    told = _story(FileKekStore(tmp_path / "kek", "file:kek"))
    assert told == _story(Pkcs11KekStore.from_uri(pkcs11_uri))
    assert told[-2:] == [("KekUnavailable", 1), ("KekUnavailable", 1)]

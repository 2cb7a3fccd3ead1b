"""Throwaway SoftHSM2 tokens for the PKCS#11 tests (Debian's softhsm2 package).

:func:`make_softhsm` writes a ``softhsm2.conf`` whose ``directories.tokendir`` is a
temporary folder, points ``SOFTHSM2_CONF`` at it in this process's environment (child
processes started afterwards inherit it, so a ``ledger`` subprocess finds the same
tokens), and initialises the tokens with ``softhsm2-util --init-token --free``. Nothing of
the developer's own SoftHSM2 configuration or tokens is read or touched.

SoftHSM2 reads its slots once, when a process first initialises the module: a token
initialised later is not seen by that process. So every token a test session needs is
made up front, by the session-scoped :func:`softhsm` fixture: ``TOKEN`` for the tests,
``OTHER_TOKEN`` for a test that needs no other store of the process logged in to it (the
wrong PIN: PKCS#11 logs in a whole process, and a process already logged in is not asked
for the PIN again).

Test files import the fixtures they use from here (``from .softhsm import pkcs11_uri,
softhsm``); tests/conftest.py does not register them. Without softhsm2 the tests that
use them skip, except in CI (``CI`` set), where they fail: .ci/run installs it. The
module is Debian's ``/usr/lib/softhsm/libsofthsm2.so`` unless ``LEDGER_SOFTHSM_MODULE``
names another (another distribution's path).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

MODULE = os.environ.get("LEDGER_SOFTHSM_MODULE", "/usr/lib/softhsm/libsofthsm2.so")
TOKEN = "ledger-test"
OTHER_TOKEN = "ledger-test-2"
PIN = "token-pin-qx"  # not hex: a random id in config.toml can never contain it by chance
SO_PIN = "5678"


@dataclass(frozen=True)
class SoftHsm:
    """A SoftHSM2 configuration in a temporary folder and the tokens made in it."""

    conf: Path
    tokendir: Path
    module: str = MODULE

    def init_token(self, label: str, pin: str = PIN, so_pin: str = SO_PIN) -> None:
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", label,
                        "--pin", pin, "--so-pin", so_pin],
                       env={**os.environ, "SOFTHSM2_CONF": str(self.conf)},
                       check=True, capture_output=True, timeout=60)

    def uri(self, obj: str, token: str = TOKEN, pin: str | None = PIN) -> str:
        """The RFC 7512 URI of ``obj`` (the KEKs' label prefix) on ``token``; ``pin=None``
        leaves the PIN out (for pin-source or the environment variable)."""
        query = f"module-path={self.module}" + (f"&pin-value={pin}" if pin is not None else "")
        return f"pkcs11:token={token};object={obj}?{query}"


def missing() -> str | None:
    """What of softhsm2 is missing on this machine, or None."""
    if not Path(MODULE).is_file():
        return f"{MODULE} (Debian's softhsm2)"
    if shutil.which("softhsm2-util") is None:
        return "softhsm2-util (Debian's softhsm2)"
    return None


def require_softhsm() -> None:
    """Skip the test when softhsm2 is not installed, except in CI, where it fails."""
    gone = missing()
    if gone is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"softhsm2 is required in CI (.ci/run installs it): {gone} is missing")
    pytest.skip(f"softhsm2 is not installed here: {gone} is missing")


def make_softhsm(folder: Path, labels: tuple[str, ...] = (TOKEN, OTHER_TOKEN)) -> SoftHsm:
    """A SoftHSM2 configuration in ``folder`` with the tokens ``labels``, made current for
    this process and its future children through ``SOFTHSM2_CONF``."""
    tokendir = folder / "tokens"
    tokendir.mkdir(parents=True, exist_ok=True)
    conf = folder / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokendir}\n"
                    "objectstore.backend = file\n"
                    "log.level = ERROR\n"
                    "slots.removable = false\n", encoding="utf-8")
    hsm = SoftHsm(conf, tokendir)
    for label in labels:
        hsm.init_token(label)
    os.environ["SOFTHSM2_CONF"] = str(conf)
    return hsm


@pytest.fixture(scope="session")
def softhsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftHsm]:
    """One SoftHSM2 configuration and its tokens for the whole session (per xdist worker).
    ``SOFTHSM2_CONF`` is put back as it was at the end."""
    require_softhsm()
    before = os.environ.get("SOFTHSM2_CONF")
    yield make_softhsm(tmp_path_factory.mktemp("softhsm"))
    if before is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = before


@pytest.fixture
def pkcs11_uri(softhsm: SoftHsm) -> str:
    """A URI on the session's token with an object prefix of this test's own, so that the
    epochs one test makes are never seen by another."""
    return softhsm.uri(f"kek-{uuid.uuid4().hex[:12]}")

"""The webhook sender of a server process (ADR 0055): a thread that, every
``LEDGER_WEBHOOK_INTERVAL`` seconds (default 1), catches the webhook feed up with the log,
queues deliveries and attempts those that are due (``service/webhooks.py``).

It runs in every process of ``ledger serve`` (idle, one query every 2 seconds, until the
ledger has a subscription), started and stopped by the app's lifespan;
processes share the outbox in the event store's database and lease each delivery before
sending it, so a delivery is attempted by one process at a time. It opens its own ledger
(the write side only for reading the log and the keystore) on its own thread, and logs ids,
counts and error classes: never a URL, a secret or a body.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import structlog

from ledger.home import Config
from service.webhooks import DeliveryPolicy, WebhookService
from stores.webhooks import SubscriptionProbe

log = structlog.get_logger("ledger.server")

__all__ = ["WebhookSender", "webhook_lifespan"]

IDLE_CHECK = 2.0
"""Seconds between two looks for a first subscription (the ledger is not opened before)."""


class WebhookSender(threading.Thread):
    """The sender's thread; :meth:`stop` ends it after the pass under way."""

    def __init__(self, home: Path, policy: DeliveryPolicy) -> None:
        super().__init__(name="ledger-webhooks", daemon=True)
        self.home = home
        self.policy = policy
        self._halt = threading.Event()
        self.passes = 0

    def stop(self, timeout: float | None = None) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        hooks: WebhookService | None = None
        probe: SubscriptionProbe | None = None
        try:
            while not self._halt.is_set():
                try:
                    if hooks is None:
                        if probe is None:
                            probe = SubscriptionProbe(Config.load(self.home))
                        if not probe.any():
                            self._halt.wait(max(self.policy.interval, IDLE_CHECK))
                            continue
                        hooks = WebhookService.open(self.home, self.policy)
                    report = hooks.pump()
                    self.passes += 1
                    if report.attempted or report.fanned_out:
                        log.info("webhooks.pass", **report.as_json())
                except Exception as e:  # the sender outlives a bad pass
                    log.error("webhooks.pass_failed", error=e.__class__.__name__)
                    if hooks is not None:
                        hooks.close()
                        hooks = None
                self._halt.wait(self.policy.interval)
        finally:
            if hooks is not None:
                hooks.close()
            if probe is not None:
                probe.close()


def webhook_lifespan(home: Path) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:
    """A lifespan for ``build_api``'s list: the sender runs while the server does."""

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        import asyncio

        sender = WebhookSender(home, DeliveryPolicy.from_env())
        sender.start()
        try:
            yield
        finally:
            await asyncio.to_thread(sender.stop, sender.policy.timeout + 5.0)

    return lifespan

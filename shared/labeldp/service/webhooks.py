"""Signed webhooks: the features party tells its own systems that a release arrived (issue 26).

An event is one JSON body POSTed to ``LABELDP_INBOX_WEBHOOK_URL``, signed with HMAC-SHA256 under
``LABELDP_INBOX_WEBHOOK_SECRET`` over ``<timestamp>.<body>`` (the timestamp in its own header, so a
receiver can refuse a replayed old delivery): headers :data:`SIGNATURE_HEADER` (``v1=<hex>``),
:data:`TIMESTAMP_HEADER` (Unix seconds) and :data:`ID_HEADER` (the event's id, the same on every
retry: a receiver deduplicates on it). :func:`verify_webhook` is what a receiver runs.

:class:`WebhookSender` never blocks the inbox: :meth:`WebhookSender.send` only puts the event on a
bounded in-memory queue (a full queue drops it, with a warning), and one background thread posts
the events in order, retrying a failed attempt (no answer, a timeout, any status but 2xx) with
jittered exponential backoff up to a number of attempts. Nothing of an answer is read but its
status, and nothing goes to the labels party: the URL is the publisher's own system. Delivery is at
most once across a restart (the queue is memory): the inbox's list and event stream stay the record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

log = logging.getLogger("labeldp.webhooks")

SIGNATURE_HEADER = "X-Labeldp-Webhook-Signature"
TIMESTAMP_HEADER = "X-Labeldp-Webhook-Timestamp"
ID_HEADER = "X-Labeldp-Webhook-Id"
SIGNATURE_VERSION = "v1"
TOLERANCE_SECONDS = 300


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under ``secret``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify_webhook(
    secret: str, body: bytes, headers: Mapping[str, str], tolerance: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """A receiver's check: the signature header matches the body and timestamp under ``secret``,
    and the timestamp is within ``tolerance`` seconds of ``now`` (constant-time comparison)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower(), "")
    given = lowered.get(SIGNATURE_HEADER.lower(), "")
    if not timestamp.isdigit() or not given:
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(given.encode(), webhook_signature(secret, timestamp, body).encode())


class WebhookSender:
    """A background sender of signed events to one URL (see the module's docstring)."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout: float = 5.0,
        max_attempts: int = 8,
        initial_backoff: float = 1.0,
        max_backoff: float = 60.0,
        queue_max: int = 1000,
    ) -> None:
        self.url = url
        self.secret = secret
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=queue_max)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        self.delivered = 0
        self.dropped = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="labeldp-webhooks", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def send(self, event: dict[str, Any]) -> bool:
        """Queue ``event`` (``{"id", "type", "created_at", "data"}``); never waits. False if dropped."""
        try:
            self.queue.put_nowait(event)
            return True
        except queue.Full:
            self.dropped += 1
            log.warning("webhook event %s dropped: %d events wait already", event.get("id"), self.queue.maxsize)
            return False

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
            while not self._stop.is_set():
                try:
                    event = self.queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                self._deliver(client, event)

    def _deliver(self, client: httpx.Client, event: dict[str, Any]) -> None:
        body = json.dumps(event, separators=(",", ":"), sort_keys=True).encode()
        for attempt in range(1, self.max_attempts + 1):
            timestamp = str(int(time.time()))
            headers = {
                "content-type": "application/json",
                ID_HEADER: str(event.get("id", "")),
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: webhook_signature(self.secret, timestamp, body),
            }
            outcome: str
            try:
                status = client.post(self.url, content=body, headers=headers).status_code
                outcome = f"status {status // 100}xx"
                if 200 <= status < 300:
                    self.delivered += 1
                    return
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__  # never the receiver's text
            if attempt == self.max_attempts:
                break
            wait = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1)) * (0.5 + self._rng.random() / 2)
            log.warning("webhook event %s attempt %d failed (%s); retrying in %.1f s", event.get("id"), attempt,
                        outcome, wait)
            if self._stop.wait(wait):
                return
        log.error("webhook event %s given up after %d attempts", event.get("id"), self.max_attempts)

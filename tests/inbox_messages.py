"""Release messages as the labels party writes them (a manifest and its shards), and their
delivery to an inbox the way the outbox drives it: manifest, the missing shards, complete."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from tests.local_settings import TRANSPORT_AUTH

from labeldp.message_shards import MessageLimits, write_message
from labeldp.schema import SIGNATURE_HEADER, ReleaseMetadata
from labeldp.signing import sign
from labeldp.storage import ObjectStore

LIMITS = MessageLimits(shard_rows=1_000_000, max_shard_bytes=1 << 30, max_manifest_bytes=1 << 20)


@dataclass
class Message:
    manifest: bytes
    shards: list[bytes]

    def with_manifest(self, **changes: Any) -> Message:
        """The same shards under a manifest with top-level fields changed (not re-signed by itself)."""
        body = json.loads(self.manifest)
        body.update(changes)
        return Message(json.dumps(body).encode(), self.shards)


def write(metadata: ReleaseMetadata, ids: list[str], labels: np.ndarray, shard_rows: int = 1_000_000) -> Message:
    """The message of ``metadata`` over these columns, exactly as the labels party writes it."""
    with tempfile.TemporaryDirectory() as folder:
        store = ObjectStore.from_url(folder)
        limits = MessageLimits(shard_rows, LIMITS.max_shard_bytes, LIMITS.max_manifest_bytes)
        written = write_message(store, "m", metadata, ids, np.asarray(labels, dtype=np.float64), limits)
        return Message(store.get_bytes(written.manifest_key), [store.get_bytes(k) for k in written.keys[:-1]])


@dataclass
class Delivered:
    """A delivery that got through: the manifest's status (201 new, 200 known) and the last answer."""

    status_code: int
    answer: dict[str, Any]
    requests: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return self.answer


def deliver(
    client: Any, message: Message | bytes, secret: str | None, signature: str | None = None
) -> Delivered | httpx.Response:
    """Deliver ``message`` to the inbox behind ``client`` (a TestClient or an httpx.Client at the
    features party); the first refusal is returned as it came, a complete delivery as :class:`Delivered`."""
    raw = message if isinstance(message, bytes) else message.manifest
    headers = {"content-type": "application/json", **TRANSPORT_AUTH}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    elif secret is not None:
        headers[SIGNATURE_HEADER] = sign(raw, secret)
    first = client.post("/v1/releases", content=raw, headers=headers)
    requests = ["manifest"]
    if first.status_code not in (200, 201) or isinstance(message, bytes):
        return first
    answer = first.json()
    if answer["status"] == "complete":
        return Delivered(first.status_code, answer, requests)
    release_id = answer["id"]
    for index in answer["missing"]:
        r = client.put(f"/v1/releases/{release_id}/shards/{index}", content=message.shards[index],
                       headers=TRANSPORT_AUTH)
        requests.append(f"shard {index}")
        if r.status_code != 200:
            return r
    done = client.post(f"/v1/releases/{release_id}/complete", headers=TRANSPORT_AUTH)
    requests.append("complete")
    if done.status_code != 200:
        return done
    return Delivered(first.status_code, done.json(), requests)

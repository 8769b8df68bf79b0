"""All configuration in one pydantic-settings class, read from ``LABELDP_*`` variables.

Both services and the sender read the same class; each uses the fields it needs.
Defaults are the embedded ones of ``make demo``: SQLite files in ./var, loopback.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from labeldp.message_shards import SHARD_OVERHEAD_BYTES, MessageLimits
from labeldp.signing import (
    PRIVATE_PREFIX,
    SigningKeyError,
    load_private_key,
    load_public_keys,
    public_key_of,
    secrets_of,
)
from labeldp.storage import ObjectStore

DEV_SIGNING_KEY = "ed25519-sk:" + base64.urlsafe_b64encode(
    hashlib.sha256(b"labeldp development signing key: public to everyone, never deployed").digest()
).decode().rstrip("=")
"""The built-in development key pair (``labeldp serve`` on a laptop): everyone can sign with it, so
a service refuses it unless ``LABELDP_ALLOW_DEV_SECRETS``; ``make demo`` generates its own pair."""
DEV_PUBLIC_KEY = public_key_of(DEV_SIGNING_KEY)
DEV_TRANSPORT_KEY = "dev-inbox-transport-key"
DEV_SECRETS = frozenset({"dev-labels-key", "dev-features-key", DEV_TRANSPORT_KEY, DEV_SIGNING_KEY, DEV_PUBLIC_KEY})
MIN_SECRET_LENGTH = 16
SECRET_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class InsecureSettings(ValueError):
    """A key or secret left empty or at a development value: the service refuses to start."""


SCOPES = ("admin", "release")
"""What a labels-API key may do: ``admin`` creates and changes privacy domains and reads the audit
log; ``release`` creates label sets, uploads labels and releases them. A key may hold both."""

_SCOPE_PREFIX = re.compile(r"^([a-z]+(?:\+[a-z]+)*):(.+)$")


@dataclass(frozen=True)
class ApiKey:
    """One configured API key and its scopes."""

    key: str
    scopes: frozenset[str]

    @property
    def key_id(self) -> str:
        """A name for the key in the audit log: not the key, and not reversible to it."""
        return "key_" + hashlib.sha256(self.key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def parse_api_keys(setting: str) -> list[ApiKey]:
    """The keys of an API-key setting: comma-separated entries ``[scope[+scope]:]key``.

    ``admin:K`` may change privacy domains, ``release:K`` may upload and release,
    ``admin+release:K`` both. A plain ``K`` (the format before scopes) is a ``release`` key:
    it keeps uploading and releasing and can no longer create a privacy domain. An entry whose
    prefix looks like scopes but names an unknown one is refused (a typo must not widen or
    drop rights silently).
    """
    out = []
    for entry in secrets_of(setting):
        match = _SCOPE_PREFIX.match(entry)
        if match is None:
            out.append(ApiKey(entry, frozenset({"release"})))
            continue
        scopes = frozenset(match.group(1).split("+"))
        if unknown := sorted(scopes - set(SCOPES)):
            raise InsecureSettings(
                f"unknown API key scope {unknown[0]!r}: an entry is [scope[+scope]:]key with scopes {', '.join(SCOPES)}"
            )
        out.append(ApiKey(match.group(2).strip(), scopes))
    return out



class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LABELDP_", extra="ignore")

    # --- labels party -------------------------------------------------------
    labels_database_url: str = Field(
        "sqlite:///var/labels.db", description="SQLAlchemy URL of the labels-party ledger"
    )
    labels_api_key: str = Field(
        "admin+release:dev-labels-key",
        description="bearer keys of the advertiser API, comma-separated entries [scope[+scope]:]key: scope admin "
        "creates privacy domains and reads the audit log, release uploads and releases (a plain key is release)",
    )
    labels_data_dir: Path = Field(
        Path("var/labels-data"),
        description="this process's own folder: request spools and the outbox's metric files; also the object "
        "store of ids, labels, messages and the ledger's buckets unless LABELDP_STORAGE_URL names one",
    )
    scratch_dir: str = Field(
        "",
        description="labels party: local folder of a request's working files (an upload's sort runs and bucket "
        "groups, a release's id groups), one subfolder per request, removed when it ends; never shared, never "
        "durable. Empty: <labels data dir>/scratch",
    )
    default_domain_epsilon: float = Field(
        10.0, gt=0, le=1000, description="per-id ε budget of the 'default' privacy domain, created on first use"
    )
    default_domain_delta: float = Field(
        1e-5, ge=0, le=0.5, description="per-id δ budget of the 'default' privacy domain"
    )
    upload_sources: str = Field(
        "",
        description="comma-separated URL prefixes (s3://bucket/folder/, file:///folder/) the labels API may read "
        "ids and labels from when a client uploads by reference; empty: uploads by reference are refused "
        "(422 upload_source_not_allowed). s3:// sources use the object store's S3 endpoint and keys",
    )
    upload_part_max_bytes: int = Field(
        64 * 1024 * 1024, gt=0,
        description="largest part of a resumable upload (each part is one object in the object store)",
    )
    upload_max_parts: int = Field(
        10_000, ge=1, le=100_000, description="most parts one resumable upload may have"
    )
    upload_retention_seconds: float = Field(
        7 * 24 * 3600.0, gt=0,
        description="a resumable upload started longer ago than this is removed with its parts (completed or "
        "not) by the start-up sweep",
    )
    features_url: str = Field(
        "http://127.0.0.1:8002", description="base URL of the features party (outbox target)"
    )
    outbox_poll_seconds: float = Field(0.5, description="how often the sender looks for work")
    outbox_initial_backoff_seconds: float = Field(0.5, description="first retry delay")
    outbox_max_backoff_seconds: float = Field(30.0, description="retry delay cap")
    outbox_timeout_seconds: float = Field(30.0, description="HTTP timeout of one delivery")
    outbox_tls_ca_file: str = Field(
        "",
        description="outbox: PEM file of the CA(s) that signed the features party's server certificate, for an "
        "https:// LABELDP_FEATURES_URL (empty: the system's trusted CAs)",
    )
    outbox_tls_certfile: str = Field(
        "",
        description="outbox: PEM client certificate it presents to the features inbox (mutual TLS; empty: none)",
    )
    outbox_tls_keyfile: str = Field(
        "", description="outbox: PEM private key of outbox_tls_certfile (empty: the key is in the certificate file)"
    )
    release_in_process_worker: bool = Field(
        True,
        description="the labels API also runs a release worker in its own process (the embedded default of make "
        "demo: SQLite and a local folder); deployments set it off and run `labeldp worker labels` processes",
    )
    release_lease_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="how long a release worker's claim on a release job lasts unless renewed (it renews every third "
        "of it); a job whose lease expired is run again from the start by another worker, nothing charged twice",
    )
    release_max_attempts: int = Field(
        3, ge=1, le=100,
        description="claims of one release job whose worker died before it is failed (worker_lost, nothing charged)",
    )
    release_poll_seconds: float = Field(
        1.0, gt=0, le=60, description="how often an idle release worker looks for queued jobs and expired leases"
    )
    message_retention_seconds: float = Field(
        7 * 24 * 3600.0, ge=0,
        description="how long the message object of a delivered release is kept; then a release worker's sweep "
        "removes it (the release row, its digest and accounting stay)",
    )

    ledger_grace_seconds: float = Field(
        3600.0, gt=0,
        description="how long a ledger object a bucket's compare-and-swap superseded is kept before the sweep "
        "deletes it: longer than any lease (a release or request that read the old version still reads it)",
    )

    # --- features party -----------------------------------------------------
    features_database_url: str = Field(
        "sqlite:///var/features.db", description="SQLAlchemy URL of the features-party store"
    )
    features_api_key: str = Field("dev-features-key", description="bearer key of the publisher API")
    features_data_dir: Path = Field(Path("var/features-data"), description="feature tables, models")
    device: str = Field("auto", description="training device: auto, cpu or cuda")
    training_threads: int = Field(0, description="torch CPU threads (0 = torch default)")
    training_queue_max: int = Field(
        32,
        ge=1,
        le=100_000,
        description="trainings that may wait in the queue (the running one not counted); more get 429 "
        "training_queue_full with Retry-After and create nothing",
    )
    # Decided in docs/decisions/0033-training-join-check-rows.md.
    training_join_check_rows: int = Field(
        1_000_000,
        ge=0,
        description="POST /v1/trainings checks that the feature table holds every id of a release of at most this "
        "many rows (422 unknown_ids, nothing queued); a larger release is queued unread and its training fails "
        "with unknown_ids when its stage finds an id without a feature row",
    )
    training_workers: int = Field(
        1, ge=1, le=1024, description="processes per training: 1 trains in-process, N > 1 runs a torchrun job of N"
    )
    training_streaming: bool = Field(
        False, description="stream a training (regression or classification) from Parquet row groups even with one "
        "worker"
    )
    training_stream_above_rows: int = Field(
        1_000_000, ge=0, description="a training streams (staged Parquet row groups, never its release or feature "
        "table whole in memory) when its release or its feature table holds more rows than this "
        "(docs/decisions/0036-stream-above-rows.md); LABELDP_TRAINING_STREAMING streams every training"
    )
    torchrun_rdzv_endpoint: str = Field(
        "", description="host:port of the c10d rendezvous of a training across hosts (empty: one host, torchrun "
        "--standalone); each peer host runs `python -m labeldp.learning.distributed host DIR`"
    )
    torchrun_peer_dirs: str = Field(
        "", description="comma-separated: each peer host's own working folder, where this launcher delivers that "
        "host's job file and data shards (with the rendezvous endpoint: --nnodes is 1 + their number)"
    )
    torchrun_peer_names: str = Field(
        "", description="comma-separated names of the peer hosts of a training across hosts, reached through the "
        "object store (LABELDP_STORAGE_URL) instead of folders: each runs `labeldp torchrun-host NAME DIR`, takes "
        "its job from the store and reads its own data shards there (no shared filesystem); overrides "
        "torchrun_peer_dirs"
    )
    torchrun_local_addr: str = Field("", description="this host's address as the peer hosts reach it (default: "
                                     "its hostname)")
    training_row_group_rows: int = Field(65_536, ge=1, description="rows per staged row group (streaming)")
    training_buffer_row_groups: int = Field(
        4, ge=1, description="row groups a streaming worker holds at a time (its memory bound)"
    )
    training_join_partition_rows: int = Field(
        1 << 18, ge=1024, description="rows per id-hash partition of the staging join (streaming): what it holds"
    )
    training_in_process_worker: bool = Field(
        True,
        description="the features API also runs a training worker in its own process (the embedded default of "
        "make demo); deployments set it off and run `labeldp worker features` processes instead",
    )
    training_lease_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="how long a worker's claim on a training lasts unless renewed (it renews every third of it); "
        "a training whose lease expired is re-queued for another worker, which resumes it from its checkpoint",
    )
    training_max_attempts: int = Field(
        3, ge=1, le=100, description="claims of one training whose worker died before it is failed (worker_lost)"
    )
    training_poll_seconds: float = Field(
        1.0, gt=0, le=60, description="how often an idle worker looks for queued trainings and expired leases"
    )
    training_progress_seconds: float = Field(
        1.0, gt=0, le=60,
        description="how often a running training writes its batch progress to the database and reads a cancel "
        "requested by another process",
    )
    feature_table_max_body_bytes: int = Field(
        64 * 1024**3,
        gt=0,
        description="largest feature-table upload to POST /v1/feature-tables (spooled to disk, converted a batch at "
        "a time); larger bodies get 413",
    )
    feature_sources: str = Field(
        "",
        description="comma-separated URL prefixes (s3://bucket/prefix, file:///folder) under which POST "
        "/v1/feature-tables?source=URL may read a table by reference (with the storage_s3_* credentials); "
        "empty: none, any other URL gets 422 feature_source_not_allowed",
    )
    inbox_webhook_url: str = Field(
        "",
        description="features API: a URL of the publisher's own systems that receives a signed JSON event when a "
        "release arrives in the inbox and when it completes (empty: no webhook; GET /v1/inbox/events streams the "
        "same events)",
    )
    inbox_webhook_secret: str = Field(
        "",
        description="features API: the HMAC-SHA256 key of the webhook's signature (X-Labeldp-Webhook-Signature "
        "over '<timestamp>.<body>'); needed, at least 16 characters, when inbox_webhook_url is set",
    )
    inbox_webhook_timeout_seconds: float = Field(5.0, gt=0, le=120, description="HTTP timeout of one webhook attempt")
    inbox_webhook_max_attempts: int = Field(
        24, ge=1, le=100,
        description="attempts per webhook delivery (no answer or not 2xx: retried with backoff), then it is failed "
        "(GET /v1/inbox/webhook-deliveries; decision 0026)",
    )
    inbox_webhook_initial_backoff_seconds: float = Field(
        5.0, gt=0, description="first webhook retry delay (doubling, jittered; decision 0026)"
    )
    inbox_webhook_max_backoff_seconds: float = Field(3600.0, gt=0, description="webhook retry delay cap")
    inbox_webhook_poll_seconds: float = Field(
        2.0, gt=0, le=300,
        description="how often each features API looks for due webhook deliveries (at once for the events it "
        "received itself)",
    )
    prediction_max_body_bytes: int = Field(
        1024**3,
        gt=0,
        description="largest Parquet upload to POST /v1/models/{model_id}/predictions (spooled to disk, predicted "
        "a batch at a time); larger bodies get 413",
    )

    # --- both ---------------------------------------------------------------
    storage_url: str = Field(
        "",
        description="object store of the service's files (labeldp.storage): a local folder or file:// URL, or "
        "s3://bucket/prefix for any S3-compatible store that replicas share (each party its own: the labels "
        "party's holds raw labels); empty: the service's own data dir (a local folder: one host)",
    )
    storage_s3_endpoint: str = Field(
        "", description="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO; empty: AWS (or AWS_ENDPOINT_URL)"
    )
    storage_s3_region: str = Field("", description="S3 region; empty: the AWS environment's or the SDK default")
    storage_s3_access_key: str = Field("", description="S3 access key id; empty: AWS_ACCESS_KEY_ID and the like")
    storage_s3_secret_key: str = Field("", description="S3 secret key; empty: AWS_SECRET_ACCESS_KEY and the like")
    signing_key: str = Field(
        DEV_SIGNING_KEY,
        description="labels outbox: the advertiser's Ed25519 private key (ed25519-sk:…, from `labeldp keys "
        "generate`) that signs every message; only the labels party holds it",
    )
    signing_public_keys: str = Field(
        DEV_PUBLIC_KEY,
        description="features inbox: the advertiser's Ed25519 public keys it trusts (comma-separated ed25519-pk:…, "
        "selected by the kid in the signature header; list the new key next to the old one to rotate)",
    )
    inbox_max_body_bytes: int = Field(
        256 * 1024**2,
        gt=SHARD_OVERHEAD_BYTES,
        description="largest shard of a release message the inbox accepts (streamed to disk, its digest checked "
        "before parsing); public: the labels party cuts shards to fit and refuses, before charging, a release "
        "it could not send",
    )
    inbox_max_manifest_bytes: int = Field(
        1024**2,
        gt=0,
        le=1024**2,
        description="largest message manifest the inbox accepts (the one database value a release keeps, so at "
        "most 1 MiB); public, checked by the labels party before charging",
    )
    message_shard_rows: int = Field(
        1_000_000,
        ge=1,
        description="rows per shard of a release message (fewer where the ids are long: a shard always fits "
        "inbox_max_body_bytes); the inbox's memory per message is about one shard",
    )
    inbox_transport_key: str = Field(
        DEV_TRANSPORT_KEY,
        description="bearer key the labels outbox presents to the features inbox, a secret both parties hold "
        "(comma-separated while one is rotated out: the outbox sends the first, the inbox accepts any); checked "
        "from the headers before a byte of the body is spooled. The signature, not this key, says who wrote a "
        "message; this key only keeps anonymous clients off the inbox",
    )
    public_max_body_bytes: int = Field(
        1024,
        ge=0,
        description="largest body a route that needs no key (/healthz, /readyz, /metrics, the contract) accepts; "
        "every other route answers 401 from the headers before it reads any of the body",
    )
    inbox_max_concurrent: int = Field(
        2, ge=1, le=64, description="shards the inbox receives at once; more get 503 inbox_busy with Retry-After"
    )
    allow_dev_secrets: bool = Field(
        False,
        description="accept the built-in dev keys and secrets shorter than 16 characters: a laptop only, never a "
        "deployment (every service refuses to start with them otherwise)",
    )
    server_timeout_keep_alive_seconds: int = Field(
        5, ge=1, le=600, description="uvicorn: an idle keep-alive connection is closed after this long"
    )
    server_header_timeout_seconds: float = Field(
        10.0, gt=0, le=600,
        description="a connection that has not sent a whole request head this long after it opened (or after its "
        "last answer) is closed: half-open and slow-header clients hold no socket for long",
    )
    server_max_connections: int = Field(
        1000, ge=1, le=1_000_000,
        description="open connections a server keeps; one more is closed at once (keep it under the file descriptor "
        "limit, `ulimit -n`)",
    )
    # Decided in docs/decisions/0031-listen-backlog.md.
    server_backlog: int = Field(
        2048, ge=1, le=65535,
        description="listen backlog of both APIs: connections the kernel completes and queues until the server "
        "accepts them; past it a SYN is dropped and the client retries after 1, 3, 7 s. A longer queue drops fewer "
        "but makes each queued client wait longer behind a flood. The kernel caps it at net.core.somaxconn",
    )
    # Decided in docs/decisions/0031-listen-backlog.md.
    server_accept_batch: int = Field(
        100, ge=1, le=65535,
        description="connections a server accepts in one turn of its event loop (asyncio's default); a larger "
        "batch lets a flood's fresh connections evict each other, and a real client's, past "
        "server_max_connections before any head is read (keep it well under that cap)",
    )
    server_limit_concurrency: int = Field(
        500, ge=1, le=1_000_000,
        description="requests in progress at once (half-open connections do not count); one more gets 503 "
        "service_unavailable with Retry-After",
    )
    server_tls_certfile: str = Field(
        "",
        description="PEM server certificate (chain): set, the service answers only HTTPS on its port (empty: "
        "plain HTTP, the demo's default; or TLS ends at a proxy in front)",
    )
    server_tls_keyfile: str = Field(
        "", description="PEM private key of server_tls_certfile (empty: the key is in the certificate file)"
    )
    server_tls_client_ca_file: str = Field(
        "",
        description="features inbox, mutual TLS: PEM file of the CA(s) whose client certificates the server "
        "accepts. Set, a client certificate from another CA fails the TLS handshake, and the inbox's routes "
        "(manifest, shard, complete) refuse a connection that presented none (403 client_certificate_required) "
        "before reading a byte; the publisher's own routes still need only their API key",
    )
    server_max_header_bytes: int = Field(
        64 * 1024, ge=4096, le=16 * 1024**2,
        description="uvicorn h11_max_incomplete_event_size: the largest request head (line and headers) buffered",
    )
    request_body_timeout_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="a body must arrive within this long plus its size at LABELDP_REQUEST_BODY_MIN_BYTES_PER_SECOND; "
        "a slower one gets 408 request_timeout (a slow client holds no inbox slot or worker)",
    )
    request_body_min_bytes_per_second: int = Field(
        16 * 1024, ge=1, description="the slowest sustained upload rate accepted past the body timeout's grace"
    )
    min_free_disk_bytes: int = Field(
        256 * 1024**2,
        ge=0,
        description="/readyz answers 503 insufficient_storage while the service's data folder has less free (0: "
        "not checked); a write that finds the disk full answers 507 insufficient_storage and stores nothing",
    )
    max_body_bytes: int = Field(256 * 1024 * 1024, description="largest accepted request body")
    log_level: str = Field("INFO", description="log level of both services")
    sqlite_busy_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=600,
        description="how long a SQLite statement waits for another writer's lock; past it the API answers 503 "
        "database_unavailable and the outbox backs off",
    )
    database_connect_timeout_seconds: float = Field(
        5.0, gt=0, le=120, description="PostgreSQL connect timeout, and the time /readyz gives its SELECT 1"
    )
    database_start_timeout_seconds: float = Field(
        60.0,
        ge=0,
        description="how long an API waits at start for its database (then exits for its supervisor to restart "
        "it); the outbox waits as long as it takes",
    )
    sweep_interval_seconds: float = Field(
        60.0, gt=0, le=86400,
        description="labels API: how often it removes what a crashed or refused request left (unreferenced "
        "message and labels objects and store temporaries older than twice the request lease, spools older than an "
        "hour); features API: how often it removes feature-table objects no row names, older than an hour, and store "
        "temporaries unwritten for twice the longer of the request and training leases",
    )
    idempotency_lease_seconds: float = Field(
        120.0,
        gt=0,
        description="how long a request holding an Idempotency-Key may run before a retry may take the key over "
        "(longer than the slowest release; a process killed mid-request frees its key after this)",
    )


def message_limits(settings: Settings) -> MessageLimits:
    """How the labels party cuts a message, and what the inbox takes: the same public settings."""
    return MessageLimits(
        shard_rows=settings.message_shard_rows,
        max_shard_bytes=settings.inbox_max_body_bytes,
        max_manifest_bytes=settings.inbox_max_manifest_bytes,
    )


def open_object_store(settings: Settings, data_dir: Path) -> ObjectStore:
    """The service's object store: ``storage_url``, or its own ``data_dir`` where that is empty.

    The data dir itself, so the files of a folder written before the store existed keep
    their names (``messages/…``, ``label_sets/…``) and need no migration.
    """
    url = settings.storage_url or str(data_dir)
    return ObjectStore.from_url(
        url,
        endpoint_override=settings.storage_s3_endpoint or None,
        region=settings.storage_s3_region or None,
        access_key=settings.storage_s3_access_key or None,
        secret_key=settings.storage_s3_secret_key or None,
    )


KEY_FIELDS = ("labels_api_key", "features_api_key")
SIGNING_FIELDS = ("signing_key", "signing_public_keys")
MIN_KEY_BITS = 64
"""Least estimated entropy of an API key (:func:`estimated_bits`): a random 16-character
lower-case-and-digit key has about 77, ``Password12345678`` about 53."""

log = logging.getLogger("labeldp.settings")


def estimated_bits(key: str) -> float:
    """A conservative entropy estimate: log2 of the pool of character classes the key uses, per
    character that does not repeat or continue a run (``aaaa``, ``abcd``, ``1234`` count once)."""
    pool = sum(size for test, size in (
        (str.islower, 26), (str.isupper, 26), (str.isdigit, 10), (lambda c: not c.isalnum(), 33),
    ) if any(test(c) for c in key))
    effective = sum(1 for i, c in enumerate(key) if i == 0 or abs(ord(c) - ord(key[i - 1])) > 1)
    return effective * math.log2(max(pool, 2))


def _refuse(env: str, why: str) -> InsecureSettings:
    return InsecureSettings(f"{env} {why}")


def _key_material(settings: Settings, name: str) -> set[str]:
    """Every value a field holds, as a string another field must not reuse (a signing key also as its
    base64 body, so an API key cannot be the private key's bytes either)."""
    values = secrets_of(str(getattr(settings, name)))
    if name in KEY_FIELDS:
        try:
            return {k.key for k in parse_api_keys(str(getattr(settings, name)))}
        except InsecureSettings:
            return set(values)
    return set(values) | {v.split(":", 1)[-1] for v in values}


def require_secrets(settings: Settings, *fields: str) -> None:
    """Refuse to start with keys an attacker could guess, share or forge with (issue 24).

    API keys (``labels_api_key``, ``features_api_key``): not empty, printable ASCII, distinct from
    the other party's keys and from the signing keys; and, unless ``allow_dev_secrets``, no dev or
    ``change-me`` value, at least 16 characters and :data:`MIN_KEY_BITS` of estimated entropy.
    ``signing_key`` must be an Ed25519 private key, ``signing_public_keys`` Ed25519 public keys,
    neither the built-in dev pair unless ``allow_dev_secrets``. Whenever ``allow_dev_secrets`` is
    on, every start logs a warning.
    """
    if settings.allow_dev_secrets:
        log.warning(
            "LABELDP_ALLOW_DEV_SECRETS is on: development keys and weak secrets are accepted; a laptop only, "
            "never a deployment"
        )
    for name in fields:
        env = f"LABELDP_{name.upper()}"
        values = secrets_of(str(getattr(settings, name)))
        if not values:
            raise _refuse(env, f"is empty: set it to a secret, e.g. the output of {SECRET_HINT}")
        if name in SIGNING_FIELDS:
            _check_signing(settings, name, env, values)
            continue
        for key in (k.key for k in parse_api_keys(str(getattr(settings, name)))):
            _check_key(settings, name, env, key)


def require_files(settings: Settings, *fields: str) -> None:
    """Each named path setting that is set must name a readable file: a one-line refusal at start,
    not a traceback from the TLS library."""
    for name in fields:
        value = str(getattr(settings, name))
        if value and not Path(value).is_file():
            raise _refuse(f"LABELDP_{name.upper()}", f"names no file: {value}")


def require_webhook_secret(settings: Settings) -> None:
    """A webhook URL needs a secret to sign with: not empty, printable ASCII, at least 16 characters
    (unless ``allow_dev_secrets``), and none of the API or transport keys."""
    if not settings.inbox_webhook_url:
        return
    secret = settings.inbox_webhook_secret
    env = "LABELDP_INBOX_WEBHOOK_SECRET"
    if not secret.strip():
        raise _refuse(env, f"is empty while LABELDP_INBOX_WEBHOOK_URL is set: set it, e.g. to {SECRET_HINT}")
    if not (secret.isascii() and secret.isprintable()):
        raise _refuse(env, "holds non-ASCII or control characters")
    others = {*secrets_of(settings.features_api_key), *secrets_of(settings.inbox_transport_key)}
    if secret in others:
        raise _refuse(env, "reuses an API or transport key: the webhook's receiver must not learn one")
    if len(secret) < MIN_SECRET_LENGTH and not settings.allow_dev_secrets:
        raise _refuse(env, f"is shorter than {MIN_SECRET_LENGTH} characters: use e.g. {SECRET_HINT}")


def _check_key(settings: Settings, name: str, env: str, key: str) -> None:
    if not (key.isascii() and key.isprintable()) or any(c.isspace() for c in key):
        raise _refuse(env, "holds a key with non-ASCII, blank or control characters: use printable ASCII, e.g. "
                      f"{SECRET_HINT}")
    for other in (*KEY_FIELDS, *SIGNING_FIELDS):
        if other != name and key in _key_material(settings, other):
            raise _refuse(env, f"reuses a value of LABELDP_{other.upper()}: each party's keys and the signing "
                          "keys must be distinct")
    if settings.allow_dev_secrets:
        return
    if key in DEV_SECRETS or key.startswith("change-me") or len(key) < MIN_SECRET_LENGTH:
        raise _refuse(
            env, f"holds a development value or a key shorter than {MIN_SECRET_LENGTH} characters: set it to a "
            f"secret (e.g. {SECRET_HINT}); on a laptop only, LABELDP_ALLOW_DEV_SECRETS=1 accepts it"
        )
    if estimated_bits(key) < MIN_KEY_BITS:
        raise _refuse(env, f"holds a guessable key (under {MIN_KEY_BITS} bits of estimated entropy: repeats, runs "
                      f"or few kinds of character): use a random one, e.g. {SECRET_HINT}")


def _check_signing(settings: Settings, name: str, env: str, values: list[str]) -> None:
    try:
        if name == "signing_key":
            if len(values) != 1 or not values[0].startswith(PRIVATE_PREFIX):
                raise SigningKeyError("one private key")
            load_private_key(values[0])
        else:
            load_public_keys(",".join(values))
    except (SigningKeyError, ValueError):
        what = "one Ed25519 private key (ed25519-sk:…)" if name == "signing_key" else \
            "Ed25519 public keys (ed25519-pk:…, comma-separated)"
        raise _refuse(env, f"must hold {what}: generate a pair with `labeldp keys generate`") from None
    if not settings.allow_dev_secrets and DEV_SECRETS & set(values):
        raise _refuse(env, "holds the built-in development key pair, which anyone can sign with: generate a pair "
                      "with `labeldp keys generate`; on a laptop only, LABELDP_ALLOW_DEV_SECRETS=1 accepts it")

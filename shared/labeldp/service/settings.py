"""All configuration in one pydantic-settings class, read from ``LABELDP_*`` variables.

Both services and the sender read the same class; each uses the fields it needs.
Defaults are the embedded ones of ``make demo``: SQLite files in ./var, loopback.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from labeldp.signing import secrets_of
from labeldp.storage import ObjectStore

DEV_SECRETS = frozenset({"dev-labels-key", "dev-features-key", "dev-exchange-secret"})
MIN_SECRET_LENGTH = 16
SECRET_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class InsecureSettings(ValueError):
    """A key or secret left empty or at a development value: the service refuses to start."""




class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LABELDP_", extra="ignore")

    # --- labels party -------------------------------------------------------
    labels_database_url: str = Field(
        "sqlite:///var/labels.db", description="SQLAlchemy URL of the labels-party ledger"
    )
    labels_api_key: str = Field("dev-labels-key", description="bearer key of the advertiser API")
    labels_data_dir: Path = Field(
        Path("var/labels-data"),
        description="this process's own folder: request spools and the outbox's metric files; also the object "
        "store of ids, labels, messages and the ledger's buckets unless LABELDP_STORAGE_URL names one",
    )
    default_domain_epsilon: float = Field(
        10.0, gt=0, le=1000, description="per-id ε budget of the 'default' privacy domain, created on first use"
    )
    default_domain_delta: float = Field(
        1e-5, ge=0, le=0.5, description="per-id δ budget of the 'default' privacy domain"
    )
    features_url: str = Field(
        "http://127.0.0.1:8002", description="base URL of the features party (outbox target)"
    )
    outbox_poll_seconds: float = Field(0.5, description="how often the sender looks for work")
    outbox_initial_backoff_seconds: float = Field(0.5, description="first retry delay")
    outbox_max_backoff_seconds: float = Field(30.0, description="retry delay cap")
    outbox_timeout_seconds: float = Field(30.0, description="HTTP timeout of one delivery")

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
    training_workers: int = Field(
        1, ge=1, le=1024, description="processes per training: 1 trains in-process, N > 1 runs a torchrun job of N"
    )
    training_streaming: bool = Field(
        False, description="stream a training (regression or classification) from Parquet row groups even with one "
        "worker"
    )
    torchrun_rdzv_endpoint: str = Field(
        "", description="host:port of the c10d rendezvous of a training across hosts (empty: one host, torchrun "
        "--standalone); each peer host runs `python -m labeldp.learning.distributed host DIR`"
    )
    torchrun_peer_dirs: str = Field(
        "", description="comma-separated: each peer host's own working folder, where this launcher delivers that "
        "host's job file and data shards (with the rendezvous endpoint: --nnodes is 1 + their number)"
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
    exchange_secret: str = Field(
        "dev-exchange-secret", description="HMAC-SHA256 key shared by the two parties"
    )
    inbox_max_body_bytes: int = Field(
        8 * 1024**3,
        gt=0,
        description="largest release message the inbox accepts (streamed to disk and verified before parsing)",
    )
    inbox_transport_key: str = Field(
        "",
        description="bearer key the outbox presents to the inbox (comma-separated while one is rotated out: the "
        "outbox sends the first, the inbox accepts any); checked from the headers before a byte of the body is "
        "spooled. Empty: derived from LABELDP_EXCHANGE_SECRET, which both parties already hold",
    )
    public_max_body_bytes: int = Field(
        1024,
        ge=0,
        description="largest body a route that needs no key (/healthz, /readyz, /metrics, the contract) accepts; "
        "every other route answers 401 from the headers before it reads any of the body",
    )
    inbox_max_concurrent: int = Field(
        2, ge=1, le=64, description="messages the inbox receives at once; more get 503 inbox_busy with Retry-After"
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
    server_limit_concurrency: int = Field(
        500, ge=1, le=1_000_000, description="uvicorn limit_concurrency: past this many requests at once, 503"
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
        "hour)",
    )
    idempotency_lease_seconds: float = Field(
        120.0,
        gt=0,
        description="how long a request holding an Idempotency-Key may run before a retry may take the key over "
        "(longer than the slowest release; a process killed mid-request frees its key after this)",
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


def require_secrets(settings: Settings, *fields: str) -> None:
    """Refuse to start with an empty key, a dev key or a short secret (unless ``allow_dev_secrets``)."""
    for name in fields:
        env = f"LABELDP_{name.upper()}"
        values = secrets_of(str(getattr(settings, name)))
        if not values:
            raise InsecureSettings(f"{env} is empty: set it to a secret, e.g. the output of {SECRET_HINT}")
        if settings.allow_dev_secrets:
            continue
        for value in values:
            if value in DEV_SECRETS or value.startswith("change-me") or len(value) < MIN_SECRET_LENGTH:
                raise InsecureSettings(
                    f"{env} holds a development value or a secret shorter than {MIN_SECRET_LENGTH} characters: set "
                    f"it to a secret (e.g. {SECRET_HINT}); on a laptop only, LABELDP_ALLOW_DEV_SECRETS=1 accepts it"
                )

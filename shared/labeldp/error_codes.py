"""Every top-level error ``code`` either service answers, with what it means: the one list.

A client branches on ``code`` (never on the message); the OpenAPI contract of both services
lists these as the enum of ``ErrorBody.code`` and docs/api-guide.md ("Error codes") shows this
table. ``tests/unit/test_error_codes.py`` reads the source and fails when code raises an error
whose code is missing here, or when a code here is raised nowhere: the list cannot drift.
"""

from __future__ import annotations

ERROR_CODES: dict[str, str] = {
    # 401 / 403: who is calling
    "unauthorized": "no API key, or not one of this service's keys",
    "forbidden": "the key is valid but may not do this",
    "bad_signature": "the inbox could not verify the message's signature: nothing was read",
    # 404: no such resource
    "not_found": "no such path or resource",
    "privacy_domain_not_found": "no privacy domain of that name",
    "label_set_not_found": "no label set with that id",
    "release_not_found": "no release with that id",
    "feature_table_not_found": "no feature table with that id or name",
    "training_not_found": "no training with that id",
    "model_not_found": "no model with that id (or it has no such file)",
    "object_not_found": "a stored object the request names does not exist",
    "file_not_found": "a file the command was given does not exist",
    "method_not_allowed": "the path exists, the method does not (see the Allow header)",
    # 409: the resource's state
    "conflict": "the resource's state forbids this",
    "budget_exhausted": "some ids of the label set have too little ε (or δ) left in their privacy domain",
    "already_delivered": "the release was delivered; it is not sent again",
    "idempotency_in_progress": "a request with this Idempotency-Key is still running: retry after Retry-After",
    "concurrent_upload": "another upload to this label set won: read the label set and retry",
    "ids_already_set": "the label set's ids are fixed once set",
    "ids_missing": "the label set has no ids yet",
    "labels_incomplete": "some ids of the label set have no label yet",
    "labels_deleted": "the label set's labels were deleted",
    "privacy_domain_exists": "a privacy domain of that name exists",
    "feature_table_exists": "a feature table of that name exists",
    "release_conflict": "the inbox holds a different message under this release id",
    "training_finished": "the training is over: it cannot be cancelled",
    "model_unavailable": "the model's training did not produce this file",
    # 413 / 415: the body
    "payload_too_large": "the body exceeds the route's public size limit",
    "unsupported_media_type": "the body's Content-Type is not one this route reads",
    # 422: the request is invalid; nothing changed
    "invalid_request": "the body or a parameter failed validation (see details)",
    "idempotency_key_reused": "this Idempotency-Key was used with a different request",
    "invalid_idempotency_key": "the Idempotency-Key header is not 1–255 visible ASCII characters",
    "invalid_cursor": "the page cursor is not one this service issued",
    "invalid_limit": "the page size is out of range",
    "invalid_name": "a name outside the allowed characters or length",
    "invalid_epsilon": "ε (or δ) is not a positive plain decimal within the allowed range",
    "invalid_domain": "the label range is not a finite LOW < HIGH",
    "invalid_classes": "the class list is empty, repeated or too long",
    "invalid_class_labels": "a label is not one of the release's classes",
    "invalid_ids": "the ids are not valid (empty, too long, not Unicode scalar values, or repeated)",
    "duplicate_ids": "an id appears twice",
    "unknown_ids": "ids that the label set (or the feature table) does not hold",
    "invalid_labels": "a label is missing, not a number, or outside the label range",
    "empty_upload": "the upload holds no row",
    "invalid_csv": "the CSV could not be parsed (UTF-8, one header row, same cells per row)",
    "invalid_json": "the body is not the JSON this route reads",
    "invalid_parquet": "the body is not a readable Parquet file",
    "invalid_arrow": "the body is not a readable Arrow IPC stream",
    "unsupported_column_type": "a column's type is nested or otherwise not one this route reads",
    "invalid_column_declaration": "the declared column kinds do not match the table",
    "missing_id_column": "the table has no id column",
    "unknown_column": "a column the request names is not in the table",
    "invalid_table_name": "a feature table name outside the allowed characters or length",
    "unknown_mechanism": "no mechanism of that name in the catalogue",
    "mechanism_not_applicable": "the mechanism does not serve this kind of label set",
    "invalid_parameters": "the mechanism's parameters are invalid",
    "invalid_prior": "the prior is not a distribution over the label range",
    "invalid_message": "the message is not a valid release (schema, payload or digest)",
    "digest_mismatch": "the message's payload does not match its digest",
    "feature_table_required": "the training needs a feature table",
    "unknown_feature_table": "no feature table of that name is held here",
    "learning_unavailable": "the requested learning option does not apply to this release",
    "forward_correction_unavailable": "the release's law does not allow forward correction",
    "label_law_unavailable": "the release's per-row law is not available for this training",
    "invalid_transition_matrix": "the release's transition matrix cannot be inverted",
    "invalid_status": "the status filter is not one of the listed states",
    "validation_required": "this option needs a validation split",
    "invalid_rows": "prediction rows are missing features or hold values the model cannot read",
    "too_many_rows": "more prediction rows than the route accepts in one request",
    "invalid_input": "a prediction input the model cannot read",
    "missing_columns": "prediction rows lack features the model was trained on",
    "invalid_feature_values": "a feature value the model cannot read (NaN, infinite, wrong kind)",
    "invalid_format": "an export format other than onnx or torchscript",
    "model_not_exportable": "the exporter refused the network",
    "model_file_not_found": "the model file a command names does not exist",
    "invalid_model_file": "the file is not a model this version wrote",
    "storage_url_invalid": "the storage URL is not a folder path or s3:// URL",
    # 429 / 503: retry later, nothing changed
    "training_queue_full": "the training queue is full: retry after Retry-After",
    "inbox_busy": "the features party's inbox is busy: the outbox retries",
    "database_unavailable": "the database is locked, down or restarting: retry after Retry-After",
    "service_unavailable": "the service cannot answer now: retry after Retry-After",
    "storage_unavailable": "the object store failed: retry after Retry-After",
    "stored_object_missing": "a stored object the catalogue names is missing (an operator must look)",
    "ledger_contention": "too many concurrent releases touched the same ledger buckets: retry",
    "ledger_not_bucketed": "the domain's ledger is being converted to buckets: retry",
    # 5xx
    "internal_error": "a bug: the request id in the log tells the operator where",
    # a training's failure (Training.error), never an HTTP answer
    "worker_lost": "the training's worker stopped before it finished, too many times",
    "training_failed": "the training raised an error (its class is named)",
}
"""code → what it means, grouped by the status it comes with."""

"""The stage in the object store: written by one process, trained by another with only its own folder.

Against moto's S3 server (tests/s3_server.py): the staging join reads the feature table from
the store and writes partitioned Parquet there; a second process, which shares no folder with
the first, fetches the stage into its own cache and trains it to the first process's model.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.s3_server import S3Server
from tests.training.data import write_table

from labeldp.errors import InvalidInput
from labeldp.learning.config import PLAIN, TrainingConfig
from labeldp.learning.id_partitions import partitions_for
from labeldp.learning.loader import ShardLayout, fetch_own_shards, stage_layout
from labeldp.learning.loop import make_plan
from labeldp.learning.staging import (
    PARTS,
    fetch_stage,
    part_key,
    remove_stage,
    stage_complete,
    stage_meta,
    stage_to_store,
)
from labeldp.learning.streamed import fit_release_streamed, stage_prefix

CONFIG = TrainingConfig(epochs=2, batch_size=64, seed=7, device="cpu", threads=1, row_group_rows=128,
                        join_partition_rows=1024)
TABLE, INPUTS, STAGE_KEY = "tables/f.parquet", "inputs.npz", "stages/trn_a"

SECOND_PROCESS = textwrap.dedent("""
    import io, json, sys
    from pathlib import Path
    import numpy as np, pyarrow as pa
    from labeldp.learning.config import PLAIN, TrainingConfig
    from labeldp.learning.streamed import fit_release_streamed
    from labeldp.service.settings import Settings, open_object_store

    settings = Settings()
    objects = open_object_store(settings, Path("data"))
    config = TrainingConfig(**json.loads(sys.argv[1]))
    with np.load(io.BytesIO(objects.get_bytes("inputs.npz"))) as data:
        ids, labels, x1 = pa.array(data["ids"]), data["labels"], data["x1"]
    # The feature table is gone from the store: only the stage can be trained.
    model = fit_release_streamed("no-such-table.parquet", "id", ids, labels, None, config, Path("work"), PLAIN,
                                 objects=objects, stage_key="stages/trn_a")
    with open("model.bin", "wb") as out:
        model.write(out)
    print("RESULT " + json.dumps({"n_train": model.n_train_}))
""")


def _inputs(tmp_path: Path, n: int = 1500, extra: int = 200) -> tuple[pa.Array, np.ndarray, pa.Table]:
    return write_table(tmp_path / "f.parquet", n, extra=extra)


def test_a_training_staged_by_one_process_is_trained_by_another_with_its_own_folder(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """Process A stages (reading the table from S3) and trains; its work folder is then deleted and the
    table removed from the store. Process B — another interpreter, another working folder, only the
    store's settings — finds the complete stage under the training's key, fetches it into its own cache
    and trains the same model, bit for bit. Planted once: staging again whatever the store held made B
    restage, and it failed on the missing table."""
    url = s3_server.url()
    objects = s3_server.store(url)
    ids, labels, features = _inputs(tmp_path)
    objects.put_file(TABLE, tmp_path / "f.parquet")
    buffer = io.BytesIO()
    np.savez(buffer, ids=np.asarray(ids.to_pylist()), labels=labels, x1=features.column("x1").to_numpy())
    objects.put_bytes(INPUTS, buffer.getvalue())

    with objects.open_input_file(TABLE) as table:
        first = fit_release_streamed(table, "id", ids, labels, None, CONFIG, tmp_path / "a", PLAIN,
                                     objects=objects, stage_key=STAGE_KEY)
    prefix = stage_prefix(STAGE_KEY, CONFIG.seed or 0, CONFIG)
    assert stage_complete(objects, prefix)
    assert (tmp_path / "a" / "stage" / "train.parquet").exists()  # A's cache
    shutil.rmtree(tmp_path / "a")  # a cache: thrown away
    objects.delete(TABLE)

    second = tmp_path / "b"
    second.mkdir()
    env = {**os.environ, **s3_server.env(url), "LABELDP_FEATURES_DATA_DIR": str(second / "data")}
    fields = {"epochs": CONFIG.epochs, "batch_size": CONFIG.batch_size, "seed": CONFIG.seed, "device": "cpu",
              "threads": 1, "row_group_rows": CONFIG.row_group_rows,
              "join_partition_rows": CONFIG.join_partition_rows}
    done = subprocess.run([sys.executable, "-c", SECOND_PROCESS, json.dumps(fields)], cwd=second, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["n_train"] == first.n_train_
    from labeldp.learning.persistence import load_model

    trained = load_model(second / "model.bin")
    assert np.array_equal(trained.predict(features), first.predict(features))
    assert not (tmp_path / "a").exists()  # nothing of A's folder was there for B


def test_the_join_holds_one_partition_at_a_time_and_writes_each_as_its_own_objects(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """The staging join's record of what it held: every partition about ``partition_rows`` rows of the
    feature table and of the release, none the whole table; each partition's rows are their own Parquet
    objects. Planted once: a join that ignored ``partition_rows`` (one partition) held all 3,411 feature
    rows at once and this test failed."""
    n, extra, partition_rows = 3000, 411, 256
    ids, labels, _ = write_table(tmp_path / "f.parquet", n, extra=extra)
    objects = s3_server.store()
    plan = make_plan(n, CONFIG)
    is_val = np.zeros(n, bool)
    is_val[plan.val_idx] = True
    meta = stage_to_store(tmp_path / "f.parquet", "id", ids, labels, labels, is_val, objects, "stage",
                          tmp_path / "join", 64, partition_rows)
    assert meta == stage_meta(objects, "stage")
    parts = meta["partitions"]
    k = partitions_for(n + extra, partition_rows)
    assert k > 10 and len(parts) == k
    held = np.array([p["feature_rows"] for p in parts])
    assert held.sum() == n + extra and sum(p["release_rows"] for p in parts) == n
    assert held.max() <= 1.5 * (n + extra) / k  # one partition, never the table
    assert max(p["release_rows"] for p in parts) <= 1.5 * n / k
    assert sum(p["train"] for p in parts) == meta["n_train"] == n - is_val.sum()
    expected = {part_key("stage", flag, i) for i, p in enumerate(parts) for flag in (False, True) if p[PARTS[flag]]}
    assert set(objects.list("stage")) == expected | {"stage/val.npz", "stage/staged.json"}
    assert not (tmp_path / "join").exists()  # the local partition files are gone
    staged = fetch_stage(objects, "stage", tmp_path / "cache")
    assert staged.n_train == meta["n_train"] and len(staged.val_labels) == is_val.sum()
    assert remove_stage(objects, "stage") == len(expected) + 2 and objects.list("stage") == []


def test_each_rank_reads_its_own_shard_straight_from_the_stage_as_the_home_cache_deals_it(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """A rank on another host (its own folder, only the store and the stage's prefix) reads exactly the
    rows the home host's ``train.parquet`` deals to its data shard, in the same row groups, and the
    layout every rank cuts steps from. Stage of ~40 partitions (their last row groups short), 3 shards.
    Planted once: dealing the stage's row groups from the second (``groups[s + 1::shards]``) gave
    shard 0 shard 1's rows and this test failed."""
    n, shards = 3000, 3
    ids, labels, _ = write_table(tmp_path / "f.parquet", n, extra=411)
    objects = s3_server.store()
    is_val = np.random.default_rng(3).random(n) < 0.1
    stage_to_store(tmp_path / "f.parquet", "id", ids, labels, labels, is_val, objects, "stages/trn_r/s1",
                   tmp_path / "join", 64, 80)
    home = fetch_stage(objects, "stages/trn_r/s1", tmp_path / "home")
    assert home.store_prefix == "stages/trn_r/s1"
    dealt = ShardLayout.of_file(home.train_path, shards)
    source = pq.ParquetFile(home.train_path)
    for s in range(shards):
        rank = fetch_own_shards(objects, "stages/trn_r/s1", [s], shards, tmp_path / f"rank-{s}")
        layout = stage_layout(rank.directory, shards)
        assert layout.rows == dealt.rows and list(layout.sources) == [s]  # only its own shard is here
        mine = pq.ParquetFile(layout.sources[s].path)
        assert mine.read().equals(source.read_row_groups(list(dealt.sources[s].groups)))
        assert [mine.metadata.row_group(i).num_rows for i in range(mine.num_row_groups)] == [
            source.metadata.row_group(g).num_rows for g in dealt.sources[s].groups]
        assert rank.preprocessor == home.preprocessor and len(rank.val_labels) == 0
        assert not (tmp_path / f"rank-{s}" / "validation.parquet").exists()  # the lead alone evaluates


def test_a_failed_stage_leaves_no_object_and_a_finished_training_removes_its_stage(
    tmp_path: Path, s3_server: S3Server
) -> None:
    from features_party import checkpoints

    objects = s3_server.store()
    ids, labels, _ = write_table(tmp_path / "f.parquet", 400)
    nobody = pa.array([f"nobody{i}" for i in range(7)])
    missing = pa.concat_arrays([ids, nobody])
    with pytest.raises(InvalidInput) as refused:  # the ids on several partitions: every one of them counted
        stage_to_store(tmp_path / "f.parquet", "id", missing, np.append(labels, [0.0] * 7),
                       np.append(labels, [0.0] * 7), np.zeros(407, bool), objects, "stages/trn_x/s1", tmp_path / "j",
                       64, 128)
    assert refused.value.code == "unknown_ids" and refused.value.details[0]["count"] == 7
    assert set(refused.value.details[0]["examples"]) < set(nobody.to_pylist())
    assert len(refused.value.details[0]["examples"]) == 5
    assert objects.list("stages") == []
    stage_to_store(tmp_path / "f.parquet", "id", ids, labels, labels, np.zeros(400, bool), objects,
                   f"{checkpoints.stage_key('trn_y')}/s1", tmp_path / "j", 64, 1024)
    assert checkpoints.stored(objects) == ["trn_y"]  # the sweep sees it
    checkpoints.remove(objects, "trn_y")
    assert objects.list("stages") == []

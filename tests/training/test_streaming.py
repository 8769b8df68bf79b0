"""Streaming training: the staged join, the row-group loader's bounds and shards, the streamed fit."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from tests.training.data import write_table

from labeldp.errors import InvalidInput
from labeldp.learning.config import PLAIN, TrainingConfig
from labeldp.learning.loader import RowGroupLoader
from labeldp.learning.loop import make_plan
from labeldp.learning.preprocessing import Preprocessor, PreprocessorBuilder
from labeldp.learning.regression import fit_regressor
from labeldp.learning.staging import TARGET, StagedRelease, stage_release
from labeldp.learning.streamed import fit_release_streamed


def stage(
    tmp_path: Path, n: int = 1000, rows: int = 64, extra: int = 0
) -> tuple[StagedRelease, np.ndarray, np.ndarray]:
    ids, y, _ = write_table(tmp_path / "f.parquet", n, extra=extra)
    plan = make_plan(n, TrainingConfig(seed=5, device="cpu"))
    is_val = np.zeros(n, bool)
    is_val[plan.val_idx] = True
    staged = stage_release(tmp_path / "f.parquet", "id", ids, y, y * 2, is_val, tmp_path / "stage", rows)
    return staged, y, is_val


def test_builder_fits_what_the_whole_table_fits() -> None:
    rng = np.random.default_rng(1)
    table = pa.table({"x": rng.normal(3, 2, 5000), "g": pa.array(rng.choice(["p", "q", "r", None], 5000))})
    builder = PreprocessorBuilder()
    for batch in table.to_batches(max_chunksize=333):
        builder.update(pa.Table.from_batches([batch]))
    streamed, whole = builder.build(), Preprocessor.fit(table)
    assert streamed.vocabularies == whole.vocabularies and streamed.numeric_columns == whole.numeric_columns
    assert streamed.means == pytest.approx(whole.means, rel=1e-12)
    assert streamed.stds == pytest.approx(whole.stds, rel=1e-12)


def test_stage_joins_by_id_and_keeps_validation_rows_out_of_training(tmp_path: Path) -> None:
    """Every staged row carries its own id's target; the validation rows of the plan are exactly
    the validation file and never a training row (planted once: writing validation rows into
    train.parquet as well made the disjointness assertion fail)."""
    staged, y, is_val = stage(tmp_path, n=1000, rows=64, extra=137)
    train = pq.read_table(staged.train_path)
    val = pq.read_table(staged.validation_path)
    for part, flag in ((train, False), (val, True)):
        key = part.column("key").to_numpy().astype(np.int64)
        assert np.all(key < 1000)  # rows of no release are skipped
        assert np.array_equal(part.column(TARGET).to_numpy(), y[key] * 2)
        assert np.all(is_val[key] == flag)
    train_keys = set(train.column("key").to_numpy().astype(int))
    val_keys = set(val.column("key").to_numpy().astype(int))
    assert not train_keys & val_keys and len(train_keys | val_keys) == 1000
    assert staged.n_train == train.num_rows == 900 and staged.n_validation == 100
    assert np.array_equal(staged.val_labels, y[val.column("key").to_numpy().astype(int)])
    groups = pq.ParquetFile(staged.train_path).metadata
    assert all(groups.row_group(i).num_rows == 64 for i in range(groups.num_row_groups - 1))
    reopened = StagedRelease.open(staged.directory)
    assert reopened.preprocessor == staged.preprocessor and reopened.target_mean == staged.target_mean
    whole = Preprocessor.fit(train.drop_columns([TARGET]))
    assert reopened.preprocessor.means == pytest.approx(whole.means, rel=1e-12)


def test_stage_refuses_a_release_id_without_features(tmp_path: Path) -> None:
    ids, y, _ = write_table(tmp_path / "f.parquet", 50)
    ids = pa.concat_arrays([ids, pa.array(["nobody"])])
    y = np.append(y, 0.0)
    with pytest.raises(InvalidInput) as refused:  # a count and the id (public), never a label
        stage_release(tmp_path / "f.parquet", "id", ids, y, y, np.zeros(51, bool), tmp_path / "s")
    assert (refused.value.code, refused.value.details) == ("unknown_ids", [{"count": 1, "examples": ["nobody"]}])
    twice = pa.concat_arrays([ids[:50], ids[:1]])
    with pytest.raises(ValueError, match="once"):
        stage_release(tmp_path / "f.parquet", "id", twice, y, y, np.zeros(51, bool), tmp_path / "s2")


def _in_memory_join(
    path: Path, ids: pa.Array, targets: np.ndarray, is_val: np.ndarray, partitions: int
) -> tuple[dict[bool, pa.Table], np.ndarray]:
    """The reference: the whole table read at once, each row looked up in the release's ids, rows in
    id-hash partition order and within a partition in feature-table order; (train and validation
    rows, the release positions of the validation rows)."""
    from labeldp.learning.id_partitions import id_hash

    table = pq.read_table(path)
    found = pc.index_in(table.column("id"), value_set=ids)
    keep = pc.is_valid(found)
    order = np.argsort(id_hash(table.column("id").filter(keep)) % np.uint64(partitions), kind="stable")
    rows = table.filter(keep).drop_columns(["id"]).take(pa.array(order))
    positions = pc.filter(found, keep).to_numpy()[order]
    rows = rows.append_column(TARGET, pa.array(targets[positions], pa.float64()))
    split = {flag: rows.filter(pa.array(is_val[positions] == flag)) for flag in (False, True)}
    return split, positions[is_val[positions]]


def test_a_join_split_into_many_partitions_equals_the_in_memory_join(tmp_path: Path) -> None:
    """Cut into ~40 id-hash partitions (and into one), the staged files hold exactly the rows of the
    whole-table join, partition after partition (in feature-table order within each), with the same
    targets, split and validation labels. Planted once: staging a partition's validation labels in
    release-position order rather than row order gave rows other rows' labels and this test failed on "many"."""
    from labeldp.learning.id_partitions import partitions_for

    n, extra = 3000, 411
    ids, y, _ = write_table(tmp_path / "f.parquet", n, extra=extra)
    ids = ids.take(pa.array(np.random.default_rng(4).permutation(n)))  # release order ≠ table order
    y = np.random.default_rng(5).normal(size=n)
    is_val = np.random.default_rng(6).random(n) < 0.1
    for partition_rows, label in ((80, "many"), (10, "past the former cap of 128"), (10**9, "one")):
        k = partitions_for(n + extra, partition_rows)
        assert k > 128 or label != "past the former cap of 128"
        expected, val_positions = _in_memory_join(tmp_path / "f.parquet", ids, y * 3, is_val, k)
        staged = stage_release(tmp_path / "f.parquet", "id", ids, y, y * 3, is_val, tmp_path / label, 128,
                               partition_rows=partition_rows)
        assert pq.read_table(staged.train_path).equals(expected[False]), label
        assert pq.read_table(staged.validation_path).equals(expected[True]), label
        assert np.array_equal(staged.val_labels, y[val_positions]), label
        assert (staged.n_train, staged.n_validation) == (expected[False].num_rows, expected[True].num_rows)
        assert not (tmp_path / label / "join").exists()  # the partition files are gone
        assert not (tmp_path / label / "objects").exists()  # one process: no store copy is kept


def test_partitions_stay_near_their_rows_up_to_half_the_open_files_limit() -> None:
    """At 10^8 rows the join cuts 382 partitions of 2^18 rows (it used to stop at 128, holding 3 times the
    rows per partition); a process allowed few open files gets fewer, larger partitions, never an error."""
    import resource

    from labeldp.learning.id_partitions import partitions_for

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    try:
        assert partitions_for(10**8, 2**18) == 382
        assert partitions_for(10**10, 2**18) == 2048  # half of 4096 open files
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
        assert partitions_for(10**8, 2**18) == 100
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_id_hash_partitions_agree_across_chunkings_and_spread_ids() -> None:
    from labeldp.learning.id_partitions import id_hash

    ids = pa.array([f"user-{i}" for i in range(20_000)] + ["", "é", "a" * 300])
    whole = id_hash(ids)
    sliced = np.concatenate([id_hash(ids.slice(i, 777)) for i in range(0, len(ids), 777)])
    chunked = id_hash(pa.chunked_array([ids.slice(0, 5), ids.slice(5)]))
    assert np.array_equal(whole, sliced) and np.array_equal(whole, chunked)
    counts = np.bincount((whole % np.uint64(16)).astype(np.int64), minlength=16)
    assert counts.min() > 0.9 * len(ids) / 16 and counts.max() < 1.1 * len(ids) / 16  # no skewed partition


def loader(staged: StagedRelease, rank: int = 0, world: int = 1, buffer: int = 2, batch: int = 50) -> RowGroupLoader:
    return RowGroupLoader(
        staged.train_path, staged.preprocessor, batch, target_mean=staged.target_mean,
        target_std=staged.target_std, buffer_row_groups=buffer, seed=3, rank=rank, world=world,
    )


def test_loader_covers_every_row_once_per_epoch_and_holds_at_most_its_buffer(tmp_path: Path) -> None:
    staged, _, _ = stage(tmp_path, n=1000, rows=64)
    one = loader(staged, buffer=2)
    buffers = list(one._buffers(1))
    assert max(len(b[2]) for b in buffers) <= 2 * 64  # memory: row groups, not rows
    seen = np.concatenate([y.numpy() for _, _, y in one.batches(1)])
    expected = (pq.read_table(staged.train_path).column(TARGET).to_numpy() - staged.target_mean) / staged.target_std
    assert np.allclose(np.sort(seen), np.sort(expected.astype(np.float32)))
    assert len(list(one.batches(1))) == one.steps_per_epoch(1) == int(np.ceil(900 / 50))
    first = np.concatenate([y.numpy() for _, _, y in one.batches(1)])
    second = np.concatenate([y.numpy() for _, _, y in one.batches(2)])
    assert np.array_equal(first, seen) and not np.array_equal(first, second)  # seeded, reshuffled per epoch


def test_sharded_loader_gives_each_worker_its_row_groups_and_the_same_number_of_steps(tmp_path: Path) -> None:
    staged, _, _ = stage(tmp_path, n=1000, rows=64)
    workers = [loader(staged, rank=r, world=3) for r in range(3)]
    shards = [w.shard(1) for w in workers]
    groups = [g for s in shards for g in s.groups]
    n_groups = pq.ParquetFile(staged.train_path).metadata.num_row_groups
    assert sorted(groups) == list(range(n_groups))  # each row group in exactly one shard: no row twice
    steps = [[len(y) for _, _, y in w.batches(1)] for w in workers]
    assert len({len(s) for s in steps}) == 1 and len(steps[0]) == workers[0].steps_per_epoch(1)
    per_step = [sum(rows) for rows in zip(*steps)]
    assert per_step == [workers[0].step_rows(k) for k in range(len(per_step))] and sum(per_step) == 900


def test_one_process_reading_every_shard_takes_the_steps_the_processes_take_together(tmp_path: Path) -> None:
    """The data order depends on the shards, not on the processes: one process owning both shards of
    2 yields, step by step, the rows of the two processes' batches together (in shard order)."""
    from labeldp.learning.loader import ShardLayout

    staged, _, _ = stage(tmp_path, n=1000, rows=64)
    layout = ShardLayout.of_file(staged.train_path, 2)
    one = RowGroupLoader(staged.train_path, staged.preprocessor, 50, target_mean=0.0, target_std=1.0, seed=3,
                         layout=layout, owned=[0, 1])
    two = [RowGroupLoader(staged.train_path, staged.preprocessor, 50, target_mean=0.0, target_std=1.0, seed=3,
                          rank=r, world=2, layout=layout) for r in range(2)]
    for epoch in (1, 2):
        together = [torch.cat([a[2], b[2]]) for a, b in zip(two[0].batches(epoch), two[1].batches(epoch))]
        alone = [y for _, _, y in one.batches(epoch)]
        assert len(alone) == len(together) == one.steps_per_epoch()
        assert all(torch.equal(a, b) for a, b in zip(alone, together))


def test_streamed_training_learns_as_well_as_in_memory(tmp_path: Path) -> None:
    ids, y, features = write_table(tmp_path / "f.parquet", 3000)
    config = TrainingConfig(epochs=8, batch_size=64, seed=11, device="cpu", row_group_rows=256, buffer_row_groups=2)
    streamed = fit_release_streamed(tmp_path / "f.parquet", "id", ids, y, None, config, tmp_path / "w", PLAIN)
    memory = fit_regressor(features, y, config)
    mse_streamed = float(np.mean((streamed.predict(features) - y) ** 2))
    mse_memory = float(np.mean((memory.predict(features) - y) ** 2))
    assert mse_streamed < 0.3 * float(np.var(y))
    assert mse_streamed < 1.5 * mse_memory
    assert streamed.n_train_ == memory.n_train_ == 2700 and streamed.n_validation_ == 300
    card = streamed.config_
    assert card["workers"] == 1 and card["precision"] == "fp32" and card["rows_per_second"] > 0


def test_a_consumer_that_stops_early_does_not_leave_the_prefetch_thread_blocked(tmp_path: Path) -> None:
    """Two buffers: while the first trains, the producer queues the second and then its end
    marker; closing the batches must not leave it blocked on that full queue (planted once:
    a plain blocking put of the end marker made close() hang and this test fail)."""
    staged, _, _ = stage(tmp_path, n=100, rows=64)  # 90 training rows: two row groups
    batches = loader(staged, buffer=1, batch=10).batches(1)
    next(batches)
    time.sleep(0.5)  # the producer has read the second buffer and waits to hand over the end marker
    closer = threading.Thread(target=batches.close)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "labeldp-loader"]


def test_a_streamed_classifier_learns_what_the_in_memory_one_learns(tmp_path: Path) -> None:
    """A categorical release streamed from row groups (class indices staged as int64 targets, never
    standardized) trains a classifier as accurate as the in-memory one, on the same split."""
    from labeldp.learning.classifier import fit_classifier
    from labeldp.learning.persistence import TrainedClassifier
    from labeldp.learning.streamed import fit_classifier_streamed

    ids, y, features = write_table(tmp_path / "f.parquet", 1500, extra=50)
    classes = np.digitize(y, [-1.0, 1.0]).astype(np.float64)
    names = ["low", "mid", "high"]
    config = TrainingConfig(epochs=4, batch_size=64, seed=2, device="cpu", row_group_rows=128, buffer_row_groups=2)
    memory = fit_classifier(features, classes, 3, config, classes=names)
    streamed = fit_classifier_streamed(tmp_path / "f.parquet", "id", ids, classes, 3, config, tmp_path / "work",
                                       classes=names)
    assert isinstance(streamed, TrainedClassifier) and streamed.classes_ == names
    assert (streamed.n_train_, streamed.n_validation_) == (memory.n_train_, memory.n_validation_) == (1350, 150)
    last = streamed.history_[-1]
    assert 0.0 <= last["train_accuracy"] <= 1.0 and 0.0 <= last["val_accuracy"] <= 1.0
    truth = classes.astype(np.int64)
    accuracy = {name: float(np.mean(model.predict_proba(features).argmax(axis=1) == truth))
                for name, model in (("memory", memory), ("streamed", streamed))}
    assert accuracy["streamed"] > 0.85 and abs(accuracy["streamed"] - accuracy["memory"]) < 0.05, accuracy
    staged = RowGroupLoader(tmp_path / "work" / "stage" / "train.parquet", streamed.preprocessor_, 50,
                            target_mean=5.0, target_std=3.0, class_targets=True)
    _, _, targets = next(staged.batches(1))
    assert targets.dtype == torch.int64 and set(targets.tolist()) <= {0, 1, 2}  # indices, not standardized


def test_the_join_partition_size_of_a_training_reaches_the_join(tmp_path: Path) -> None:
    """``TrainingConfig.join_partition_rows`` (LABELDP_TRAINING_JOIN_PARTITION_ROWS) is what the staging join
    cuts by: the stage a training leaves in its store records it and the partitions it made."""
    from labeldp.learning.id_partitions import partitions_for
    from labeldp.learning.staging import stage_meta
    from labeldp.learning.streamed import stage_prefix
    from labeldp.storage import ObjectStore

    ids, y, _ = write_table(tmp_path / "f.parquet", 600)
    config = TrainingConfig(epochs=1, batch_size=64, seed=1, device="cpu", row_group_rows=100,
                            join_partition_rows=150)
    objects = ObjectStore.from_url(str(tmp_path / "store"))
    fit_release_streamed(tmp_path / "f.parquet", "id", ids, y, None, config, tmp_path / "w", PLAIN,
                         objects=objects, stage_key="stages/t")
    meta = stage_meta(objects, stage_prefix("stages/t", 1, config))
    assert meta["partition_rows"] == 150 and len(meta["partitions"]) == partitions_for(600, 150) == 4


def test_a_training_resumed_after_its_last_epoch_keeps_its_throughput(tmp_path: Path) -> None:
    """A job restarted after its last checkpoint trains no epoch in the new process; its model card
    still reports the rows per second of the epochs before the restart (they ride in the checkpoint)."""
    from labeldp.learning.loop import Objective, fit_streamed, squared_error
    from labeldp.learning.networks import MLPRegressor

    staged, _, _ = stage(tmp_path)
    config = TrainingConfig(epochs=2, batch_size=64, seed=5, device="cpu", row_group_rows=64)
    plan = make_plan(1000, config)
    objective = Objective(MLPRegressor, squared_error)
    saved: list[dict] = []
    whole = fit_streamed(staged, objective, config, plan, None, checkpoint=saved.append)
    assert whole.config["rows_per_second"] > 0 and saved[-1]["epoch"] == 2
    resumed = fit_streamed(staged, objective, config, plan, None, resume=saved[-1])
    assert resumed.config["resumed_after_epoch"] == 2
    assert resumed.config["rows_per_second"] == whole.config["rows_per_second"]

"""The privacy–utility protocol runner (docs/architecture.md, "Benchmark protocol").

For every trial: a new 80/20 split and a new seed; for every mechanism and ε the
labels party's own randomizer (``labeldp.release.randomizer.randomize``) privatizes the
*training* labels, and the features party trains on them with the SAME recipe for
every mechanism (and the same initialization and batch order within a trial, so
mechanisms are compared paired). ε = ∞ is the non-private model trained on the
true labels, once per trial.

Each finished cell — (data set, mechanism, ε, trial) — is written as a small JSON
file under the cache directory, keyed also by a hash of everything that could change
its numbers (the data's digest and parameters, split, seeds, training configuration,
the source of the mechanism and training code), so an interrupted run resumes where it
stopped and a changed configuration never reads stale numbers. What a *learner* does
with the message is pluggable (:class:`Learner`), and each learner's result is cached
inside the cell under its own fingerprint.

Noise comes from ``numpy.random.default_rng`` seeded per (seed, data set, trial,
mechanism, ε) rather than the service's cryptographic generator: a benchmark must be
reproducible, and it releases nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pydantic import ConfigDict, field_validator

from labeldp.learning.config import (
    DEFAULT_OPTIONS,
    LearningConfig,
    TrainingConfig,
    TrainingOptions,
    recipe_for_processes,
)
from labeldp.mechanisms.registry import REGISTRY, serving
from labeldp_research import datasets as ds
from labeldp_research.datasets import BenchmarkData

CACHE_FORMAT = 1
INF = math.inf

REGRESSION_EPSILONS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, INF)
CLASSIFICATION_EPSILONS = (0.6, 0.8, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, INF)
QUICK_REGRESSION_EPSILONS = (0.1, 1.0, 8.0, INF)
QUICK_CLASSIFICATION_EPSILONS = (0.6, 2.0, 8.0, INF)
REGRESSION_MECHANISMS = serving("real")
"""Every registry entry for real labels, in registry order (the benchmark's columns)."""
CLASSIFICATION_MECHANISMS = serving("categorical")
NON_PRIVATE = "non_private"
CPU_CRITEO_TRAIN_ROWS = 25_000
"""Criteo-like training subsample on CPU: 850 cells × 50 epochs fit in about an hour of one core."""


# --------------------------------------------------------------------------- training recipes


class TrainingRecipe(TrainingOptions):
    """A paper's training setup: the features party's one definition of the training options
    (:class:`labeldp.learning.config.TrainingOptions`, whose defaults are
    :data:`LIU_HUANG_TRAINING`) plus where it comes from."""

    model_config = ConfigDict(frozen=True)

    source: str = ""

    @field_validator("step_epoch", mode="before")
    @classmethod
    def _no_step(cls, value: Any) -> Any:
        # Result files written before the options were unified store null for schedules without a step.
        return TrainingOptions.model_fields["step_epoch"].default if value is None else value

    def with_epochs(self, epochs: int) -> TrainingRecipe:
        """Fewer (or more) epochs, the step decay kept at the same fraction of training."""
        step = max(1, round(self.step_epoch * epochs / self.epochs))
        return self.model_copy(update={"epochs": epochs, "step_epoch": step})

    def describe(self) -> str:
        sched = {"none": "constant lr", "cosine": "cosine decay"}.get(self.schedule, "")
        if self.schedule == "step":
            sched = f"lr ×{self.step_factor:g} after epoch {self.step_epoch}"
        return (
            f"{self.optimizer.capitalize() if self.optimizer == 'adam' else 'RMSProp'}, lr {self.learning_rate:g}, "
            f"{sched}, {self.epochs} epochs, batch {self.batch_size}, weight decay {self.weight_decay:g}"
            + (f" ({self.source})" if self.source else "")
        )


LIU_HUANG_TRAINING = TrainingRecipe(source="Liu & Huang §5.3")
"""Adam 1e-3, 50 epochs, batch 256, ÷10 after epoch 25, weight decay 1e-4: the defaults of the one
definition, so ``POST /v1/trainings`` with no options trains exactly as the default column of
Housing and the simulated sets was measured."""
GHAZI_CRITEO_TRAINING = TrainingRecipe(
    epochs=50, batch_size=8192, optimizer="rmsprop", schedule="cosine", source="Ghazi et al. App. E.1"
)
CLASSIFICATION_TRAINING = TrainingRecipe(
    epochs=30, batch_size=256, optimizer="adam", schedule="step", step_epoch=15,
    source="tabular stand-in; Liu & Ding train ResNets on CIFAR",
)


def training_config(recipe: TrainingRecipe, *, seed: int, device: str, threads: int) -> TrainingConfig:
    """The ``TrainingConfig`` for ``recipe``.

    Training uses every training row (``validation_fraction=0``), as the papers do;
    learners that select models on a validation split make their own.
    """
    options = {**recipe.options(), "validation_fraction": 0.0, "seed": seed}
    return TrainingConfig(**options, device=device, threads=threads)


# --------------------------------------------------------------------------- learners


@dataclass
class FitJob:
    """What a learner gets: the features party's view plus, for the oracle only, true labels."""

    train_table: pa.Table  # feature columns only
    labels: np.ndarray  # privatized (or, at ε = ∞, true) training labels
    spec: Any  # the release's mechanism spec, None at ε = ∞
    config: TrainingConfig
    test_table: pa.Table
    classes: list[str] | None = None
    true_labels: np.ndarray | None = None  # oracle model selection only; never used for training
    prior: Any = None  # the release's DP prior (its ε₁ already paid), which the private mean uses


class Learner(Protocol):
    """What the features party does with one release.

    ``fit_predict`` returns predictions on the test rows for each name in ``outputs``
    (one training may yield several models, e.g. the privately and the oracle-selected
    epoch of the same trajectory).
    """

    @property
    def name(self) -> str: ...

    @property
    def task(self) -> str: ...  # "regression" or "classification"

    @property
    def outputs(self) -> tuple[str, ...]: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class PlainRegressor:
    """``fit_regressor`` on the privatized labels as they are, last epoch (what the papers do)."""

    name: str = "plain"
    task: str = "regression"

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.name,)

    def fingerprint(self) -> dict[str, Any]:
        return {"learner": "fit_regressor"}

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]:
        from labeldp.learning.regression import fit_regressor

        return {self.name: fit_regressor(job.train_table, job.labels, job.config).predict(job.test_table)}


@dataclass(frozen=True)
class PrivateRegressor:
    """The features party's default: ``fit_private_regressor`` with the default ``LearningConfig``
    (debiasing, shrinkage and epoch selection on a privatized validation split — all
    post-processing of the one message), holding out ``validation_fraction`` of the training rows.

    With ``oracle=True`` the same training run also yields the model an oracle with the
    TRUE validation labels would select (``fit_private_and_oracle``) — not private, a
    yardstick for how close the private selection comes. At ε = ∞ the spec is ``None``
    (nothing to debias) and selection uses the true labels, which are then the release.
    """

    name: str = "private"
    task: str = "regression"
    oracle: bool = False
    validation_fraction: float = DEFAULT_OPTIONS.validation_fraction
    learning: tuple[tuple[str, Any], ...] = ()  # LearningConfig overrides (default: the project's default)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.name, "oracle") if self.oracle else (self.name,)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "learner": "fit_private_regressor",
            "oracle": self.oracle,
            "validation_fraction": self.validation_fraction,
            "learning": LearningConfig(**dict(self.learning)).to_dict(),
        }

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]:
        from labeldp.learning.regression import fit_private_and_oracle, fit_private_regressor

        config = job.config.replace(validation_fraction=self.validation_fraction)
        learning = LearningConfig(**dict(self.learning))
        if not self.oracle:
            model = fit_private_regressor(job.train_table, job.labels, job.spec, config, learning, prior=job.prior)
            return {self.name: model.predict(job.test_table)}
        if job.true_labels is None:
            raise ValueError("the oracle learner needs the true training labels")
        private, oracle = fit_private_and_oracle(
            job.train_table, job.labels, job.spec, config, learning, job.true_labels, prior=job.prior
        )
        return {self.name: private.predict(job.test_table), "oracle": oracle.predict(job.test_table)}


@dataclass(frozen=True)
class RefitRegressor:
    """``labeldp_research.refit.fit_refit_regressor``: epoch and λ chosen privately on a held-out
    split, then a second training on every row (an experiment, not the default learning)."""

    name: str = "refit"
    task: str = "regression"
    validation_fraction: float = DEFAULT_OPTIONS.validation_fraction

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.name,)

    def fingerprint(self) -> dict[str, Any]:
        import labeldp_research.refit as refit

        source = hashlib.sha256(Path(refit.__file__).read_bytes()).hexdigest()[:16]
        return {"learner": "fit_refit_regressor", "validation_fraction": self.validation_fraction, "source": source}

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]:
        from labeldp_research.refit import fit_refit_regressor

        config = job.config.replace(validation_fraction=self.validation_fraction)
        return {self.name: fit_refit_regressor(job.train_table, job.labels, job.spec, config).predict(job.test_table)}


@dataclass(frozen=True)
class PlainClassifier:
    """``fit_classifier`` on the privatized classes as they are (Liu & Ding's protocol)."""

    name: str = "plain"
    task: str = "classification"

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.name,)

    def fingerprint(self) -> dict[str, Any]:
        return {"learner": "fit_classifier"}

    def fit_predict(self, job: FitJob) -> dict[str, np.ndarray]:
        from labeldp.learning.classifier import fit_classifier

        assert job.classes is not None
        model = fit_classifier(job.train_table, job.labels, len(job.classes), job.config)
        return {self.name: model.predict_proba(job.test_table).argmax(axis=1).astype(np.int64)}


def learners_for(task: str, names: list[str] | None) -> list[Learner]:
    """The learners behind the requested output names that apply to ``task``.

    Regression: ``plain``, ``private``, ``oracle`` (``oracle`` rides on the private
    learner's training run, so asking for it alone also yields ``private``);
    default: all three.
    Classification: ``plain`` only (a forward-corrected learner needs each row's
    transition law, which two-stage categorical releases do not state as one matrix).
    Unknown names are skipped.
    """
    if task == "classification":
        return [PlainClassifier()]
    if names is None:
        names = ["plain", "private", "oracle"]
    out: list[Learner] = []
    if "plain" in names:
        out.append(PlainRegressor())
    if "private" in names or "oracle" in names:
        out.append(PrivateRegressor(oracle="oracle" in names))
    if "refit" in names:
        out.append(RefitRegressor())
    return out or [PlainRegressor()]


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class DatasetPlan:
    """One data set of the protocol: how to load it and how to train on it."""

    name: str
    load: Callable[[], BenchmarkData]
    params: dict[str, Any]  # everything the loader's output depends on (cache key)
    training: TrainingRecipe
    task: str = "regression"
    train_rows: int | None = None  # training block subsample (None: every training row)
    reference: str | None = None  # key into labeldp_research.references
    note: str = ""


SMALL_ROWS = 2_500
"""Rows of the two small sets (80 % train: 2 000, the size of issue 12's held-out set)."""

HELDOUT_PLANS: tuple[tuple[str, Callable[[], BenchmarkData], dict[str, Any], str], ...] = (
    ("heldout_conversions", partial(ds.criteo_like, 10_000, 1), {"loader": "criteo_like", "n": 10_000, "seed": 1},
     "Criteo-like log-normal conversion values, seed 1, 10 000 rows (8 000 released)"),
    ("heldout_linear", partial(ds.simulated, "linear", 8_000, 20, 1),
     {"loader": "simulated", "kind": "linear", "n": 8_000, "d": 20, "seed": 1},
     "simulated linear, seed 1, n = 8 000, d = 20"),
    ("heldout_counts", partial(ds.counts, 5_000, 12, 1), {"loader": "counts", "n": 5_000, "d": 12, "seed": 1},
     "Poisson counts, seed 1, n = 5 000, d = 12"),
    ("heldout_bounded", partial(ds.bounded_wide, 4_000, 40, 1),
     {"loader": "bounded_wide", "n": 4_000, "d": 40, "seed": 1},
     "labels in [0, 1] (sigmoid), seed 1, n = 4 000, d = 40"),
    # A second batch (seed 2), added after the first four were scored, to tighten the comparison over sets.
    ("heldout_nonlinear", partial(ds.simulated, "nonlinear", 6_000, 6, 2),
     {"loader": "simulated", "kind": "nonlinear", "n": 6_000, "d": 6, "seed": 2},
     "simulated nonlinear, seed 2, n = 6 000, d = 6"),
    ("heldout_conversions2", partial(ds.criteo_like, 14_000, 2), {"loader": "criteo_like", "n": 14_000, "seed": 2},
     "Criteo-like log-normal conversion values, seed 2, 14 000 rows (11 200 released)"),
    ("heldout_counts2", partial(ds.counts, 12_000, 6, 2), {"loader": "counts", "n": 12_000, "d": 6, "seed": 2},
     "Poisson counts, seed 2, n = 12 000, d = 6"),
    ("heldout_bounded2", partial(ds.bounded_wide, 2_500, 80, 2),
     {"loader": "bounded_wide", "n": 2_500, "d": 80, "seed": 2},
     "labels in [0, 1] (sigmoid), seed 2, n = 2 500, d = 80"),
)
"""Each held-out set: its name, loader, cache-key parameters and description (trained as Housing)."""

HELDOUT_SETS = tuple(name for name, *_ in HELDOUT_PLANS)
"""Confirmation sets (record 0040): run only when named, never among the default data sets."""


def default_plans(
    *,
    housing: str | Path | None,
    quick: bool = False,
    epochs: int | None = None,
    sim_n: int = 20_000,
    sim_d: int = 10,
    criteo_rows: int = 1_000_000,
    criteo_train_rows: int | None = None,
    cuda: bool = False,
) -> dict[str, DatasetPlan]:
    """The protocol's data sets with the papers' training, ``quick`` shortening the training."""

    def recipe(base: TrainingRecipe, quick_epochs: int) -> TrainingRecipe:
        if epochs is not None:
            return base.with_epochs(epochs)
        return base.with_epochs(quick_epochs) if quick else base

    plans: dict[str, DatasetPlan] = {}
    if housing is not None:
        path = str(Path(housing).resolve())
        plans["california_housing"] = DatasetPlan(
            "california_housing",
            lambda: ds.california_housing(path),
            {"loader": "california_housing", "file": Path(path).name, "bytes": Path(path).stat().st_size},
            recipe(LIU_HUANG_TRAINING, 10),
            reference="liu_huang_housing",
        )
        plans["california_housing_paper"] = DatasetPlan(
            "california_housing_paper",
            partial(ds.california_housing, path, statlib_only=True),
            {**plans["california_housing"].params, "loader": "california_housing_paper"},
            recipe(LIU_HUANG_TRAINING, 10),
            reference="liu_huang_housing",
            note="Liu & Huang's features (their Table 3, no `ocean_proximity`) and training, to compare absolute "
            "numbers with their Table 4 like for like",
        )
        plans["california_housing_small"] = DatasetPlan(
            "california_housing_small",
            lambda: ds.subsample(ds.california_housing(path), SMALL_ROWS, "california_housing_small"),
            {**plans["california_housing"].params, "loader": "california_housing_small", "n": SMALL_ROWS, "seed": 0},
            recipe(LIU_HUANG_TRAINING, 10),
            note=f"{SMALL_ROWS:,} rows of California Housing drawn label-independently: the real set at the size "
            "of issue 12's held-out set (2 000 training rows), for a default rule that may depend on n",
        )
    for kind in ("linear", "nonlinear"):
        plans[f"simulated_{kind}"] = DatasetPlan(
            f"simulated_{kind}",
            partial(ds.simulated, kind, sim_n, sim_d),
            {"loader": "simulated", "kind": kind, "n": sim_n, "d": sim_d, "seed": 0},
            recipe(LIU_HUANG_TRAINING, 10),
            reference=f"liu_huang_simulated_{kind}",
            note=f"n = {sim_n}, d = {sim_d} (the draft does not state its n and d); trained as Housing",
        )
    plans["bounded_wide"] = DatasetPlan(
        "bounded_wide",
        ds.bounded_wide,
        {"loader": "bounded_wide", "n": 2_000, "d": 100, "seed": 0},
        recipe(LIU_HUANG_TRAINING, 10),
        note="issue 12's held-out shape (≈2 000 rows, 100 features, labels in [0, 1]), synthetic; trained as Housing",
    )
    plans["counts"] = DatasetPlan(
        "counts",
        partial(ds.counts, sim_n),
        {"loader": "counts", "n": sim_n, "d": 8, "seed": 0},
        recipe(LIU_HUANG_TRAINING, 10),
        note="skewed integer labels (Poisson counts), synthetic; trained as Housing",
    )
    plans["counts_small"] = DatasetPlan(
        "counts_small",
        lambda: ds.subsample(ds.counts(), SMALL_ROWS, "counts_small"),
        {"loader": "counts_small", "n": 20_000, "d": 8, "seed": 0, "rows": SMALL_ROWS},
        recipe(LIU_HUANG_TRAINING, 10),
        note=f"{SMALL_ROWS:,} rows of `counts` drawn label-independently (2 000 training rows), for a default rule "
        "that may depend on n",
    )
    # Held-out confirmation sets (record 0040): other shapes and seeds of the same generators, never used
    # to fit or choose any rule or constant; each trained as Housing.
    held = "held-out confirmation set (record 0040: no rule or constant was fitted or chosen on it); "
    for name, load, params, note in HELDOUT_PLANS:
        plans[name] = DatasetPlan(name, load, params, recipe(LIU_HUANG_TRAINING, 10), note=held + note)
    if criteo_train_rows is None and not cuda:
        criteo_train_rows = CPU_CRITEO_TRAIN_ROWS
    plans["criteo_like"] = DatasetPlan(
        "criteo_like",
        lambda: ds.criteo_like(criteo_rows),
        {"loader": "criteo_like", "n": criteo_rows, "seed": 0},
        recipe(GHAZI_CRITEO_TRAINING, 10),
        train_rows=criteo_train_rows,
        reference="ghazi_criteo",
        note=(
            f"mechanism block over all {int(criteo_rows * 0.8):,} training rows; training block on a "
            f"label-independent subsample of {criteo_train_rows:,} of them (CPU budget)"
            if criteo_train_rows
            else "every training row in both blocks"
        ),
    )
    for name, counts in (("cifar10_1", ds.CIFAR10_1), ("cifar10_2", ds.CIFAR10_2)):
        plans[name] = DatasetPlan(
            name,
            partial(ds.imbalanced_classes, counts, name),
            {"loader": "imbalanced_classes", "counts": counts, "d": 16, "seed": 0, "separation": 0.8},
            recipe(CLASSIFICATION_TRAINING, 10),
            task="classification",
            note=f"class counts of Liu & Ding's CIFAR-10 variant: {counts}",
        )
    return plans


# --------------------------------------------------------------------------- results


@dataclass
class Cell:
    """One (mechanism, ε, trial): the mechanism block and one entry per learner."""

    mechanism: str
    epsilon: float
    trial: int
    mechanism_metrics: dict[str, float]
    learners: dict[str, dict[str, float]]
    seconds: float
    cached: bool = False
    error: str | None = None


@dataclass
class RunResult:
    plan: DatasetPlan
    data_description: str
    n_rows: int
    n_features: int
    n_train: int
    n_test: int
    n_train_fit: int
    trials: int
    epsilons: list[float]
    mechanisms: list[str]
    learners: list[str]  # output names, in table order
    cells: list[Cell]
    config: dict[str, Any]  # effective TrainingConfig (seed removed)
    environment: dict[str, Any]
    wall_seconds: float
    computed: int
    cached: int
    cache_dir: str
    learner_info: dict[str, dict[str, Any]] = field(default_factory=dict)  # output name -> learner fingerprint
    command: str | None = None  # the command that computed the cells (carried through re-renders)
    rendered_from: str | None = None  # the summary JSON a re-render read its cells from

    @property
    def compute_seconds(self) -> float:
        """Time to compute every cell, including cells computed by earlier (interrupted) runs."""
        return float(sum(c.seconds for c in self.cells if c.mechanism != DEFAULT))  # defaults are copies

    def values(self, mechanism: str, epsilon: float, metric: str, learner: str | None = None) -> np.ndarray:
        """Per-trial values of ``metric`` (ε = ∞ reads the non-private cells), trial order."""
        mech = NON_PRIVATE if math.isinf(epsilon) else mechanism
        out = []
        for c in sorted(self.cells, key=lambda c: c.trial):
            if c.mechanism != mech or not _same_eps(c.epsilon, epsilon) or c.error:
                continue
            source = c.mechanism_metrics if learner is None else c.learners.get(learner, {})
            if metric in source:
                out.append(source[metric])
        return np.asarray(out, dtype=np.float64)


def _same_eps(a: float, b: float) -> bool:
    return (math.isinf(a) and math.isinf(b)) or a == b


# --------------------------------------------------------------------------- environment


def git_commit(start: Path) -> str | None:
    """The checkout's HEAD commit, read from .git without running git (None outside a checkout)."""
    for root in [start, *start.parents]:
        git = root / ".git"
        if git.is_file() and (text := git.read_text().strip()).startswith("gitdir:"):  # a worktree
            git = (root / text.split(":", 1)[1].strip()).resolve()
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref:"):
                return head
            ref = head.split(None, 1)[1]
            if (git / "commondir").is_file():  # a worktree's refs live in the main repository's git directory
                git = (git / (git / "commondir").read_text().strip()).resolve()
            if (git / ref).is_file():
                return (git / ref).read_text().strip()
            packed = git / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
        except OSError:
            return None
        return None
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> dict[str, Any]:
    """Machine, device, versions: what a reader needs to compare timings and numbers."""
    import numba
    import torch

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "device": device if gpu is None else f"cuda ({gpu})",
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": np.__version__,
        "numba": numba.__version__,
        "labeldp_commit": git_commit(Path(__file__).resolve().parent),
    }


# --------------------------------------------------------------------------- seeds and caching


def _seed(*parts: int | str) -> np.random.SeedSequence:
    """A seed sequence from stable parts (strings by CRC32, so adding a mechanism moves no other seed)."""
    return np.random.SeedSequence([p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts])


def _int_seed(seq: np.random.SeedSequence) -> int:
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


# The code a cell's numbers depend on: the mechanisms and how the labels party runs them,
# the features party's training, and the data generators.
CODE_MODULES = (
    "labeldp.mechanisms",
    "labeldp.specs",
    "labeldp.epsilon",
    "labeldp.synthetic",
    "labeldp_research.datasets",
    "labeldp.release.randomizer",
    "labeldp.release.defaults",
    "labeldp.release.priors",
    "labeldp.learning.config",
    "labeldp.learning.device",
    "labeldp.learning.tasks",
    "labeldp.learning.preprocessing",
    "labeldp.learning.networks",
    "labeldp.learning.loop",
    "labeldp.learning.regression",
    "labeldp.learning.classifier",
    "labeldp.learning.persistence",
    "labeldp.learning.debiasing",
    "labeldp.learning.selection",
)


def code_fingerprint(modules: tuple[str, ...] = CODE_MODULES) -> str:
    """SHA-256 over the code of ``modules`` (every .py of a package), so a cache never
    serves numbers computed by different mechanism or training code.

    The digest is of each file's syntax tree without its string statements (docstrings),
    comments or layout (:func:`code_digest`): editing an explanation keeps the cache, which
    holds hours of CPU, while any change a program can execute starts a fresh one."""
    import importlib.util

    digest = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            digest.update(f"{name}:absent".encode())
            continue
        origin = Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for f in files:
            digest.update(f"{name}:{f.name}".encode())
            digest.update(code_digest(f.read_text(encoding="utf-8")))
    return digest.hexdigest()[:16]


def code_digest(source: str) -> bytes:
    """What a module executes: its syntax tree, less docstrings and every other statement that
    is a bare string constant (they do nothing), less line numbers; comments never reach the tree."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        for attr in ("body", "orelse", "finalbody"):
            body = getattr(node, attr, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [
                stmt
                for stmt in body
                if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                        and isinstance(stmt.value.value, str))
            ]
            setattr(node, attr, kept or [ast.Pass()])
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).digest()


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _eps_key(epsilon: float) -> str:
    return "inf" if math.isinf(epsilon) else f"{epsilon:g}"


class CellCache:
    """One JSON file per cell under ``root/<data set>-<hash>/``, written atomically."""

    def __init__(self, root: Path, dataset: str, key: dict[str, Any]) -> None:
        self.dir = Path(root) / f"{dataset}-{_hash(key)}"
        self.key = key

    def path(self, mechanism: str, epsilon: float, trial: int) -> Path:
        return self.dir / f"{mechanism}__eps{_eps_key(epsilon)}__trial{trial}.json"

    def read(self, mechanism: str, epsilon: float, trial: int) -> dict[str, Any] | None:
        p = self.path(mechanism, epsilon, trial)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        return doc if doc.get("format") == CACHE_FORMAT else None

    def write(self, mechanism: str, epsilon: float, trial: int, doc: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        key_file = self.dir / "key.json"
        if not key_file.exists():
            key_file.write_text(json.dumps(self.key, indent=1, sort_keys=True, default=str))
        p = self.path(mechanism, epsilon, trial)
        tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": CACHE_FORMAT, **doc}, sort_keys=True))
        os.replace(tmp, p)


# --------------------------------------------------------------------------- metrics


def regression_metrics(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    return {"test_mse": float(np.mean((pred - y) ** 2))}


def classification_metrics(y: np.ndarray, pred: np.ndarray, k: int) -> dict[str, float]:
    """Accuracy and mean per-class accuracy (balanced accuracy: the minority classes count alike)."""
    recalls = [float(np.mean(pred[y == c] == c)) for c in range(k) if np.any(y == c)]
    return {"test_accuracy": float(np.mean(pred == y)), "mean_class_accuracy": float(np.mean(recalls))}


def mean_predictors(
    released: np.ndarray, true: np.ndarray, spec: Any, y_test: np.ndarray, prior: Any = None
) -> dict[str, float]:
    """Test MSE of the two constant predictors every learner is held against (issue 12).

    ``private_mean_mse``: the release's private mean
    (:func:`labeldp.learning.debiasing.private_mean` of the training rows' privatized
    labels, with the release's DP ``prior`` where it has one: post-processing, no ε); the default
    learning must never be worse than it.
    ``training_mean_mse``: the true training labels' mean, NOT private, a yardstick only.
    """
    from labeldp.learning.debiasing import label_law, private_mean

    mean = private_mean(released, label_law(spec), prior=prior)
    return {
        "private_mean_mse": float(np.mean((y_test - mean) ** 2)),
        "training_mean_mse": float(np.mean((y_test - float(np.mean(true))) ** 2)),
    }


# --------------------------------------------------------------------------- the runner


def trial_split(
    n: int, n_test: int, n_fit: int, seed: int, dataset: str, trial: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train rows, test rows, positions within train of the training subsample) for one trial.

    A new permutation per trial, drawn from (seed, data set, trial) only — never from labels.
    """
    order = np.random.default_rng(_seed(seed, dataset, trial, "split")).permutation(n)
    train, test = np.sort(order[n_test:]), np.sort(order[:n_test])
    fit_pos = np.arange(train.size)
    if n_fit < train.size:
        sub = np.random.default_rng(_seed(seed, dataset, trial, "subsample"))
        fit_pos = np.sort(sub.choice(train.size, n_fit, replace=False))
    return train, test, fit_pos


@dataclass(frozen=True)
class Trial:
    """One trial of the protocol on one data set, as the benchmark cells see it (for benchmark programs
    that vary a mechanism's settings outside the runner's cells)."""

    index: int
    y_train: np.ndarray  # every training row's true label (what the labels party privatizes)
    y_test: np.ndarray
    fit_pos: np.ndarray  # positions within the training rows that the learner trains on
    fit_table: pa.Table
    test_table: pa.Table
    config: TrainingConfig


def protocol_trials(
    plan: DatasetPlan, data: BenchmarkData, trials: int, *, threads: int = 1, seed: int = 0
) -> Iterator[Trial]:
    """The runner's splits, training subsample and training configuration, trial by trial (CPU)."""
    features = data.table.drop(["id"])
    n_test = round(data.n * 0.2)
    n_fit = min(plan.train_rows or data.n, data.n - n_test)
    for t in range(trials):
        train, test, fit_pos = trial_split(data.n, n_test, n_fit, seed, plan.name, t)
        train_seed = _int_seed(_seed(seed, plan.name, t, "training"))
        yield Trial(
            t,
            data.labels[train],
            data.labels[test],
            fit_pos,
            features.take(pa.array(train[fit_pos])),
            features.take(pa.array(test)),
            training_config(plan.training, seed=train_seed, device="cpu", threads=threads),
        )


def _fmt_seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{(s % 3600) // 60:02.0f}m"


DEFAULT = "default"
AUTO = "auto"
"""The runner's name for the product's own ``auto`` release: the band's pick and, from its prior, the tail
rule (``labeldp.release.Release(auto=True)``). Its cells, where run, are the ``default`` column."""
AUTO_SWITCHED = "auto_switched"
"""An ``auto`` cell's mechanism metric: 1 where the release left the band's pick (the tail rule), else 0."""


def _prior_tail(spec: Any, prior: Any) -> dict[str, float]:
    """``prior_tail`` of an ``rp_with_prior`` release (what ``auto``'s tail rule reads), else nothing."""
    from labeldp.release.defaults import prior_tail

    if getattr(spec, "name", None) != "rp_with_prior" or prior is None or not hasattr(prior, "grid"):
        return {}
    return {"prior_tail": prior_tail(prior, (float(spec.a1), float(spec.a2)))}


def default_cells(cells: list[Cell], label_type: str, mechanisms: list[str], n: int | None = None) -> list[Cell]:
    """The project's default configuration as its own column.

    ``labeldp.release.defaults.default_mechanism`` picks the mechanism from the label type,
    ε and the rows trained on, ``n`` (public); at each (ε, trial) the default *is* that mechanism's cell, so
    its numbers are copied, not recomputed. Where the pick is ``rp_with_prior`` and its cell records a
    ``prior_tail`` past ``TAIL_CLIP_ABOVE`` and n is under ``TAIL_ROWS_BELOW`` (``auto``'s tail rule), the same
    trial's ``rr_on_bins`` cell is
    copied instead (its prior is another draw of the same law). ε values whose pick was not run are left out.
    Where the run has ``auto`` cells (the product's release itself, :data:`AUTO`), those are the column at
    their ε: one release, its own prior deciding, nothing copied across draws.
    """
    from labeldp.release.defaults import TAIL_CLIP_ABOVE, TAIL_ROWS_BELOW, default_mechanism

    by_key = {(c.mechanism, c.epsilon, c.trial): c for c in cells}
    ran_auto = {c.epsilon for c in cells if c.mechanism == AUTO}
    out = [dataclasses.replace(c, mechanism=DEFAULT) for c in cells if c.mechanism == AUTO]
    for c in cells:
        if c.mechanism == NON_PRIVATE or math.isinf(c.epsilon) or c.epsilon in ran_auto:
            continue
        pick = default_mechanism(label_type, c.epsilon, n)
        if c.mechanism == pick and pick in mechanisms:
            source = c
            tail_applies = n is None or n < TAIL_ROWS_BELOW  # record 0032: the release's rows
            if tail_applies and c.mechanism_metrics.get("prior_tail", 0.0) > TAIL_CLIP_ABOVE:
                source = by_key.get(("rr_on_bins", c.epsilon, c.trial), c)
            out.append(dataclasses.replace(source, mechanism=DEFAULT))
    return out


def default_learner(label_type: str, epsilon: float, learners: list[str]) -> str:
    """The benchmark learner that does what a training gets by default.

    A regression training selects privately on a held-out split (``private``); a
    classification trains plainly. ``research/studies/default_rule.py`` also scored training on
    every row for the unbiased randomizer at high ε: it wins on California Housing and the
    Criteo-like set by 1–4 % but loses up to 6.6× on the simulated linear set, whose labels
    leave little irreducible error for the noise to hide in, so it is not the default.
    """
    if label_type == "categorical" or "private" not in learners:
        return "plain"
    return "private"


def run_utility(
    plan: DatasetPlan,
    *,
    trials: int = 10,
    epsilons: list[float] | None = None,
    mechanisms: list[str] | None = None,
    learners: list[Learner] | None = None,
    cache_dir: str | Path = "bench/cache",
    device: str = "auto",
    threads: int = 0,
    seed: int = 0,
    test_fraction: float = 0.2,
    progress: Callable[[str], None] | None = print,
    data: BenchmarkData | None = None,
    processes: int = 1,
) -> RunResult:
    """Run the protocol on one data set; every cell is read from the cache when present.

    ``processes``: train with the default recipe a features party of that many training processes
    gives this many rows (:func:`labeldp.learning.config.recipe_for_processes`), in this one process:
    the batch is global, so the model does not depend on how many processes run it."""
    from labeldp.epsilon import to_micro_floor
    from labeldp.learning.device import resolve_device
    from labeldp.release.defaults import default_mechanism
    from labeldp.release.randomizer import randomize

    started = time.perf_counter()
    load_before = os.getloadavg()[0]  # the machine is shared: every table says how busy it was
    commit = git_commit(Path(__file__).resolve().parent)  # the code that runs now; HEAD may move during the run
    task = plan.task
    if epsilons is None:
        epsilons = list(CLASSIFICATION_EPSILONS if task == "classification" else REGRESSION_EPSILONS)
    epsilons = sorted({float(e) for e in epsilons})
    default_mechs = CLASSIFICATION_MECHANISMS if task == "classification" else REGRESSION_MECHANISMS
    label_type = "categorical" if task == "classification" else "real"
    mechanisms = [
        m
        for m in (mechanisms or default_mechs)
        if m == AUTO or (m in REGISTRY and label_type in REGISTRY[m].label_types)
    ]
    learners = learners or learners_for(task, None)
    outputs = [o for lr in learners for o in lr.outputs]
    if len(set(outputs)) != len(outputs):
        raise ValueError("two learners produce the same output name")
    fingerprints = {lr.name: _hash(lr.fingerprint()) for lr in learners}
    device = resolve_device(device)

    data = data if data is not None else plan.load()
    features = data.table.drop(["id"])
    n = data.n
    n_test = int(round(n * test_fraction))
    n_train = n - n_test
    n_fit = min(plan.train_rows, n_train) if plan.train_rows else n_train
    plan = dataclasses.replace(plan, training=recipe_for_processes(plan.training, processes, n_fit))

    probe = training_config(plan.training, seed=0, device=device, threads=threads)
    effective = probe.model_dump(exclude={"seed", "device", "threads"})
    key = {
        "format": CACHE_FORMAT,
        "dataset": plan.name,
        "params": plan.params,
        "data": data.fingerprint(),
        "code": code_fingerprint(),
        "n": n,
        "test_fraction": test_fraction,
        "train_rows": n_fit,
        "seed": seed,
        "training": effective,
        "recipe": plan.training.model_dump(),
    }
    cache = CellCache(Path(cache_dir), plan.name, key)

    finite = [e for e in epsilons if not math.isinf(e)]
    cells_plan = []
    for t in range(trials):
        cells_plan.append((NON_PRIVATE, INF, t))  # ε = ∞: the reference every row is compared with
        cells_plan += [(m, e, t) for m in mechanisms for e in finite]

    classes = data.classes
    k = len(classes) if classes else 0
    cells: list[Cell] = []
    computed = cached = 0
    compute_time = 0.0
    split_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table, pa.Table]] = {}

    def split(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table, pa.Table]:
        """Trial t's train/test rows, the training subsample (positions in train) and their feature tables."""
        if t not in split_cache:
            split_cache.clear()  # trials run in order: keep one
            train, test, fit_pos = trial_split(n, n_test, n_fit, seed, plan.name, t)
            tables = features.take(pa.array(train[fit_pos])), features.take(pa.array(test))
            split_cache[t] = (train, test, fit_pos, *tables)
        return split_cache[t]

    for index, (mech, eps, t) in enumerate(cells_plan, 1):
        doc = cache.read(mech, eps, t) or {}
        have = doc.get("learners", {})
        missing = [
            lr
            for lr in learners
            if any(have.get(o, {}).get("fingerprint") != fingerprints[lr.name] for o in lr.outputs)
        ]
        if doc and not missing:
            cached += 1
            cells.append(
                Cell(
                    mech,
                    eps,
                    t,
                    doc["mechanism_metrics"],
                    {o: have[o]["metrics"] for o in outputs},
                    doc["seconds"],
                    cached=True,
                )
            )
            continue

        t0 = time.perf_counter()
        train, test, fit_pos, fit_table, test_table = split(t)
        y_train = data.labels[train]
        train_seed = _int_seed(_seed(seed, plan.name, t, "training"))
        config = training_config(plan.training, seed=train_seed, device=device, threads=threads)
        error = None
        spec = prior = None
        if mech == NON_PRIVATE:
            released = y_train.astype(np.float64)
        else:
            rng = np.random.default_rng(_seed(seed, plan.name, t, mech, to_micro_floor(eps)))
            # ``auto``: resolved as a release resolves it (the band from label type, ε and the release's rows),
            # then the release itself may leave rp_with_prior for rr_on_bins from its own prior (record 0025).
            picked = default_mechanism(label_type, eps, int(y_train.size)) if mech == AUTO else mech
            try:
                out = randomize(
                    y_train,
                    data.domain,
                    picked,
                    to_micro_floor(eps),
                    rng,
                    classes=classes if task == "classification" else None,
                    auto=mech == AUTO,
                )
            except ValueError as exc:  # RandomizerError included: report the cell, do not cache it
                error = f"{type(exc).__name__}: {exc}"
                cells.append(Cell(mech, eps, t, {}, {}, 0.0, error=error))
                if progress:
                    progress(f"[{plan.name}] {mech} ε={_eps_key(eps)} trial {t + 1}: FAILED {error}")
                continue
            released, spec, prior = out.labels, out.mechanism, out.prior
        if task == "classification":
            mech_metrics = {"label_accuracy": float(np.mean(released == y_train))}
        else:
            mech_metrics = {
                "mechanism_mse": float(np.mean((released - y_train) ** 2)),
                **mean_predictors(released[fit_pos], y_train[fit_pos], spec, data.labels[test], prior),
                **_prior_tail(spec, prior),
            }
        if mech == AUTO and spec is not None:  # which mechanism ran: 1 where the tail rule left the band's pick
            mech_metrics[AUTO_SWITCHED] = float(spec.name != picked)

        job = FitJob(
            fit_table, released[fit_pos], spec, config, test_table, classes=classes, true_labels=y_train[fit_pos],
            prior=prior,
        )
        y_test = data.labels[test]
        redo = {o for lr in missing for o in lr.outputs}
        results = {o: v for o, v in have.items() if o not in redo}
        for lr in missing:
            t1 = time.perf_counter()
            predictions = lr.fit_predict(job)
            for o in lr.outputs:
                pred = predictions[o]
                metrics = (
                    classification_metrics(y_test, pred, k)
                    if task == "classification"
                    else regression_metrics(y_test, pred)
                )
                results[o] = {
                    "fingerprint": fingerprints[lr.name],
                    "metrics": metrics,
                    "seconds": time.perf_counter() - t1,
                }
        kept = {o: v for o, v in results.items() if o not in redo}
        seconds = time.perf_counter() - t0 + (doc.get("seconds", 0.0) if kept else 0.0)
        cache.write(
            mech,
            eps,
            t,
            {
                "mechanism_metrics": mech_metrics,
                "learners": results,
                "seconds": seconds,
                "device": device,
                "n_train": int(train.size),
                "n_fit": int(fit_pos.size),
            },
        )
        cells.append(Cell(mech, eps, t, mech_metrics, {o: results[o]["metrics"] for o in outputs}, seconds))
        computed += 1
        compute_time += time.perf_counter() - t0
        if progress:
            remaining = len(cells_plan) - index
            eta = compute_time / computed * remaining
            shown = ", ".join(
                f"{o} " + ", ".join(f"{m_} {v_:.4g}" for m_, v_ in results[o]["metrics"].items()) for o in outputs
            )
            first = next(iter(mech_metrics.items()))
            progress(
                f"[{plan.name}] {index}/{len(cells_plan)} {mech} ε={_eps_key(eps)} trial {t + 1}/{trials}: "
                f"{first[0]} {first[1]:.4g}; {shown} ({time.perf_counter() - t0:.1f}s; "
                f"elapsed {_fmt_seconds(time.perf_counter() - started)}, ETA ≤{_fmt_seconds(eta)})"
            )

    cells += default_cells(cells, label_type, mechanisms, n_fit)
    mechanisms = [m for m in mechanisms if m != AUTO]  # its cells are the default column
    if any(c.mechanism == DEFAULT for c in cells):
        mechanisms = [DEFAULT, *mechanisms]
    return RunResult(
        plan=plan,
        data_description=data.description,
        n_rows=n,
        n_features=features.num_columns,
        n_train=n_train,
        n_test=n_test,
        n_train_fit=n_fit,
        trials=trials,
        epsilons=epsilons,
        mechanisms=mechanisms,
        learners=outputs,
        cells=cells,
        config=effective,
        environment={**environment(device), "labeldp_commit": commit,
                     "load_average": [load_before, os.getloadavg()[0]]},
        wall_seconds=time.perf_counter() - started,
        computed=computed,
        cached=cached,
        cache_dir=str(cache.dir),
        learner_info={o: lr.fingerprint() for lr in learners for o in lr.outputs},
    )

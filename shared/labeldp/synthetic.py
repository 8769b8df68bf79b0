"""A Criteo-like synthetic conversion-value data set for the demo and benchmarks.

Clicks have hashed categorical features (Zipf-distributed, like ad ids and
publisher ids) and a few numeric ones; the conversion value is log-normal given
the features, so it is heavy-tailed. Values are clipped at the 95th percentile
of a *separate* reference sample from the same generator (Ghazi et al. clip the
Criteo values the same way), so the declared label domain is a public constant,
not a statistic of the private labels.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

CATEGORICAL = {"advertiser": 60, "campaign": 400, "device": 8, "site": 1500}
NUMERIC = ("price", "hour", "position")


@dataclass(frozen=True)
class ConversionData:
    ids: list[str]
    numeric: dict[str, np.ndarray]
    categorical: dict[str, list[str]]
    labels: np.ndarray  # clipped conversion values
    clip: float  # public upper end of the label domain

    def to_csv(self) -> bytes:
        """Feature table CSV (id + features; no labels)."""
        cols = ["id", *NUMERIC, *CATEGORICAL]
        lines = [",".join(cols)]
        num = [self.numeric[c] for c in NUMERIC]
        cat = [self.categorical[c] for c in CATEGORICAL]
        for i, ident in enumerate(self.ids):
            fields = [ident] + [f"{a[i]:.6g}" for a in num] + [c[i] for c in cat]
            lines.append(",".join(fields))
        return ("\n".join(lines) + "\n").encode()


def _hash_token(column: str, value: int) -> str:
    return hashlib.blake2b(f"{column}:{value}".encode(), digest_size=6).hexdigest()


def _raw(
    n: int, rng: np.random.Generator, effects: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Categorical codes, numeric features and raw conversion values of ``n`` clicks."""
    codes = {c: np.minimum(rng.zipf(1.3, n) - 1, v - 1) for c, v in CATEGORICAL.items()}
    price = rng.lognormal(3.0, 0.8, n)
    hour = rng.integers(0, 24, n).astype(np.float64)
    position = rng.integers(1, 11, n).astype(np.float64)
    log_value = (
        0.8
        + 0.45 * np.log(price)
        + 0.25 * np.sin(hour / 24 * 2 * np.pi)
        - 0.08 * position
        + sum(effects[c][codes[c]] for c in CATEGORICAL)
        + rng.normal(0.0, 0.6, n)
    )
    return codes, {"price": price, "hour": hour, "position": position}, np.exp(log_value)


def make_conversions(n: int, seed: int = 0) -> ConversionData:
    """``n`` synthetic clicks with conversion values clipped at a public 95th percentile."""
    effect_rng = np.random.default_rng(10_000 + seed)
    effects = {c: effect_rng.normal(0.0, 0.5, v) for c, v in CATEGORICAL.items()}
    _, _, reference = _raw(100_000, np.random.default_rng(20_000 + seed), effects)
    clip = float(np.round(np.quantile(reference, 0.95), 2))
    codes, numeric, values = _raw(n, np.random.default_rng(seed), effects)
    width = len(str(n))
    ids = [f"c{i:0{width}d}" for i in range(n)]
    vocab = {c: [_hash_token(c, v) for v in range(size)] for c, size in CATEGORICAL.items()}
    categorical = {c: [vocab[c][k] for k in codes[c]] for c in CATEGORICAL}
    return ConversionData(ids, numeric, categorical, np.minimum(values, clip), clip)

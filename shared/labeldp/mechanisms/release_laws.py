"""The laws each row of a categorical release was drawn from (one, or two with a prior split).

Above the registry (it looks the spec's mechanism up there), so the mechanism families
never import the registry (an import-linter contract keeps it so).
"""

from __future__ import annotations

import numpy as np

from labeldp.mechanisms.categorical import RandomizedResponse, prior_split_mask
from labeldp.mechanisms.registry import entry_for_spec
from labeldp.specs.categorical import CategoricalMechanismSpec


def release_laws(spec: CategoricalMechanismSpec, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(stage, matrices): row i of a release was drawn from ``matrices[stage[i]]``.

    Stage 0 is the spec's mechanism; stage 1, present only with a prior split, is the
    first-stage RR. What the features party needs to debias or forward-correct each row.
    """
    law = entry_for_spec(spec).from_spec(spec).law()
    if law.matrix is None:  # pragma: no cover - every categorical entry has a matrix law
        raise ValueError(f"{spec.name} has no transition matrix")
    main = np.array(law.matrix)  # a writable copy, as transition_matrix() gives
    split = getattr(spec, "prior_split", None)
    if split is None:
        return np.zeros(n_rows, dtype=np.int64), main[None]
    if split.n_rows != n_rows:
        raise ValueError(f"the prior split describes {split.n_rows} rows, not {n_rows}")
    mask = prior_split_mask(n_rows, split.fraction, split.rule)
    if int(mask.sum()) != split.prior_rows:
        raise ValueError("the prior split's row count does not match its rule")
    first = RandomizedResponse.from_spec(split.first_stage).transition_matrix()
    return mask.astype(np.int64), np.stack([main, first])

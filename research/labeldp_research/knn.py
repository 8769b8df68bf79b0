"""Reference learner of the theoretical-limits paper: Laplace labels + k-nearest-neighbour regression.

"On Theoretical Limits of Learning with Label Differential Privacy" (``papers/theoretical-limits_*``),
local label DP, regression:

* Thm 6 (labels bounded, |Y| < T, Assumption 2): release Z = Y + W, W ~ Lap(2T/ε), and predict
  η̂(x) = (1/k) Σ_{i ∈ N_k(x)} Z_i (eq. 20). With k ∼ N^{2β/(d+2β)} (ε ∧ 1)^{−2d/(d+2β)},
  under Assumption 1 (η β-Hölder, feature density bounded below, regular support),
  R − R* ≲ (N(ε² ∧ 1))^{−2β/(d+2β)} (eq. 21); Thm 5 is the matching lower bound. So privacy
  multiplies the sample complexity by 1/(ε² ∧ 1) and leaves the exponent in N unchanged;
  e.g. β = 1 (Lipschitz), d = 2: k ∼ √N/(ε ∧ 1) and R − R* ≲ (Nε²)^{−1/2} for ε ≤ 1.
* Thm 10 (heavy tails, E[|Y|^p | x] ≤ M_p, p ≥ 2, Assumption 3): clip Y to [−T, T] first, then
  the same Laplace and kNN. With k ∼ (Nε²)^{2pβ/(2pβ+d(p−1))} ∨ N^{2β/(2β+d)} and
  T ∼ (kε²)^{1/(2p)}, R − R* ≲ (Nε²)^{−2β(p−1)/(2pβ+d(p−1))} + N^{−2β/(2β+d)} (eq. 26):
  slower than Thm 6 — the exponent itself degrades with the tail.

Why the k rule. The proof (App. G, eq. 140) bounds the risk by T²(1 + 8/ε²)/k + C(k/N)^{2β/d}:
Laplace variance averaged over k neighbours against the k-NN radius bias. Balancing gives
the rule above (1 + 8/ε² ≍ (ε ∧ 1)^{−2}). The theorem fixes k only up to a constant; ``k_scale``
is that constant (1 by default), ``epsilon_cap`` is the "∧ 1" (``None`` lets k keep shrinking for
ε > 1, the right choice when the Laplace variance 8T²/ε² still dominates Var(Y | x)).

Why the threshold constant. In App. K (eq. 180) the clipping bias is (M_p/(p−1))·T^{1−p} (Lemma 2)
and the Laplace variance 8T²/(kε²); minimizing their sum over T gives
T = (M_p² kε² / (8(p − 1)))^{1/(2p)}, i.e. the theorem's T ∼ (kε²)^{1/(2p)} with its constant.

Privacy. The labels reach the learner only through ``labeldp.mechanisms.additive.Laplace`` on the
public range [c − T, c + T] (width 2T, scale 2T/ε: the paper's Lap(2T/ε)), realized on the
project's lattice (Mironov 2012). Snapping clips labels outside the range to its ends, which is
exactly the truncation Y_T of Thm 10. The output is *not* clipped: the estimator needs
E[Z | Y] = Y_T (an unbiased average), and clipping would bias it. k, T and the range are functions
of public quantities only (N, d, ε and the declared assumptions), so the features party can
recompute them; the k-NN average is post-processing (Proposition 1).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree

from labeldp.mechanisms.additive import Laplace, Variant
from labeldp.mechanisms.checks import check_epsilon, check_labels
from labeldp.mechanisms.guarantee import PrivacyGuarantee
from labeldp.mechanisms.prior import LabelDomain

QUERY_CHUNK = 1 << 22
"""Largest number of (row, neighbour) index pairs materialized at once in ``predict``."""


def _check_smoothness(smoothness: float) -> float:
    beta = float(smoothness)
    # Hölder with β > 1 forces η to be constant on a connected support; a k-NN mean cannot use it anyway.
    if not (0.0 < beta <= 1.0):
        raise ValueError("smoothness (Hölder β) must lie in (0, 1]")
    return beta


def _clip_k(k: float, n: int) -> int:
    return int(min(max(1, int(round(k))), n))


def theorem6_k(
    n: int,
    epsilon: float,
    d: int,
    smoothness: float = 1.0,
    scale: float = 1.0,
    epsilon_cap: float | None = 1.0,
) -> int:
    """k = scale · n^{2β/(d+2β)} · (ε ∧ cap)^{−2d/(d+2β)} (Thm 6), rounded and clipped to [1, n].

    ``epsilon_cap=1`` is the theorem's ε ∧ 1; ``None`` uses ε itself for every ε.
    """
    epsilon = check_epsilon(epsilon)
    beta = _check_smoothness(smoothness)
    n, d = int(n), int(d)
    if n < 1 or d < 1:
        raise ValueError("n and d must be >= 1")
    eps = epsilon if epsilon_cap is None else min(epsilon, float(epsilon_cap))
    k = scale * n ** (2 * beta / (d + 2 * beta)) * eps ** (-2 * d / (d + 2 * beta))
    return _clip_k(k, n)


def theorem6_rate(n: float, epsilon: float, d: int, smoothness: float = 1.0, epsilon_cap: float | None = 1.0) -> float:
    """The Thm 6 bound's shape (N(ε ∧ cap)²)^{−2β/(d+2β)}, constant 1 (for plots and slopes)."""
    beta = _check_smoothness(smoothness)
    eps = epsilon if epsilon_cap is None else min(epsilon, float(epsilon_cap))
    return float((n * eps * eps) ** (-2 * beta / (d + 2 * beta)))


def theorem10_k(
    n: int,
    epsilon: float,
    d: int,
    tail_exponent: float,
    smoothness: float = 1.0,
    scale: float = 1.0,
) -> int:
    """k = scale · ((nε²)^{2pβ/(2pβ+d(p−1))} ∨ n^{2β/(2β+d)}) (Thm 10), rounded and clipped to [1, n]."""
    epsilon = check_epsilon(epsilon)
    beta = _check_smoothness(smoothness)
    p = float(tail_exponent)
    if not p >= 2.0:
        raise ValueError("tail_exponent p must be >= 2 (Assumption 3)")
    n, d = int(n), int(d)
    if n < 1 or d < 1:
        raise ValueError("n and d must be >= 1")
    private = (n * epsilon * epsilon) ** (2 * p * beta / (2 * p * beta + d * (p - 1)))
    public = n ** (2 * beta / (2 * beta + d))
    return _clip_k(scale * max(private, public), n)


def theorem10_threshold(k: int, epsilon: float, tail_exponent: float, moment_bound: float = 1.0) -> float:
    """T = (M_p² kε² / (8(p − 1)))^{1/(2p)}: minimizes clipping bias² + Laplace variance over T (eq. 180)."""
    epsilon = check_epsilon(epsilon)
    p = float(tail_exponent)
    if not p >= 2.0:
        raise ValueError("tail_exponent p must be >= 2 (Assumption 3)")
    m = float(moment_bound)
    if not (math.isfinite(m) and m > 0):
        raise ValueError("moment_bound must be a finite number > 0")
    return float((m * m * int(k) * epsilon * epsilon / (8.0 * (p - 1.0))) ** (1.0 / (2.0 * p)))


def knn_average(tree: cKDTree, values: np.ndarray, X: np.ndarray, k: int, workers: int = 1) -> np.ndarray:
    """Mean of ``values`` over the k nearest training points of each row of X (Euclidean), in chunks."""
    X = np.asarray(X, dtype=np.float64)
    out = np.empty(X.shape[0], dtype=np.float64)
    rows = max(1, QUERY_CHUNK // max(1, k))
    for start in range(0, X.shape[0], rows):
        _, idx = tree.query(X[start : start + rows], k=k, workers=workers)
        idx = np.asarray(idx).reshape(-1, k)
        out[start : start + rows] = values[idx].mean(axis=1)
    return out


def knn_average_reference(train: np.ndarray, values: np.ndarray, X: np.ndarray, k: int) -> np.ndarray:
    """Brute-force version of ``knn_average`` (all pairwise distances), for tests."""
    dist = ((np.asarray(X)[:, None, :] - np.asarray(train)[None, :, :]) ** 2).sum(axis=-1)
    idx = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return np.asarray(values)[idx].mean(axis=1)


class LaplaceKNNRegressor:
    """Laplace-privatized labels + k-NN regression (Thm 6; Thm 10 with ``tail_exponent``).

    Give exactly one of
    * ``domain``: labels are bounded in this public range (Thm 6); T = half its width;
    * ``clip_threshold``: clip labels to [center − T, center + T] with this fixed T, k as in Thm 6;
    * ``tail_exponent`` p (≥ 2, with ``moment_bound`` M_p ≥ E[|Y − center|^p | x]): k and T of Thm 10.

    ``k`` overrides the rule. ``fit(X, y, rng)`` privatizes y (the labels party's step) and then
    calls ``fit_privatized(X, z)`` (the features party's step, which sees only z). Fitted:
    ``k_``, ``clip_`` (T), ``domain_`` (the privatized range), ``rule_``, ``mechanism_`` (the
    Laplace), ``n_features_in_``, ``privatized_labels_``, ``tree_``.
    """

    def __init__(
        self,
        epsilon: float,
        domain: LabelDomain | None = None,
        *,
        clip_threshold: float | None = None,
        tail_exponent: float | None = None,
        moment_bound: float = 1.0,
        center: float = 0.0,
        k: int | None = None,
        k_scale: float = 1.0,
        smoothness: float = 1.0,
        epsilon_cap: float | None = 1.0,
        variant: Variant | None = None,
        workers: int = 1,
    ) -> None:
        self.epsilon = epsilon
        self.domain = domain
        self.clip_threshold = clip_threshold
        self.tail_exponent = tail_exponent
        self.moment_bound = moment_bound
        self.center = center
        self.k = k
        self.k_scale = k_scale
        self.smoothness = smoothness
        self.epsilon_cap = epsilon_cap
        self.variant = variant
        self.workers = workers

    # -- planning from public quantities ---------------------------------------

    def plan(self, n: int, d: int) -> tuple[int, float, LabelDomain, str]:
        """(k, T, privatized range, rule name) for n training rows in d dimensions — public inputs only."""
        epsilon = check_epsilon(self.epsilon)
        given = [self.domain is not None, self.clip_threshold is not None, self.tail_exponent is not None]
        if sum(given) != 1:
            raise ValueError("give exactly one of domain, clip_threshold, tail_exponent")
        center = float(self.center)
        if self.tail_exponent is not None:
            rule = "theorem10"
            k = theorem10_k(n, epsilon, d, self.tail_exponent, self.smoothness, self.k_scale)
            if self.k is not None:
                k = _clip_k(self.k, n)
            threshold = theorem10_threshold(k, epsilon, self.tail_exponent, self.moment_bound)
            domain = LabelDomain("real", center - threshold, center + threshold)
        else:
            rule = "theorem6"
            if self.domain is not None:
                domain = self.domain
                threshold = domain.width / 2.0
            else:
                if self.clip_threshold is None:
                    raise ValueError("clip_threshold or domain is required")
                threshold = float(self.clip_threshold)
                if not (math.isfinite(threshold) and threshold > 0):
                    raise ValueError("clip_threshold must be a finite number > 0")
                domain = LabelDomain("real", center - threshold, center + threshold)
            k = theorem6_k(n, epsilon, d, self.smoothness, self.k_scale, self.epsilon_cap)
            if self.k is not None:
                k = _clip_k(self.k, n)
        if self.k is not None:
            rule = "fixed-k"
        return k, threshold, domain, rule

    def _mechanism(self, domain: LabelDomain) -> Laplace:
        # clip=False: the k-NN mean needs E[Z | Y] = Y_T; output clipping would bias it.
        return Laplace(self.epsilon, domain, variant=self.variant, clip=False).fit_to()

    # -- the two parties ---------------------------------------------------------

    def fit(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> LaplaceKNNRegressor:
        """Privatize y with the Laplace of the plan (labels party), then ``fit_privatized`` (features party)."""
        X = _check_features(X)
        y = check_labels(y).ravel()
        if y.shape[0] != X.shape[0]:
            raise ValueError("X and y must have the same number of rows")
        _, _, domain, _ = self.plan(X.shape[0], X.shape[1])
        privatized = self._mechanism(domain).privatize(y, rng)
        return self.fit_privatized(X, privatized)

    def fit_privatized(self, X: np.ndarray, privatized: np.ndarray) -> LaplaceKNNRegressor:
        """Build the k-NN regressor from the features and the released labels only (post-processing)."""
        X = _check_features(X)
        privatized = check_labels(privatized).ravel()
        if privatized.shape[0] != X.shape[0]:
            raise ValueError("X and the privatized labels must have the same number of rows")
        n, d = X.shape
        self.k_, self.clip_, self.domain_, self.rule_ = self.plan(n, d)
        self.mechanism_ = self._mechanism(self.domain_)
        self.n_features_in_ = d
        self.privatized_labels_ = privatized.copy()
        self.tree_ = cKDTree(X)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """η̂(x) = mean of the privatized labels of the k nearest training rows (eq. 20)."""
        X = _check_features(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted on {self.n_features_in_}")
        return knn_average(self.tree_, self.privatized_labels_, X, self.k_, self.workers)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """The Laplace mechanism's ε-label-DP claim; everything after it is post-processing."""
        g = self.mechanism_.guarantee
        return PrivacyGuarantee(
            epsilon=g.epsilon,
            delta=g.delta,
            adjacency=g.adjacency,
            sensitivity=g.sensitivity,
            statement=g.statement + "; labels clipped to the public range first, the k-NN mean is post-processing",
        )


def _check_features(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError("X must be a non-empty 2-D array")
    if not np.isfinite(X).all():
        raise ValueError("X must be finite")
    return X

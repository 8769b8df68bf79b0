"""Exactly optimal RR-on-Bins partition (Ghazi et al. 2023, Alg. 2 + App. B), fast.

Problem. Labels y¹ < … < yᵏ with prior p, t = e^{−ε}, s = 1 − t. For a bin S
(an interval of labels) and an output o, the scaled cost is

    c_S(o) = Σ_y p_y·w_S(y)·ℓ(o, y),   w_S(y) = 1 if y ∈ S else t,

and Algorithm 2 asks for min over partitions P into d intervals of
Σ_{S∈P} min_o c_S(o), divided by 1 + (d − 1)·t (the paper's d − 1 + e^ε, times t,
so nothing overflows for large ε). ``optimal_bins_reference`` is that algorithm
verbatim: the full O(k³) table over every d, output optimized over all of ℝ.

Fast and still exact (``optimal_bins``): three facts, each proved here and
tested in tests/unit/test_rr_on_bins*.py.

1. Clamped costs do not change the optimum. For S = {y^{r+1}, …, y^i} let
   J(S) = [y^r, y^{i+1}] (the neighbouring labels; y⁰ = −∞, y^{k+1} = +∞) and
   c̃(S) = min_{o ∈ J(S)} c_S(o) ≥ c(S). Take an optimal mechanism, drop outputs
   no label uses (an unused output o adds t·F(o) to the numerator and t to the
   denominator, and F(o) = E_P ℓ(o, y) ≥ min F = the 1-bin loss ≥ the optimum,
   so dropping it never hurts) and give every label its nearest output (ties
   to the lower one). ℓ(·, y) strictly decreases towards y and ℓ(o, ·) is
   single-peaked the other way (Assumption 4, strictly for our three losses), so
   each output's labels form an interval S_j and o_j ∈ J(S_j): if o_j < y^r,
   then y^r, which went to some o_{j'} < o_j, would be strictly nearer o_j.
   This optimal mechanism's scaled cost Σ_j c_{S_j}(o_j) is then >= Σ_j c̃(S_j),
   so the partition {S_j} has c̃-ratio <= the optimum; and every partition's
   c̃-ratio is >= its true ratio >= the optimum. So min over partitions of the
   c̃-ratio IS the optimum, attained with outputs inside J.

2. c̃ satisfies the quadrangle inequality (QI). For a ≤ b < c ≤ d write
   [a, d] for the interval with points a+1..d. Let o₁ attain c̃[a, d] and
   o₂ attain c̃[b, c]. If o₁ ≤ o₂, use o₁ for [a, c] and o₂ for [b, d] (both lie
   in the right J): c̃[a,c] + c̃[b,d] − c̃[a,d] − c̃[b,c] ≤ s·Σ_{y∈(c,d]} p_y
   (ℓ(o₂,y) − ℓ(o₁,y)) ≤ 0, because those y ≥ y^{c+1} ≥ o₂ ≥ o₁. If o₁ > o₂,
   swap the roles; the leftover sum runs over y ∈ (a, b], all ≤ y^b ≤ o₂ < o₁.
   Only monotonicity of ℓ is used, so this holds for squared, absolute and
   Poisson loss alike. (Without the clamp QI fails, on ~8 % of random
   quadruples, and divide-and-conquer per layer or the queue below return
   suboptimal partitions on some priors; tests keep such priors.)

3. The ratio is removed by Dinkelbach's method: for λ, solve
   min_P Σ_{S∈P} (c̃(S) − λt) − λs  (a 1-D DP with no bin-count index), set
   λ ← N(P)/D(P) of the minimizing partition, repeat while λ strictly
   decreases. λ only decreases and there are finitely many partitions, so it
   stops, and at the fixed point min_P N − λD = 0, i.e. λ is the minimum ratio
   over all d (no layer per d, no bound on d, no convexity in d needed). With QI, a newer split
   point that beats an older one at some row beats it at every later row, so each DP is the classic monotone-queue
   least-weight-subsequence algorithm with binary search: O(k log k) cost
   evaluations. Typically 3–6 Dinkelbach rounds.

Per-interval costs (App. B), from prefix sums of p, p·y and p·h(y):

* squared: o* = weighted mean X/W, c(o) = (Z − X·o*) + W·(o − o*)², h = y²;
* Poisson (ℓ = o − y log o, labels ≥ 0): the per-label constant y log y − y is
  added (so the cost is the half deviance ≥ 0; a per-label constant shifts every
  d's ratio equally and does not move the optimum), o* = X/W, c(o) =
  (Z − X log o*) + X·(o/o* − 1 − log(o/o*)), h = y log y;
* absolute: o* = weighted median, a label, found by binary search on the
  tilted cumulative weight (O(log k)), c(o) from prefix sums.

Numerics: squared/absolute labels are centred on the prior mean and scaled to
[−1, 1]; Poisson labels are scaled by their maximum (the deviance is 1-homogeneous).
ε is capped at 500 inside the kernel (t = e^{−500} ≈ 7e−218: every probability
and loss is then identical in float64) so t never underflows to 0, and every
weight sum W >= t > 0. The kernels use numba's numpy error model (no Python
ZeroDivisionError checks); the cost is inlined (numba IR) at the DP's two hot
sites only: inlined it costs a few ns, called ~20–150 ns, and every inlined copy
adds seconds of compilation.
"""

from __future__ import annotations

import math

import numba
import numpy as np

LOSSES = ("squared", "absolute", "poisson")
SQUARED, ABSOLUTE, POISSON = 0, 1, 2
_LOSS_CODE = {"squared": SQUARED, "absolute": ABSOLUTE, "poisson": POISSON}
_EPSILON_CAP = 500.0
_MAX_DINKELBACH = 200


def loss_code(loss: str) -> int:
    """Validate a loss name; its integer code for the kernels."""
    if loss not in _LOSS_CODE:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    return _LOSS_CODE[loss]


def pointwise_loss(outputs: np.ndarray, labels: np.ndarray, loss: str) -> np.ndarray:
    """ℓ(ŷ, y) elementwise (broadcasting): (ŷ − y)², |ŷ − y| or ŷ − y·log ŷ."""
    outputs = np.asarray(outputs, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    code = loss_code(loss)
    if code == SQUARED:
        return (outputs - labels) ** 2
    if code == ABSOLUTE:
        return np.abs(outputs - labels)
    return outputs - labels * np.log(outputs)


def _xlogx(y: np.ndarray) -> np.ndarray:
    """y·log y with 0·log 0 = 0."""
    out = np.zeros_like(y)
    pos = y > 0
    out[pos] = y[pos] * np.log(y[pos])
    return out


def _prepare(grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str):
    """Validate and normalize; returns (code, y, p, t, s, shift, scale, loss_scale, loss_offset).

    The raw expected loss is ``loss_scale · (scaled ratio) + loss_offset``.
    """
    code = loss_code(loss)
    grid = np.ascontiguousarray(grid, dtype=np.float64)
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or probs.shape != grid.shape:
        raise ValueError("grid and probs must be non-empty 1-D arrays of equal length")
    if not (np.all(np.isfinite(grid)) and np.all(np.isfinite(probs))):
        raise ValueError("grid and probs must be finite")
    if np.any(np.diff(grid) <= 0):
        raise ValueError("grid must be strictly increasing")
    if np.any(probs < 0) or not probs.sum() > 0:
        raise ValueError("probs must be >= 0 with a positive sum")
    epsilon = float(epsilon)
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a finite number >= 0")
    epsilon = min(epsilon, _EPSILON_CAP)
    t, s = math.exp(-epsilon), -math.expm1(-epsilon)
    p = probs / probs.sum()
    if code == POISSON:
        if grid[0] < 0:
            raise ValueError("Poisson loss needs labels >= 0")
        if not float(np.dot(p, grid)) > 0:
            raise ValueError("Poisson loss needs a prior with a positive mean")
        scale = float(grid[-1])
        y = grid / scale
        offset = -float(np.dot(p, _xlogx(grid) - grid))  # E[ℓ] = E[half deviance] − E[y log y − y]
        return code, y, p, t, s, 0.0, scale, scale, offset
    centre = float(np.dot(p, grid))
    scale = float(np.max(np.abs(grid - centre)))
    if not (scale > 0 and math.isfinite(scale)):
        scale = 1.0
    y = (grid - centre) / scale
    loss_scale = scale * scale if code == SQUARED else scale
    return code, y, p, t, s, centre, scale, loss_scale, 0.0


def _prefix_numpy(code: int, y: np.ndarray, p: np.ndarray):
    zero = np.zeros(1)
    h = y * y if code == SQUARED else (_xlogx(y) if code == POISSON else np.zeros_like(y))
    return (
        np.concatenate([zero, np.cumsum(p)]),
        np.concatenate([zero, np.cumsum(p * y)]),
        np.concatenate([zero, np.cumsum(p * h)]),
    )


def cut_points(outputs: np.ndarray, loss: str) -> np.ndarray:
    """Label thresholds between consecutive outputs: the y where both outputs lose equally.

    With outputs fixed, a label's expected loss is q·Σ_j ℓ(o_j, y) + (p − q)·ℓ(o_Φ(y), y),
    so the best Φ(y) is the output with the smallest ℓ(o, y). For o_a < o_b the label
    prefers o_a exactly when y is at most the cut:

    * squared and absolute loss: (o_a − y)² ≤ (o_b − y)² ⇔ |o_a − y| ≤ |o_b − y| ⇔
      y ≤ (o_a + o_b)/2, the midpoint;
    * Poisson loss: o_a − y log o_a ≤ o_b − y log o_b ⇔
      y ≤ (o_b − o_a)/(log o_b − log o_a), the logarithmic mean (between the
      geometric and the arithmetic mean, so NOT the midpoint).
    """
    outputs = np.asarray(outputs, dtype=np.float64)
    if loss_code(loss) != POISSON:
        return 0.5 * (outputs[:-1] + outputs[1:])
    a, b = outputs[:-1], outputs[1:]
    if np.any(a <= 0):
        raise ValueError("Poisson outputs must be > 0")
    return (b - a) / np.log1p((b - a) / a)


def _finish(outputs: np.ndarray, loss_value: float, prepared, grid: np.ndarray, loss: str):
    """Undo the scaling, sort and merge equal outputs, bin every grid point by the nearest-output rule.

    Equal outputs arise in ties (e.g. absolute loss at small ε, where every bin's
    weighted median is the prior's median and all d have the same ratio). Merging
    them never raises the loss: the copy's bin can be emptied at no cost, and an
    unused output o adds t·F(o) >= t·optimum to the scaled numerator and t to the
    denominator.
    """
    code, _, _, _, _, shift, scale, loss_scale, offset = prepared
    outputs = np.unique(shift + scale * np.asarray(outputs, dtype=np.float64))
    if code == POISSON:
        outputs = np.maximum(outputs, np.finfo(np.float64).tiny)
    cuts = cut_points(outputs, loss)
    bins = np.searchsorted(cuts, grid, side="left").astype(np.int64)
    return bins, outputs.astype(np.float64), float(loss_scale * loss_value + offset)


# --------------------------------------------------------------------------- numba kernels


@numba.njit(cache=True, error_model="numpy")
def _prefix_sums(code, y, p):
    k = y.size
    c0 = np.zeros(k + 1)
    c1 = np.zeros(k + 1)
    c2 = np.zeros(k + 1)
    for g in range(k):
        v = y[g]
        if code == SQUARED:
            h = v * v
        elif code == POISSON:
            h = v * math.log(v) if v > 0.0 else 0.0
        else:
            h = 0.0
        c0[g + 1] = c0[g] + p[g]
        c1[g + 1] = c1[g] + p[g] * v
        c2[g + 1] = c2[g] + p[g] * h
    return c0, c1, c2


@numba.njit(cache=True, error_model="numpy", inline="always")
def _interval(code, r, i, y, c0, c1, c2, t, s):
    """(c̃, output) for the bin of points r..i−1: the cost minimized over o ∈ J = [y[r−1], y[i]]."""
    k = y.size
    w = t * c0[k] + s * (c0[i] - c0[r])
    x = t * c1[k] + s * (c1[i] - c1[r])
    lo = y[r - 1] if r > 0 else -np.inf
    hi = y[i] if i < k else np.inf
    if code == ABSOLUTE:
        # Lowest weighted median: smallest g with tilted weight of points 0..g >= w/2.
        half = 0.5 * w
        a = 0
        b = k - 1
        while a < b:
            g = (a + b) // 2
            m = g + 1
            mm = m if m < i else i
            if mm < r:
                mm = r
            if t * c0[m] + s * (c0[mm] - c0[r]) >= half:
                b = g
            else:
                a = g + 1
        if r > 0 and a < r - 1:
            a = r - 1
        if i < k and a > i:
            a = i
        o = y[a]
        m = a + 1
        mm = m if m < i else i
        if mm < r:
            mm = r
        wl = t * c0[m] + s * (c0[mm] - c0[r])
        xl = t * c1[m] + s * (c1[mm] - c1[r])
        v = (o * wl - xl) + ((x - xl) - o * (w - wl))
        return (v if v > 0.0 else 0.0), o
    z = t * c2[k] + s * (c2[i] - c2[r])
    mean = x / w
    o = mean
    if o < lo:
        o = lo
    elif o > hi:
        o = hi
    if code == SQUARED:
        v = z - x * mean
        if v < 0.0:
            v = 0.0
        d = o - mean
        return v + w * d * d, o
    # Poisson half deviance; x > 0 because the whole prior (weight t) has a positive mean.
    v = z - x * math.log(mean)
    if v < 0.0:
        v = 0.0
    if o != mean:
        u = o / mean
        v += x * (u - 1.0 - math.log(u))
    return v, o


@numba.njit(cache=True, error_model="numpy", inline="always")
def _cost(code, r, i, y, c0, c1, c2, t, s):
    return _interval(code, r, i, y, c0, c1, c2, t, s)[0]


@numba.njit(cache=True, error_model="numpy")
def _interval_call(code, r, i, y, c0, c1, c2, t, s):
    """Not inlined: for the O(k) uses outside the DP's hot loop (keeps compile time down)."""
    return _interval(code, r, i, y, c0, c1, c2, t, s)


@numba.njit(cache=True, error_model="numpy")
def _penalized_dp(code, y, c0, c1, c2, t, s, pen, best, parent, qr, qs):
    """best[i] = min_{r<i} best[r] + c̃(r, i) − pen, by the monotone queue (needs QI).

    Queue entry j: split point qr[j] is the best for rows qs[j] .. qs[j+1]−1. A new
    split point c, once at least as good as an older one at a row, stays so at every
    later row (QI), so it takes over a suffix of the rows. Inserting c runs three
    phases through ONE comparison site (the cost is inlined there): 0 = pop back
    entries whose whole remaining range c wins; 1 = does c win at the last row k?;
    2 = bisection for the first row where c wins.
    """
    k = y.size
    best[0] = 0.0
    head = 0
    tail = 0
    for i in range(1, k + 1):
        c = i - 1
        bc = best[c]
        phase = 0
        lo = 0
        hi = 0
        row = i
        while tail > head:
            rb = qr[tail - 1]
            if phase == 0:
                row = qs[tail - 1]
                if row < i:
                    row = i
            win = bc + _cost(code, c, row, y, c0, c1, c2, t, s) <= best[rb] + _cost(code, rb, row, y, c0, c1, c2, t, s)
            if phase == 0:
                if win:
                    tail -= 1
                    continue
                lo = row + 1
                hi = k
                if lo > hi:
                    break
                phase = 1
                row = hi
                continue
            if phase == 1:
                if not win:
                    break
                phase = 2
            elif win:
                hi = row
            else:
                lo = row + 1
            if lo >= hi:
                qr[tail] = c
                qs[tail] = lo
                tail += 1
                break
            row = (lo + hi) // 2
        if tail == head:
            qr[tail] = c
            qs[tail] = i
            tail += 1
        while tail - head >= 2 and qs[head + 1] <= i:
            head += 1
        r = qr[head]
        best[i] = best[r] + _cost(code, r, i, y, c0, c1, c2, t, s) - pen
        parent[i] = r


@numba.njit(cache=True, error_model="numpy")
def _optimal_bins_kernel(code, y, p, t, s):
    """Dinkelbach over the penalized DP; returns (outputs, ratio, rounds, converged), scaled units.

    ``converged`` is False only if the round cap came before the fixed point (never seen).
    """
    k = y.size
    c0, c1, c2 = _prefix_sums(code, y, p)
    best = np.empty(k + 1)
    parent = np.zeros(k + 1, dtype=np.int64)
    qr = np.empty(k + 1, dtype=np.int64)
    qs = np.empty(k + 1, dtype=np.int64)
    starts = np.zeros(k + 1, dtype=np.int64)  # bin start of the incumbent, read back to front
    n_bins = 1
    lam = _interval_call(code, 0, k, y, c0, c1, c2, t, s)[0]  # one bin: D = 1
    rounds = 0
    converged = False
    while rounds < _MAX_DINKELBACH and lam > 0.0:
        rounds += 1
        _penalized_dp(code, y, c0, c1, c2, t, s, lam * t, best, parent, qr, qs)
        total = 0.0
        d = 0
        i = k
        while i > 0:
            r = parent[i]
            total += _interval_call(code, r, i, y, c0, c1, c2, t, s)[0]
            d += 1
            i = r
        ratio = total / (1.0 + (d - 1) * t)
        if not ratio < lam:
            converged = True
            break
        lam = ratio
        n_bins = d
        i = k
        j = 0
        while i > 0:
            starts[j] = parent[i]
            j += 1
            i = parent[i]
    converged = converged or lam <= 0.0  # a zero loss cannot be improved
    outputs = np.empty(n_bins)
    i = k
    for j in range(n_bins):
        r = starts[j] if n_bins > 1 else 0
        outputs[n_bins - 1 - j] = _interval_call(code, r, i, y, c0, c1, c2, t, s)[1]
        i = r
    return outputs, lam, rounds, converged


@numba.njit(cache=True, error_model="numpy")
def _clamped_table_numba(code, y, p, t, s):
    """Full table of the kernel's c̃ (row i−1, column r), for tests on small k."""
    k = y.size
    c0, c1, c2 = _prefix_sums(code, y, p)
    out = np.full((k, k), np.inf)
    for i in range(1, k + 1):
        for r in range(i):
            out[i - 1, r] = _interval_call(code, r, i, y, c0, c1, c2, t, s)[0]
    return out


def optimal_bins(
    grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str = "squared"
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exactly optimal RR-on-Bins for prior (grid, probs): (bin_of_grid, outputs, expected_loss).

    ``outputs`` are the m bin values in ascending order, ``bin_of_grid[g]`` the bin
    (0..m−1) of grid point g by the nearest-output rule of ``cut_points`` (every
    grid point, zero-mass ones included), ``expected_loss`` E[ℓ(ŷ, y)] under the
    prior (for Poisson the raw ŷ − y log ŷ). O(k) memory, O(R·k log k) cost
    evaluations for R Dinkelbach rounds (O(R·k log² k) for absolute loss).
    """
    prepared = _prepare(grid, probs, epsilon, loss)
    code, y, p, t, s = prepared[:5]
    outputs, ratio, _, converged = _optimal_bins_kernel(code, y, p, t, s)
    if not converged:
        raise RuntimeError(f"Dinkelbach did not reach its fixed point in {_MAX_DINKELBACH} rounds")
    return _finish(outputs, ratio, prepared, np.asarray(grid, dtype=np.float64), loss)


def optimal_bins_stats(grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str = "squared") -> dict:
    """Diagnostics for benchmarks: bins m and the number of Dinkelbach rounds."""
    prepared = _prepare(grid, probs, epsilon, loss)
    code, y, p, t, s = prepared[:5]
    outputs, _, rounds, _ = _optimal_bins_kernel(code, y, p, t, s)
    return {"bins": int(outputs.size), "rounds": int(rounds)}


# --------------------------------------------------------------------------- numpy reference


def interval_cost_table(
    code: int, y: np.ndarray, p: np.ndarray, t: float, s: float, clamp: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(cost, output) tables, row i−1 and column r for the bin of points r..i−1 (inf where r ≥ i).

    ``clamp=False`` is Algorithm 2's L[r+1][i] (output anywhere in ℝ); ``clamp=True``
    the c̃ of the fast kernel (output restricted to J = [y[r−1], y[i]]).
    """
    with np.errstate(invalid="ignore", divide="ignore"):  # entries with r >= i are garbage, masked below
        return _interval_cost_table(code, y, p, t, s, clamp)


def _interval_cost_table(code: int, y: np.ndarray, p: np.ndarray, t: float, s: float, clamp: bool):
    k = y.size
    c0, c1, c2 = _prefix_numpy(code, y, p)
    ii, rr = np.meshgrid(np.arange(1, k + 1), np.arange(k), indexing="ij")
    valid = rr < ii
    w = t * c0[k] + s * (c0[ii] - c0[rr])
    x = t * c1[k] + s * (c1[ii] - c1[rr])
    lo = np.where(rr > 0, y[np.maximum(rr - 1, 0)], -np.inf)
    hi = np.where(ii < k, y[np.minimum(ii, k - 1)], np.inf)

    def tilted(prefix: np.ndarray, m: np.ndarray) -> np.ndarray:  # weight-tilted sum over points 0..m−1
        return t * prefix[m] + s * (prefix[np.clip(m, rr, ii)] - prefix[rr])

    if code == ABSOLUTE:
        a = np.zeros_like(ii)
        b = np.full_like(ii, k - 1)
        for _ in range(int(np.ceil(np.log2(max(k, 2)))) + 1):  # bisection for the lowest weighted median
            g = (a + b) // 2
            ok = tilted(c0, g + 1) >= 0.5 * w
            b = np.where(ok, g, b)
            a = np.where(ok, a, np.minimum(g + 1, b))
        if clamp:
            a = np.where(rr > 0, np.maximum(a, rr - 1), a)
            a = np.where(ii < k, np.minimum(a, ii), a)
        o = y[a]
        wl, xl = tilted(c0, a + 1), tilted(c1, a + 1)
        cost = (o * wl - xl) + ((x - xl) - o * (w - wl))
        cost = np.maximum(cost, 0.0)
    else:
        z = t * c2[k] + s * (c2[ii] - c2[rr])
        mean = x / w
        o = np.clip(mean, lo, hi) if clamp else mean
        if code == SQUARED:
            cost = np.maximum(z - x * mean, 0.0) + w * (o - mean) ** 2
        else:
            u = o / mean
            cost = np.maximum(z - x * np.log(mean), 0.0) + x * (u - 1.0 - np.log(u))
    return np.where(valid, cost, np.inf), np.where(valid, o, np.nan)


def optimal_bins_reference(
    grid: np.ndarray, probs: np.ndarray, epsilon: float, loss: str = "squared"
) -> tuple[np.ndarray, np.ndarray, float]:
    """Straightforward Algorithm 2 in numpy: L over all ℝ and the full O(k³) table over every d.

    Same contract as :func:`optimal_bins`; kept as the readable reference the fast
    kernel is tested and benchmarked against. O(k²) memory.
    """
    prepared = _prepare(grid, probs, epsilon, loss)
    code, y, p, t, s = prepared[:5]
    k = y.size
    lt, out = interval_cost_table(code, y, p, t, s, clamp=False)

    # a[d, i]: best scaled cost of the first i grid points in d bins.
    a = np.full((k + 1, k + 1), np.inf)
    a[0, 0] = 0.0
    parent = np.zeros((k + 1, k + 1), dtype=np.int64)
    rows = np.arange(k)
    for d in range(1, k + 1):
        cand = a[d - 1, :k][None, :] + lt  # cand[i−1, r] = A[r][d−1] + L[r+1..i]
        parent[d, 1:] = np.argmin(cand, axis=1)
        a[d, 1:] = cand[rows, parent[d, 1:]]
    losses = a[1:, k] / (1.0 + np.arange(k) * t)
    best_d = int(np.argmin(losses)) + 1

    outputs = np.empty(best_d)
    i = k
    for d in range(best_d, 0, -1):
        r = int(parent[d, i])
        outputs[d - 1] = out[i - 1, r]
        i = r
    return _finish(outputs, float(losses[best_d - 1]), prepared, np.asarray(grid, dtype=np.float64), loss)

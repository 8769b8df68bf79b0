"""Does the recipe of a training of several processes keep the default recipe's accuracy (record 0038)?

Usage:
    python research/studies/process_recipe.py --one research/results/process_recipe/p1 \
        --many research/results/process_recipe/p2 --out research/results/process_recipe/README.md

``--one`` and ``--many`` hold the runner's tables (``utility_<set>.json``) of the same data sets, cells,
splits and seeds, trained with the default recipe of 1 process and with that of several
(``python -m labeldp_research utility --processes N``: ``recipe_for_processes``, a larger global batch at a
√-scaled learning rate, in one process: the batch is global, so the model does not depend on how many
processes run it). Per cell: the test MSE of each, their ratio and the paired difference (same trial,
same split and seed) with its standard error.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def cells(result: dict[str, Any]) -> dict[tuple[str, float], dict[int, float]]:
    """(mechanism, ε) → trial → the default learning's test MSE (the non-private model at ε = ∞ included)."""
    out: dict[tuple[str, float], dict[int, float]] = {}
    for c in result["raw_cells"]:
        mse = (c.get("learners") or {}).get("private", {}).get("test_mse")
        if c.get("error") is None and mse is not None:
            out.setdefault((c["mechanism"], float(c["epsilon"])), {})[int(c["trial"])] = float(mse)
    return out


def recipe(result: dict[str, Any]) -> str:
    t = result["training"]
    return f"batch {t['batch_size']}, lr {t['learning_rate']:.2g}"


def compare(one: dict[str, Any], many: dict[str, Any]) -> list[str]:
    """One table row per cell both hold: MSEs, ratio, paired difference ± SE."""
    rows = []
    a, b = cells(one), cells(many)
    for key in sorted(set(a) & set(b), key=lambda k: (k[1], k[0])):
        trials = sorted(set(a[key]) & set(b[key]))  # paired: the same trial's split and seed
        x, y = [a[key][t] for t in trials], [b[key][t] for t in trials]
        n = len(trials)
        diffs = [yi - xi for xi, yi in zip(x, y)]
        mean = sum(diffs) / n
        se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else math.nan
        mx, my = sum(x) / n, sum(y) / n
        eps = "∞" if math.isinf(key[1]) else f"{key[1]:g}"
        rows.append(
            f"| `{one['dataset']}` | {key[0]} | {eps} | {n} | {mx:.5g} | {my:.5g} | {my / mx:.3f}× "
            f"| {mean:+.3g} ± {se:.2g} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", type=Path, required=True, help="tables of the 1-process recipe")
    parser.add_argument("--many", type=Path, required=True, help="tables of the several-process recipe")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    lines = [
        "| set | mechanism | ε | trials | test MSE, 1 process | several processes | ratio "
        "| paired difference ± SE |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    recipes = []
    for path in sorted(args.one.glob("utility_*.json")):
        other = args.many / path.name
        if not other.exists():
            continue
        one, many = json.loads(path.read_text()), json.loads(other.read_text())
        lines += compare(one, many)
        recipes.append(f"- `{one['dataset']}`: {one['n_train_fit']:,} training rows; 1 process {recipe(one)}; "
                       f"several {recipe(many)}; commands: `{one['command']}` and `{many['command']}`")
    text = "\n".join(["## Paired test MSE", "", *lines, "", "## Recipes and commands", "", *recipes]) + "\n"
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

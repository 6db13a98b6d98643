"""A job run several times (``run --repeat N``, :mod:`dlio_ckpt.tools.drivers.repeats`) read back: each repeat an
ordinary run in ``<run folder>/repeat<k>/``, and ``<run folder>/repeats.json`` with each headline figure's median and
a distribution-free interval for it.

Why the median and an order-statistic interval, not a mean and a t-interval: storage times are skewed (a slow
run is slower by far more than a fast run is faster), repeats are few, and nothing here is normal. The interval
is the classic one for the median: with ``n`` repeats sorted, the ``j``-th and ``(n+1-j)``-th values enclose the
true median with probability ``1 - 2 P(Binomial(n, 1/2) < j)``; ``j`` is the largest whose coverage is at least
95 %. Below six repeats no pair reaches 95 % (five give 93.75 % at their extremes): the interval is then the
minimum and maximum, and its ``coverage`` says how sure it is. ``diff`` reads these intervals: a change is a
regression only where the two intervals separate.

Why the folder layout: each repeat stays a run every tool reads (``report``, ``check``, ``diff`` of two repeats),
and the parent is what a person compares (``diff A B`` of two parents).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from dlio_ckpt.tools.readers.runfiles import Run, UnreadableRunError, load_run, number

REPEATS = "repeats.json"
CONFIDENCE = 0.95
INTERVAL = ("order-statistic interval for the median (distribution-free): the j-th smallest and j-th largest of the "
            "n repeats, j the largest with 1 - 2*P(Binomial(n, 1/2) < j) >= 0.95; with fewer than 6 repeats no pair "
            "reaches 95 %: the minimum and maximum, with their coverage")


def order_rank(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """(j, coverage) of the interval for the median of ``n`` repeats: see the module's docstring. It depends on
    ``n`` alone, so ``diff`` says the coverage of a repeated run's intervals from its count of repeats."""
    below = 0.0  # P(Binomial(n, 1/2) < j), for j = 1, 2, ...
    best = (1, 1 - 2 * 0.5 ** n)  # the minimum and maximum, whatever their coverage
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1) * 0.5 ** n
        coverage = 1 - 2 * below
        if coverage < confidence:
            break
        best = (j, coverage)
    return best


def order_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, coverage) for the median of ``values``: the j-th smallest and j-th largest (:func:`order_rank`)."""
    xs, n = sorted(values), len(values)
    j, coverage = order_rank(n, confidence)
    return xs[j - 1], xs[n - j], coverage


def figures_of(run: Run) -> dict[str, float]:
    """A run's headline figures: every number of its ``metric`` (DLIO's means, ours, the latency headlines)."""
    return {k: v for k, value in run.metric.figures().items() if (v := number(value)) is not None}


def summarize(runs: list[Run]) -> dict[str, Any]:
    """``repeats.json``'s body from the repeats' runs."""
    names = dict.fromkeys(k for r in runs for k in figures_of(r))
    metrics = {}
    for name in names:
        values = [v for r in runs if (v := figures_of(r).get(name)) is not None]
        if len(values) < len(runs):
            continue  # a figure some repeats lack is not one figure repeated
        low, high, coverage = order_interval(values)
        metrics[name] = {"median": statistics.median(values), "low": low, "high": high, "coverage": coverage,
                         "values": values}
    return {"repeats": len(runs), "runs": [r.path for r in runs], "interval": INTERVAL, "metrics": metrics}


def is_repeats(path: str) -> bool:
    return (Path(path) / REPEATS).is_file()


def load_repeats(path: str) -> Run:
    """A repeated run as ``diff`` reads it: the first repeat's run (its config, layout, files) with each metric
    its median, and ``intervals`` for each."""
    try:
        body = json.loads((Path(path) / REPEATS).read_text())
        metrics = body["metrics"]
        first = load_run(str(Path(path) / Path(body["runs"][0]).name))
    except (OSError, KeyError, IndexError, TypeError, json.JSONDecodeError) as exc:
        raise UnreadableRunError(f"{path}/{REPEATS}: not a repeats file ({exc})") from None
    medians = {name: m["median"] for name, m in metrics.items()}
    metric = type(first.metric).model_validate({**first.metric.figures(), **medians})  # a median of ints may be x.5
    summary = first.summary.model_copy(update={"metric": metric})
    return Run(path, Path(path), summary, first.config, first.per_process,
               intervals={n: (m["low"], m["high"]) for n, m in metrics.items()}, repeats=body["repeats"])

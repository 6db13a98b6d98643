"""What checkpointing costs training, from a few measured (or assumed) times.

Assumptions, stated once (docs/guides/async-and-tiers.md repeats them): failures arrive independently at a mean time
between failures ``M``; after one, the job restarts from the last checkpoint that was durable and
loses on average half an interval of training plus whatever was not yet durable, then pays a load.
With ``tau`` the training time between checkpoints, ``C`` the time each checkpoint holds training,
``D`` the time from a checkpoint's start until it is durable and ``R`` the load time:

- expected work lost per failure: ``L = tau / 2 + D + R``
- goodput (fraction of wall time spent on training that is kept): ``tau / (tau + C) * (1 - L / M)``
- Young/Daly's optimal interval (first order): ``tau* = sqrt(2 * C * M)``
"""

from __future__ import annotations

import math
from typing import Any


def lost_per_failure(tau: float, durable: float, load: float) -> float:
    return tau / 2 + durable + load


def goodput(tau: float, held: float, durable: float, load: float, mtbf: float) -> float:
    if tau + held <= 0:
        return 0.0
    return max(0.0, tau / (tau + held) * (1 - lost_per_failure(tau, durable, load) / mtbf))


def figures(tau: float, held: float, durable: float, load: float, mtbf_hours: float) -> dict[str, Any]:
    """The summary's ``goodput`` section (seconds; goodput as a fraction)."""
    mtbf = mtbf_hours * 3600
    best = math.sqrt(2 * held * mtbf)
    return {"mtbf_hours": mtbf_hours, "interval_seconds": tau, "held_seconds_per_checkpoint": held,
            "time_to_durable_seconds": durable, "load_seconds": load,
            "lost_per_failure_seconds": lost_per_failure(tau, durable, load),
            "goodput": goodput(tau, held, durable, load, mtbf),
            "optimal_interval_seconds": best,
            "lost_per_failure_at_optimal_seconds": lost_per_failure(best, durable, load),
            "goodput_at_optimal": goodput(best, held, durable, load, mtbf),
            "formulas": "lost = interval/2 + time_to_durable + load; goodput = interval/(interval+held) * "
                        "(1 - lost/MTBF); optimal interval = sqrt(2 * held * MTBF) (Young/Daly)"}


def load_seconds(checkpoint_bytes: int, bandwidth: float, heaviest_rank_bytes: int | None = None,
                 ranks: int | None = None) -> float:
    """A load's time at an aggregate read ``bandwidth`` (bytes/s). Each rank reading its own files whole at the
    save's world size (DLIO's read phase) reads the checkpoint: ``checkpoint_bytes / bandwidth``. A restore
    planned otherwise (another world size, the model alone, another tensor parallelism: ``dlio_ckpt.plan.reads``)
    is not the checkpoint over the bandwidth: its ranks read other amounts, whole stored chunks of which they
    need a part, and it ends when its heaviest rank does. With the bandwidth shared evenly among its ``ranks``
    that is ``heaviest_rank_bytes * ranks / bandwidth`` (what the heaviest rank reads, metadata included)."""
    if heaviest_rank_bytes is None or ranks is None:
        return checkpoint_bytes / bandwidth
    return heaviest_rank_bytes * ranks / bandwidth


def what_if(tau: float, write: float, load: float, mtbf_hours: float, staging: float | None = None,
            drain: float | None = None) -> dict[str, Any]:
    """``plan``'s what-if, from times alone (seconds): ``write`` of one checkpoint, ``load`` of one,
    ``staging`` (async saves: the device-to-host copy that holds training; None: synchronous saves),
    ``drain`` (the copy to a tier below, after the write; None: no tier).

    What follows from them, checkpoint after checkpoint in the steady state:
    - synchronous: training is held for the write, ``C = write``; durable after ``write``.
    - async: the write runs in the background during the next interval; when it takes longer than
      the interval the next checkpoint waits for it, so ``C = staging + max(0, write - tau)``;
      durable after ``staging + write``.
    - a drain runs after its write, one at a time: it keeps up only when it takes no longer than
      the time between two checkpoints' starts, ``tau + C``. When it does not, drains fall further
      behind at every checkpoint and the time to durable grows without bound: there is no steady
      goodput to give, and the answer says so instead of giving one.
    - the best interval: Young/Daly's ``sqrt(2 * C * M)`` with ``C`` what a checkpoint holds when
      nothing stalls, raised where that is too short for the write to finish in the background
      (async: below ``write`` every second less is a second of stall) or for the drain to keep up.
    """
    mtbf = mtbf_hours * 3600
    base = write if staging is None else staging  # what a checkpoint holds when nothing waits
    stall = 0.0 if staging is None else max(0.0, write - tau)
    held = base + stall
    durable = write + (staging or 0.0) + (drain or 0.0)
    out: dict[str, Any] = {"mtbf_hours": mtbf_hours, "interval_seconds": tau, "write_seconds": write}
    if staging is not None:
        out |= {"staging_seconds": staging, "write_keeps_up": write <= tau, "stalled_seconds_per_checkpoint": stall}
    out |= {"held_seconds_per_checkpoint": held, "time_to_durable_seconds": durable, "load_seconds": load}
    says = []
    if stall > 0:
        says.append(f"the background write ({write:.4g} s) does not fit in the {tau:.4g} s interval: every "
                    f"checkpoint holds training {held:.4g} s ({stall:.4g} s of it waiting for the previous write)")
    keeps_up = True
    if drain is not None:
        behind = drain - (tau + held)
        keeps_up = behind <= 0
        out |= {"drain_seconds": drain, "drain_keeps_up": keeps_up,
                "drain_falls_behind_seconds_per_checkpoint": max(0.0, behind)}
        if not keeps_up:
            says.append(f"the drain ({drain:.4g} s) takes longer than the {tau + held:.4g} s between checkpoints: "
                        f"it falls {behind:.4g} s further behind at every checkpoint, so the time to durable grows "
                        "without bound and no steady goodput follows at this interval")
    lost = lost_per_failure(tau, durable, load)
    out |= {"lost_per_failure_seconds": lost if keeps_up else None,
            "goodput": goodput(tau, held, durable, load, mtbf) if keeps_up else None}
    bounds = {"Young/Daly": math.sqrt(2 * base * mtbf)}
    if staging is not None:
        bounds["the background write"] = write
    if drain is not None:
        bounds["the drain"] = drain - base
    bound, best = max(bounds.items(), key=lambda kv: kv[1])
    out |= {"optimal_interval_seconds": best, "optimal_interval_bound_by": bound,
            "goodput_at_optimal": goodput(best, base, durable, load, mtbf),
            "lost_per_failure_at_optimal_seconds": lost_per_failure(best, durable, load)}
    if not says:
        says.append(f"every checkpoint holds training {held:.4g} s and is durable after {durable:.4g} s")
    out["verdict"] = "; ".join(says)
    out["formulas"] = ("held = write (sync) or staging + max(0, write - interval) (async); lost = interval/2 + "
                       "time_to_durable + load; goodput = interval/(interval+held) * (1 - lost/MTBF); a drain keeps "
                       "up when drain <= interval + held; optimal interval = max(sqrt(2 * held * MTBF) (Young/Daly), "
                       "write (async), drain - held (tiers))")
    return out

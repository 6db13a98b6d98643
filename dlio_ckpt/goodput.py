"""What checkpointing costs training, from a few measured (or assumed) times.

Assumptions, stated once (the README repeats them): failures arrive independently at a mean time
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

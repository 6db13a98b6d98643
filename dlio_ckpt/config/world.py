"""The rules that need the world size (DLIO's) or the number of processes, checked before anything
is written: once the job's size is known (``plan --world-size``, a run under mpiexec)."""

from __future__ import annotations

from dlio_ckpt.config.schema import Workload
from dlio_ckpt.errors import ConfigError

MAX_WORLD_SIZE = 1 << 18  # plan's time and memory grow with it (bench/plan_scale.py)


def check_world_size(workload: Workload, world_size: int, processes: int | None = None) -> None:
    """Every rule of the configuration that needs the world size (DLIO's) or the process count (``processes``;
    None for ``plan``, which starts none), checked before anything is written; the layout's own come after, in
    the plan layer's step (:func:`dlio_ckpt.plan.layouts.check_job`)."""
    par = workload.model.parallelism
    mp = par.tensor * par.pipeline
    if world_size < 1:
        raise ConfigError("--world-size", world_size, "must be >= 1")
    if world_size > MAX_WORLD_SIZE:
        raise ConfigError("--world-size", world_size, f"must be <= {MAX_WORLD_SIZE} (2**18, beyond the largest "
                          "training jobs): a plan holds every rank's files; plan --format json takes about 10 s and "
                          "0.4 GiB at that limit")
    if workload.mode != "emulated":  # no emulated tensor/pipeline layout: the framework decides
        if processes is not None and world_size != processes:
            raise ConfigError("--world-size", world_size, f"mode={workload.mode} runs one rank per process "
                              f"({processes} here): leave --world-size out")
        if processes is not None and processes > 1 and workload.mode == "lightning":
            raise ConfigError("workload.mode", "lightning", f"runs one process (the benchmark it reproduces "
                              f"trains on one device); this job has {processes}: run it without mpiexec -n")
        return
    if processes is not None and world_size % processes:
        raise ConfigError("--world-size", world_size, f"must be a multiple of the number of processes ({processes})")
    load = workload.restore.world_size
    if load is not None and load > MAX_WORLD_SIZE:
        raise ConfigError("workload.restore.world_size", load, f"must be <= {MAX_WORLD_SIZE} (2**18), as --world-size")
    if processes is not None and load is not None and load % processes:
        raise ConfigError("workload.restore.world_size", load, f"must be a multiple of the number of processes "
                          f"({processes}): each process emulates an equal share of the loading ranks")
    if workload.checkpoint.mode == "default" and world_size % mp:
        hint = f"; or run {mp} ranks in this one process with --world-size {mp}" if processes == 1 else ""
        raise ConfigError(
            "workload.model.parallelism", f"tensor={par.tensor} pipeline={par.pipeline}",
            f"tensor*pipeline={mp} must divide the world size {world_size}{hint}",
        )
    if par.expert > 1 and (world_size // par.pipeline) % par.expert:
        raise ConfigError("workload.model.parallelism.expert", par.expert, f"must divide the ranks of a pipeline "
                          f"stage, {world_size // par.pipeline} (world {world_size} / pipeline {par.pipeline}): expert "
                          "parallelism splits each stage's experts, the rest is expert data parallelism")
    if workload.checkpoint.mode == "subset" and par.data is not None and par.data * mp < world_size:
        raise ConfigError(
            "workload.model.parallelism.data", par.data,
            f"data*tensor*pipeline={par.data * mp} must be >= the world size {world_size} "
            "(subset mode emulates the first ranks of a larger job)",
        )


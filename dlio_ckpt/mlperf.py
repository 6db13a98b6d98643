"""``dlio_ckpt check RUN [RUN2]``: does a run meet MLPerf Storage v2.0's checkpointing rules?

Each rule gives its expected and actual value and PASS or FAIL, so a person sees what to change.
The rules (MLPerf Storage v2.0 checkpointing, as the benchmark's rules and DLIO's workloads set them):
- the model is one of llama3_8b, llama3_70b, llama3_405b, llama3_1t (the workload's shape, not its name);
- the process count is 8, 64, 512, 1024 for them, one MPI process per simulated accelerator; in
  subset mode, 8 processes emulating the first 8 ranks of that full job (data*TP*PP = the full count);
- 10 checkpoints written, then 10 read (in one run, or a write-only run followed by a read-only run:
  pass both folders);
- fsync on for every write, and it took effect;
- the data written per host is more than 3x the host's memory, or the page cache was cleared between
  write and read (our eviction, O_DIRECT, or an object store without client cache);
- full-size files (``checkpoint.scale`` = 1);
- a checkpoint's duration is the maximum over processes, and its throughput the checkpoint size over
  that duration (the minimum over processes), recomputed here from every process's own file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .runfiles import Run, number, operations

GIB = 1 << 30


@dataclass(frozen=True)
class MLPerfModel:
    name: str
    processes: int
    shape: dict[str, Any]  # flattened workload keys that identify it


_SHAPE = ("model.num_layers", "model.transformer.hidden_size", "model.transformer.ffn_hidden_size",
          "model.transformer.vocab_size", "model.transformer.num_attention_heads", "model.transformer.num_kv_heads",
          "model.parallelism.tensor", "model.parallelism.pipeline", "model.parallelism.zero_stage",
          "model.model_datatype", "model.optimizer_datatype")


def _model(name: str, processes: int, *values: Any) -> MLPerfModel:
    return MLPerfModel(name, processes, dict(zip(_SHAPE, values, strict=True)))


MODELS = (
    _model("llama3_8b", 8, 32, 4096, 14336, 128256, 32, 8, 1, 1, 3, "fp16", "fp32"),
    _model("llama3_70b", 64, 80, 8192, 28672, 128256, 128, 8, 8, 1, 3, "fp16", "fp32"),
    _model("llama3_405b", 512, 126, 16384, 53248, 128256, 128, 8, 8, 32, 1, "fp16", "fp32"),
    _model("llama3_1t", 1024, 128, 25872, 98304, 128256, 192, 32, 8, 64, 1, "fp16", "fp32"),
)
REQUIRED_CHECKPOINTS = 10
MEMORY_MULTIPLE = 3


@dataclass
class Rule:
    name: str
    expected: str
    actual: str
    ok: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL"


def _defaults(config: dict[str, Any]) -> dict[str, Any]:
    """Our defaults for keys a config may leave out (the workloads' YAML sets the rest)."""
    return {"model.parallelism.zero_stage": 0, "model.parallelism.pipeline": 1, "model.parallelism.tensor": 1,
            "model.model_datatype": "fp16", "model.optimizer_datatype": "fp32", "checkpoint.mode": "default",
            "checkpoint.scale": 1.0, "checkpoint.fsync": False, "mode": "emulated", **config}


def check_runs(runs: list[Run]) -> list[Rule]:
    """The rules over one run, or a write-only run followed by a read-only one."""
    first = runs[0]
    config = _defaults(first.config or {})
    model = _matching(config)
    return [_model_rule(first, config, model), _process_rule(first, config, model), _mode_rule(config),
            _count_rule(runs), _fsync_rule(runs), _scale_rule(runs), _cache_rule(runs), _timing_rule(runs)]


def _differences(config: dict[str, Any], model: MLPerfModel) -> dict[str, Any]:
    """The model's shape keys this config sets otherwise, with the model's values."""
    return {k: v for k, v in model.shape.items() if config.get(k) != v}


def _matching(config: dict[str, Any]) -> MLPerfModel | None:
    return next((m for m in MODELS if not _differences(config, m)), None)


def _model_rule(run: Run, config: dict[str, Any], model: MLPerfModel | None) -> Rule:
    expected = "one of " + ", ".join(m.name for m in MODELS) + " (shape, parallelism, ZeRO, datatypes)"
    if run.config is None:
        return Rule("model", expected, f"unknown: no .hydra/config.yaml beside {run.path}'s summary.json", False)
    if model is not None:
        return Rule("model", expected, model.name, True)
    closest = min(MODELS, key=lambda m: len(_differences(config, m)))
    off = ", ".join(f"{k.rsplit('.', 1)[1]}={config.get(k)} (not {v})"
                    for k, v in _differences(config, closest).items())
    return Rule("model", expected, f"closest is {closest.name}, but {off}", False)


def _process_rule(run: Run, config: dict[str, Any], model: MLPerfModel | None) -> Rule:
    procs = run.summary.get("num_processes", run.summary.get("num_accelerators"))
    ranks = run.summary.get("num_accelerators")
    if model is None:
        return Rule("process count", "the model's count (8, 64, 512, 1024)", f"{procs} (model not recognized)", False)
    one_each = f"{procs} processes for {ranks} simulated accelerators"
    if config.get("checkpoint.mode") == "subset":
        full = (config.get("model.parallelism.data") or 0) * model.shape["model.parallelism.tensor"] * \
            model.shape["model.parallelism.pipeline"]
        ok = procs == ranks == 8 and full == model.processes
        return Rule("process count", f"subset: 8 processes, the first 8 ranks of a {model.processes}-process "
                    f"job (data*TP*PP = {model.processes})", f"{one_each}; data*TP*PP = {full}", ok)
    ok = procs == ranks == model.processes
    return Rule("process count", f"{model.processes} MPI processes, one per simulated accelerator ({model.name})",
                one_each, ok)


def _mode_rule(config: dict[str, Any]) -> Rule:
    mode = config.get("mode")
    return Rule("emulated I/O", "mode=emulated (DLIO's synthetic checkpoint layout)", f"mode={mode}",
                mode == "emulated")


def _count(run: Run, phase: str) -> int:
    """Checkpoints a run saved or loaded: ours lists them; DLIO's summary has only means, so its
    config says how many (when the mean exists at all: a read-only run's save mean is NaN)."""
    if run.ours:
        return len(run.summary.get("checkpoints", {}).get(phase, []))
    if number(run.metric.get(f"{phase}_checkpoint_duration_mean_seconds")) is None:
        return 0
    key = "checkpoint.num_checkpoints_write" if phase == "save" else "checkpoint.num_checkpoints_read"
    return int((run.config or {}).get(key, 1))


def _count_rule(runs: list[Run]) -> Rule:
    writes = [_count(r, "save") for r in runs]
    reads = [_count(r, "load") for r in runs]
    if len(runs) == 1:
        actual = f"{writes[0]} written, {reads[0]} read in one run"
    else:
        actual = f"run 1: {writes[0]} written, {reads[0]} read; run 2: {writes[1]} written, {reads[1]} read"
    ok = (len(runs) == 1 and writes[0] == reads[0] == REQUIRED_CHECKPOINTS) or \
        (len(runs) == 2 and writes == [REQUIRED_CHECKPOINTS, 0] and reads == [0, REQUIRED_CHECKPOINTS])
    return Rule("10 writes then 10 reads", "10 checkpoints written, then the same 10 read (one run, or a "
                 "write-only run then a read-only run)", actual, ok)


def _fsync_rule(runs: list[Run]) -> Rule:
    writers = [r for r in runs if _count(r, "save")] or runs
    said = [str(r.summary.get("io", {}).get("fsync", "not recorded")) if r.ours else
            "DLIO's summary does not record it (and DLIO ignores checkpoint.fsync)" for r in writers]
    configured = [bool(_defaults(r.config or {}).get("checkpoint.fsync")) for r in writers]
    done = [r.summary.get("io", {}).get("fsync") not in (False, None, "nothing stored: null storage")
            for r in writers]
    return Rule("fsync", "checkpoint.fsync=True, and every file synced within its write time",
                f"checkpoint.fsync={configured[0]}; {said[0]}", all(configured) and all(done))


def _scale_rule(runs: list[Run]) -> Rule:
    scales = [_defaults(r.config or {}).get("checkpoint.scale") for r in runs]
    return Rule("full-size checkpoint", "checkpoint.scale=1 (files as large as the model's)",
                ", ".join(f"scale={s}" for s in scales), all(s == 1 for s in scales))


def _cache_rule(runs: list[Run]) -> Rule:
    writer = next((r for r in runs if _count(r, "save")), runs[0])
    reader = next((r for r in runs if _count(r, "load")), runs[-1])
    hosts = writer.summary.get("hosts")
    memory = writer.summary.get("host_memory_GB")
    size = number(writer.metric.get("checkpoint_size_GB")) or 0.0
    n_hosts = writer.summary.get("num_hosts") or 1
    per_host = size / n_hosts
    cleared = reader.summary.get("io", {}).get("read_cache") in ("evicted", "odirect", "server: no client-side cache")
    how = reader.summary.get("io", {}).get("read_cache", "not recorded")
    if not memory and not hosts:
        return Rule("page cache", f"data per host > {MEMORY_MULTIPLE}x host memory, or the cache cleared "
                    "before reads", f"host memory not recorded in summary.json; reads: {how}", cleared)
    mem = max(memory) if memory else max(h["memory_bytes"] for h in hosts.values()) / GIB
    big = per_host > MEMORY_MULTIPLE * mem
    return Rule("page cache", f"data per host > {MEMORY_MULTIPLE}x host memory ({MEMORY_MULTIPLE * mem:.1f} GiB), "
                "or the cache cleared before reads",
                f"{per_host:.2f} GiB per host, {mem:.1f} GiB memory; reads: {how}", big or cleared)


def _timing_rule(runs: list[Run]) -> Rule:
    """Recompute each checkpoint's duration (max over processes) and throughput (size / that) from
    the per-process files and compare with what summary.json reports."""
    worst: list[str] = []
    checked = 0
    for run in runs:
        if not run.ours:
            worst.append(f"{run.path}: DLIO's summary times each checkpoint on rank 0's clock alone")
            continue
        if not run.per_process:
            worst.append(f"{run.path}: no per-process durations to check against")
            continue
        ops: dict[str, list[dict[str, Any]]] = {}
        for stats in run.per_process.values():
            for name, entry in operations(stats).items():
                ops.setdefault(name, []).append(entry)
        for phase in ("save", "load"):
            for c in run.summary["checkpoints"].get(phase, []):
                entries = ops.get(f"{phase}_ckpt{c['index']}", [])
                if len(entries) != len(run.per_process):
                    worst.append(f"{phase}_ckpt{c['index']}: {len(entries)} of {len(run.per_process)} processes")
                    continue
                slowest = max(e["duration"] for e in entries)
                rate = sum(e["bytes"] for e in entries) / GIB / slowest if slowest else 0.0
                checked += 1
                if abs(c["duration_seconds"] - slowest) > 1e-9 * max(1.0, slowest):
                    worst.append(f"{phase}_ckpt{c['index']}: reported {c['duration_seconds']:.6g} s, "
                                 f"slowest process {slowest:.6g} s")
                if abs(c["throughput_GiB_per_second"] - rate) > 1e-9 * max(1.0, rate):
                    worst.append(f"{phase}_ckpt{c['index']}: reported {c['throughput_GiB_per_second']:.6g} GiB/s, "
                                 f"size / slowest duration = {rate:.6g}")
    actual = f"{checked} checkpoints recomputed from every process's file" + (
        "; " + "; ".join(worst[:3]) if worst else ": all agree")
    return Rule("max duration, min throughput", "each checkpoint's duration is its slowest process's and its "
                 "throughput the size over that (the minimum), as recomputed here", actual, not worst and checked > 0)


def render(rules: list[Rule], paths: list[str]) -> str:
    width = max(len(r.name) for r in rules)
    lines = [f"MLPerf Storage v2.0 checkpointing rules for {' then '.join(paths)}", ""]
    for r in rules:
        lines.append(f"{r.verdict:4}  {r.name:<{width}}  expected: {r.expected}")
        lines.append(f"{'':4}  {'':<{width}}  actual:   {r.actual}")
    failed = [r.name for r in rules if not r.ok]
    lines += ["", f"result: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}"]
    return "\n".join(lines)

"""``dlio_ckpt check RUN [RUN2] [--edition 2.0|3.0|4.0]``: does a run meet MLPerf Storage's
checkpointing rules, edition by edition?

Each rule gives its expected and actual value and PASS, FAIL, or WARN where the edition reports it
as a warning, so a person sees what to change. The editions (mlcommons/storage ``Rules.md`` at
0366ccf, the checkers under ``mlpstorage_py/submission_checker/checks/checkpointing_checks.py`` and
``mlpstorage_py/rules/``):

- 2.0 (the v2.0 round): one of the four models (by shape, not name), 8, 64, 512 or 1024 processes (or 8
  in subset mode, emulating the first 8 ranks of the full job), DLIO's files (emulated, layout ``dlio``,
  format ``pt``; ``checkpoint.reference`` none or ``dlio-2.0``, the round's upstream DLIO), 10 writes then
  10 reads (one run or two), fsync on and in effect, data per host over 3x its memory or the cache cleared
  before reads, full-size files, each checkpoint's duration its slowest process's.
- 3.0 (the v3.0 round): as 2.0, but subset mode only for the 8B with exactly 8 processes (§4.3.5);
  CLOSED exactly 8/64/512/1024 processes, each host more than 4 (§4.6.1-2), OPEN any positive
  multiple of TP x PP (§4.6.4); the checkpoint the size of Table 2, which is GiB/TiB although labelled
  GB/TB; accelerator memory x processes must hold the checkpoint (§4.3.4: the round checked it against
  an 80 GB H100 as a warning); two invocations must start the read within 30 s of the write's end
  (§4.7.1, a warning in the round); the checkpoint and results folders on different file systems
  (§4.4.2, a warning in the round); a ``provenance.json`` whose ``core_config`` hash is the run's and, in
  CLOSED, the model's comparability class (mlpstorage's ``rules/editions.yaml``: the hash of DLIO's
  template of the model); the reference a run may follow is ``mlcommons`` (the round's MLCommons fork,
  whose files are ``raw``) or none.
- 4.0 (the draft at 0366ccf): 3.0 with its warnings made failures: the accelerator is declared and in
  Table 3 (b200 180 GB and mi355 288 GB; h100 and a100 are what-if only), and results compare only
  within one accelerator type; a gap over 30 s, or folders on one file system, fail. The draft declares no
  comparability classes of its own yet: 3.0's are taken.
Where a rule needs a fact a run folder lacks (DLIO's own runs record no accelerator, no invocation
times, no file systems), it says "not recorded" and fails or warns as the edition says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from dlio_ckpt.config.accelerators import ACCELERATOR_MEMORY_GB
from dlio_ckpt.config.references import REFERENCES
from dlio_ckpt.registry import BACKENDS
from dlio_ckpt.results.provenance import core_config, core_values
from dlio_ckpt.results.schema import IO, FileSystem, FileSystems
from dlio_ckpt.tools.readers.runfiles import Run, number, operations

GIB = 1 << 30
DIVISIONS = ("closed", "open")
WHAT_IF_ONLY = ("h100", "a100")
MAX_GAP_SECONDS = 30.0  # §4.7.1: the read invocation starts within this of the write invocation's end
MIN_PER_HOST = 4  # §4.6.2: CLOSED runs put more than this many accelerators on each host


@dataclass(frozen=True)
class MLPerfModel:
    name: str
    processes: int
    size_gib: int  # Table 2's checkpoint size, labelled GB/TB but binary units (Rules.md's note)
    class_hash: str  # its CLOSED comparability class from 3.0 on: the core_config hash of DLIO's template
    shape: dict[str, Any]  # flattened workload keys that identify it

    @property
    def tp_pp(self) -> int:
        return self.shape["model.parallelism.tensor"] * self.shape["model.parallelism.pipeline"]


_SHAPE = ("model.num_layers", "model.transformer.hidden_size", "model.transformer.ffn_hidden_size",
          "model.transformer.vocab_size", "model.transformer.num_attention_heads", "model.transformer.num_kv_heads",
          "model.parallelism.tensor", "model.parallelism.pipeline", "model.parallelism.zero_stage",
          "model.model_datatype", "model.optimizer_datatype")


def _model(name: str, processes: int, size_gib: int, class_hash: str, *values: Any) -> MLPerfModel:
    return MLPerfModel(name, processes, size_gib, class_hash, dict(zip(_SHAPE, values, strict=True)))


# class hashes: mlcommons/storage mlpstorage_py/rules/editions.yaml (classes llama3-*-A, edition 3.0; the
# 8B's also 2.0's), each the core_config of configs/dlio/workload/llama3_*.yaml; our configs/workload/llama3_*.yaml
# hash to them (tests/unit/test_mlperf_editions.py). v2.0's CLOSED 70B/405B/1T ran subset mode, classes of their own.
MODELS = (
    _model("llama3_8b", 8, 105, "68df04b7240e3fb0", 32, 4096, 14336, 128256, 32, 8, 1, 1, 3, "fp16", "fp32"),
    _model("llama3_70b", 64, 912, "3c53fe70d64f91d4", 80, 8192, 28672, 128256, 128, 8, 8, 1, 3, "fp16", "fp32"),
    _model("llama3_405b", 512, 5290, "7adcfa87a5c4c8e6", 126, 16384, 53248, 128256, 128, 8, 8, 32, 1, "fp16",
           "fp32"),
    _model("llama3_1t", 1024, 18000, "45fd627ad9dc5f4c", 128, 25872, 98304, 128256, 192, 32, 8, 64, 1, "fp16",
           "fp32"),
)


@dataclass(frozen=True)
class Edition:
    """One edition of the rules as its checker applies them: which rules (named as reported), in the order
    reported; which of them it reports as a warning when not met; what wrote its results; whether it judges the
    process count by division (CLOSED or OPEN); what it assumed of an undeclared accelerator."""

    tool: str  # the checkpoint.reference preset (dlio_ckpt/config/references.py) whose I/O wrote its results
    rules: tuple[str, ...]
    warns: frozenset[str] = frozenset()
    divisions: bool = False  # with them, "accelerators per host" is the CLOSED division's rule alone
    # the accelerator its checker assumed for every run that declared none (then Table 3's what-if types pass too)
    assumed_accelerator: str | None = None


_FROM_3 = ("model", "subset", "process count", "accelerators per host", "emulated I/O", "checkpoint size",
           "accelerator memory", "10 writes then 10 reads", "write-to-read gap", "fsync", "page cache",
           "separate file systems", "provenance", "max duration, min throughput")
# The rules run DLIO's workload in DLIO's layout; a run does its I/O as our own (none) or as the edition's tool
# does (docs/guides/mlperf-storage.md: v2.0's results come from upstream DLIO, 3.0's from the fork). Every checker
# from 3.0 on reports §4.3.1 (the page cache) as a warning, §4.7.1 covering the flush; the v3.0 round's reported
# its newer rules as warnings and assumed an 80 GB H100 where no accelerator was declared.
EDITIONS_TABLE = {
    "2.0": Edition("dlio-2.0", ("model", "process count", "emulated I/O", "10 writes then 10 reads", "fsync",
                                "full-size checkpoint", "page cache", "max duration, min throughput")),
    "3.0": Edition("mlcommons", _FROM_3, frozenset({"accelerator memory", "write-to-read gap", "page cache",
                                                     "separate file systems", "provenance"}), True, "h100"),
    "4.0": Edition("mlcommons", _FROM_3, frozenset({"page cache"}), True),
}
EDITIONS = tuple(EDITIONS_TABLE)  # the newest last: check's default
DLIO_LAYOUT, DLIO_FORMAT = "dlio", "pt"  # DLIO's PyTorch checkpointing: torch.save archives
SIZE_TOLERANCE = 0.01  # Table 2 rounds (912 GiB for 70B's 911.x); the 1T's 18 TiB is rounded up more
REQUIRED_CHECKPOINTS = 10
MEMORY_MULTIPLE = 3


@dataclass
class Rule:
    name: str
    expected: str
    actual: str
    ok: bool
    warn: bool = False  # not met, and the edition reports it as a warning

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "WARN" if self.warn else "FAIL"

    @property
    def failed(self) -> bool:
        return not self.ok and not self.warn


def _as_warning(rule: Rule, warn: bool) -> Rule:
    """The rule as an edition that reports it as a warning sees it (a rule may warn in any edition)."""
    rule.warn = rule.warn or warn
    return rule


def _defaults(config: dict[str, Any]) -> dict[str, Any]:
    """Our defaults for keys a config may leave out (the workloads' YAML sets the rest)."""
    return {"model.parallelism.zero_stage": 0, "model.parallelism.pipeline": 1, "model.parallelism.tensor": 1,
            "model.model_datatype": "fp16", "model.optimizer_datatype": "fp32", "checkpoint.mode": "default",
            "checkpoint.scale": 1.0, "checkpoint.fsync": False, "mode": "emulated",
            "checkpoint.layout": DLIO_LAYOUT, "checkpoint.format": DLIO_FORMAT, "checkpoint.reference": "none",
            **config}


def check_runs(runs: list[Run], edition: str = EDITIONS[-1], division: str = "closed") -> list[Rule]:
    """The rules of ``edition`` over one run, or a write-only run followed by a read-only one."""
    first, ed = runs[0], EDITIONS_TABLE[edition]
    config = _defaults(first.config or {})
    model = _matching(config)

    @cache
    def seen() -> list[Facts]:  # each run's files read once, by the rules that need them
        return [facts(r) for r in runs]

    rules: dict[str, Callable[[], Rule]] = {
        "model": lambda: _model_rule(first, config, model),
        "subset": lambda: _subset_rule(first, config, model),
        "process count": lambda: _division_rule(first, config, model, division) if ed.divisions
        else _process_rule(first, config, model),
        "accelerators per host": lambda: _per_host_rule(first),
        "emulated I/O": lambda: _mode_rule(runs, edition),
        "checkpoint size": lambda: _size_rule(runs, model),
        "accelerator memory": lambda: _accelerator_rule(runs, seen(), edition),
        "10 writes then 10 reads": lambda: _count_rule(runs),
        "write-to-read gap": lambda: _gap_rule(runs, seen()),
        "fsync": lambda: _fsync_rule(runs),
        "full-size checkpoint": lambda: _scale_rule(runs),
        "page cache": lambda: _cache_rule(runs),
        "separate file systems": lambda: _folders_rule(runs, seen()),
        "provenance": lambda: _provenance_rule(runs, model, division),
        "max duration, min throughput": lambda: _timing_rule(runs),
    }
    return [_as_warning(rules[name](), name in ed.warns) for name in ed.rules
            if name != "accelerators per host" or division == "closed"]


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
    procs = run.summary.processes
    ranks = run.summary.num_accelerators
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


def _mode_rule(runs: list[Run], edition: str) -> Rule:
    """DLIO's files, as the edition's tool writes them: emulated, in DLIO's layout and format, and done as our
    own I/O or the edition's tool's (each run's, where a write-only and a read-only run are judged). Another
    layout of the same model (Megatron's, DCP's) writes other files in other numbers and sizes, so it is not
    the rules' workload even where its total size is Table 2's."""
    tool = EDITIONS_TABLE[edition].tool
    expected = (f"mode=emulated, checkpoint.layout={DLIO_LAYOUT} (DLIO's files), checkpoint.format={DLIO_FORMAT} "
                f"(DLIO's torch.save archives; {REFERENCES[tool].checkpoint.get('format', DLIO_FORMAT)} under "
                f"reference={tool}), checkpoint.reference none or {tool} (v{edition}'s tool)")
    keys = ("mode", "checkpoint.layout", "checkpoint.format", "checkpoint.reference")
    off: list[str] = []
    for run in runs:
        config = _defaults(run.config or {})
        mode, layout, fmt, ref = (config.get(k) for k in keys)
        dlio_format = REFERENCES[tool].checkpoint.get("format", DLIO_FORMAT) if ref == tool else DLIO_FORMAT
        said = []
        if mode != "emulated":
            said.append(f"workload.mode={mode!r}: the rules emulate DLIO's I/O (mode=emulated)")
        if layout != DLIO_LAYOUT:
            said.append(f"workload.checkpoint.layout={layout!r}: MLPerf runs DLIO's workload, whose files are "
                        f"layout={DLIO_LAYOUT}'s")
        if ref not in ("none", tool):
            said.append(f"workload.checkpoint.reference={ref!r}: v{edition}'s results come from "
                        f"{REFERENCES[tool].tool} (reference={tool}); leave it out for our own I/O")
        elif fmt != dlio_format:
            said.append(f"workload.checkpoint.format={fmt!r}: DLIO's files are {dlio_format}"
                        + (f" under reference={tool}" if ref == tool else ""))
        off += [s for s in said if s not in off]
    first = _defaults(runs[0].config or {})
    actual = ", ".join(f"{k.rsplit('.', 1)[-1]}={first.get(k)}" for k in keys)
    return Rule("emulated I/O", expected, "; ".join(off) or actual, not off)


def _io(run: Run) -> IO:
    """The run's ``io`` section; an empty one where the run has none (DLIO's): every fact "not recorded"."""
    return run.summary.io if run.summary.io is not None else IO()


def _count(run: Run, phase: str) -> int:
    """Checkpoints a run saved or loaded: ours lists them; DLIO's summary has only means, so its
    config says how many (when the mean exists at all: a read-only run's save mean is NaN)."""
    if run.summary.checkpoints is not None:
        return len(run.summary.checkpoints.phase(phase))
    if number(getattr(run.metric, f"{phase}_checkpoint_duration_mean_seconds")) is None:
        return 0
    key = "checkpoint.num_checkpoints_write" if phase == "save" else "checkpoint.num_checkpoints_read"
    return int(number((run.config or {}).get(key, 1)) or 0)


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
    said = [("not recorded" if _io(r).fsync is None else str(_io(r).fsync)) if r.ours else
            "DLIO's summary does not record it (and DLIO ignores checkpoint.fsync)" for r in writers]
    configured = [bool(_defaults(r.config or {}).get("checkpoint.fsync")) for r in writers]
    done = [_io(r).fsync not in (False, None, "nothing stored: null storage") for r in writers]
    return Rule("fsync", "checkpoint.fsync=True, and every file synced within its write time",
                f"checkpoint.fsync={configured[0]}; {said[0]}", all(configured) and all(done))


def _scale_rule(runs: list[Run]) -> Rule:
    scales = [_defaults(r.config or {}).get("checkpoint.scale") for r in runs]
    return Rule("full-size checkpoint", "checkpoint.scale=1 (files as large as the model's)",
                ", ".join(f"scale={s}" for s in scales), all(s == 1 for s in scales))


def _cache_rule(runs: list[Run]) -> Rule:
    writer = next((r for r in runs if _count(r, "save")), runs[0])
    reader = next((r for r in runs if _count(r, "load")), runs[-1])
    hosts, memory = writer.summary.hosts, writer.summary.host_memory_GB
    size = _size_gib(writer)
    n_hosts = writer.summary.num_hosts or 1
    per_host = size / n_hosts
    read_cache = _io(reader).read_cache
    cleared = read_cache in ("evicted", "odirect", "server: no client-side cache")
    how = "not recorded" if read_cache is None else read_cache
    # DLIO's host_memory_GB (GiB, one per host; a number in some versions, NaN where unknown), else our hosts'
    known = [n for m in (memory if isinstance(memory, list) else [memory]) if (n := number(m)) is not None]
    if not known and hosts:
        known = [max(h.memory_bytes for h in hosts.values()) / GIB]
    if not known:
        return Rule("page cache", f"data per host > {MEMORY_MULTIPLE}x host memory, or the cache cleared "
                    "before reads", f"host memory not recorded in summary.json; reads: {how}", cleared)
    mem = max(known)
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
        checkpoints = run.summary.checkpoints  # ours only
        if checkpoints is None:
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
            for c in checkpoints.phase(phase):
                entries = ops.get(f"{phase}_ckpt{c.index}", [])
                if len(entries) != len(run.per_process):
                    worst.append(f"{phase}_ckpt{c.index}: {len(entries)} of {len(run.per_process)} processes")
                    continue
                slowest = max(e["duration"] for e in entries)
                moved = sum(e["bytes"] for e in entries)
                # a load's figure is the checkpoint over its time (DLIO's), whatever the ranks read for it
                size = c.checkpoint_bytes if c.checkpoint_bytes is not None else moved
                rate = size / GIB / slowest if slowest else 0.0
                checked += 1
                if moved != c.bytes:
                    worst.append(f"{phase}_ckpt{c.index}: reported {c.bytes} B moved, the processes' sum {moved}")
                if abs(c.duration_seconds - slowest) > 1e-9 * max(1.0, slowest):
                    worst.append(f"{phase}_ckpt{c.index}: reported {c.duration_seconds:.6g} s, "
                                 f"slowest process {slowest:.6g} s")
                if abs(c.throughput_GiB_per_second - rate) > 1e-9 * max(1.0, rate):
                    worst.append(f"{phase}_ckpt{c.index}: reported {c.throughput_GiB_per_second:.6g} GiB/s, "
                                 f"size / slowest duration = {rate:.6g}")
    actual = f"{checked} checkpoints recomputed from every process's file" + (
        "; " + "; ".join(worst[:3]) if worst else ": all agree")
    return Rule("max duration, min throughput", "each checkpoint's duration is its slowest process's and its "
                 "throughput the size over that (the minimum), as recomputed here", actual, not worst and checked > 0)


def _subset_rule(run: Run, config: dict[str, Any], model: MLPerfModel | None) -> Rule:
    expected = "subset mode only for llama3_8b with exactly 8 processes (§4.3.5)"
    if config.get("checkpoint.mode") != "subset":
        return Rule("subset", expected, "not a subset run (checkpoint.mode=default)", True)
    procs, name = run.summary.processes, model.name if model else "an unrecognized model"
    return Rule("subset", expected, f"subset run of {name} on {procs} processes",
                model is not None and model.name == "llama3_8b" and procs == 8)


def _division_rule(run: Run, config: dict[str, Any], model: MLPerfModel | None, division: str) -> Rule:
    procs, ranks = run.summary.processes, run.summary.num_accelerators
    if model is None:
        return Rule("process count", "the model's count (CLOSED) or a multiple of its TP x PP (OPEN)",
                    f"{procs} (model not recognized)", False)
    one_each = f"{procs} processes for {ranks} simulated accelerators"
    multiple = isinstance(procs, int) and procs > 0 and procs % model.tp_pp == 0
    if division == "closed":
        hint = f"; a multiple of TP x PP = {model.tp_pp}: qualifies for OPEN" if multiple and procs != model.processes \
            else ""
        return Rule("process count", f"CLOSED: exactly {model.processes} processes for {model.name}, one per "
                    "simulated accelerator (§4.6.1)", one_each + hint, procs == ranks == model.processes)
    return Rule("process count", f"OPEN: a positive multiple of TP x PP = {model.tp_pp} for {model.name}, one "
                "per simulated accelerator (§4.6.4)", one_each, multiple and procs == ranks)


def _per_host_rule(run: Run) -> Rule:
    ranks, hosts = run.summary.num_accelerators or 0, run.summary.num_hosts or 1
    per_host = ranks / hosts
    return Rule("accelerators per host", f"CLOSED: more than {MIN_PER_HOST} simulated accelerators per host (§4.6.2)",
                f"{per_host:g} per host ({ranks} on {hosts} host{'s' if hosts != 1 else ''})", per_host > MIN_PER_HOST)


def _size_gib(run: Run) -> float:
    return number(run.metric.checkpoint_size_GB) or 0.0  # GiB in DLIO's summary and ours


def _size_rule(runs: list[Run], model: MLPerfModel | None) -> Rule:
    size = _size_gib(runs[0])
    if model is None:
        return Rule("checkpoint size", "Table 2's size of one of the four models", f"{size:.2f} GiB (model not "
                    "recognized)", False)
    label = f"{model.size_gib} GB" if model.size_gib < 1000 else f"{model.size_gib / 1000:g} TB"
    return Rule("checkpoint size", f"{model.size_gib} GiB for {model.name} (Table 2's '{label}' is GiB/TiB, not "
                f"decimal), within {SIZE_TOLERANCE:.0%}", f"{size:.2f} GiB ({size * GIB / 1e9:.2f} GB decimal)",
                abs(size - model.size_gib) <= SIZE_TOLERANCE * model.size_gib)


@dataclass(frozen=True)
class Facts:
    """What the 3.0 rules need beyond a summary's figures, from our summary.json or from the files
    mlpstorage writes beside DLIO's (``*_metadata.json``, ``fs_separation.json``)."""

    accelerator: str | None = None
    invocation_start: datetime | None = None
    invocation_end: datetime | None = None
    same_file_system: bool | None = None
    object_store: bool = False
    file_systems: str = "not recorded"


def _local_time(value: Any) -> datetime | None:
    """A time as this host's local wall clock (naive, as DLIO's and our ``start`` are): an epoch
    number, or ISO text with or without an offset (``Z`` is UTC)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value)
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo else when


def _json(path: Any) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def facts(run: Run) -> Facts:
    s = run.summary
    if run.ours:
        fs = s.file_systems if s.file_systems is not None else FileSystems()
        checkpoint, results, storage = fs.checkpoint, fs.results or FileSystem(), fs.checkpoint_storage
        # §4.4.2 does not apply to an object store: checkpoints are on no file system of the host
        object_store = checkpoint is None and storage is not None and storage in BACKENDS and \
            BACKENDS[storage].kind == "object_store"
        if s.file_systems is None:
            said = "not recorded"
        elif checkpoint is None:
            said = f"checkpoints on {storage} (an object store: no file system)" if object_store else \
                f"checkpoints on {storage} storage: nothing written to compare"
        else:
            said = (f"checkpoints on {checkpoint.mount_point} ({checkpoint.type}, device {checkpoint.device}), "
                    f"results on {results.mount_point} ({results.type}, device {results.device})")
        return Facts(s.accelerator_type, _local_time(s.invocation_start_time), _local_time(s.invocation_end_time),
                     fs.same_file_system, object_store, said)
    folder = run.folder
    meta = next((_json(p) for p in sorted(folder.glob("*_metadata.json"))), {}) if folder else {}
    separation = _json(folder / "fs_separation.json") if folder else {}
    same = separation.get("same_filesystem")
    accelerator = meta.get("accelerator")
    return Facts(accelerator if isinstance(accelerator, str) else None, _local_time(meta.get("invocation_start_time")),
                 _local_time(meta.get("invocation_end_time")), same if isinstance(same, bool) else None,
                 file_systems=f"fs_separation.json: same_filesystem={same}" if separation else "not recorded")


def _accelerator_rule(runs: list[Run], seen: list[Facts], edition: str) -> Rule:
    named = [f.accelerator for f in seen]
    declared = set(named)
    procs, size = runs[0].summary.processes or 0, _size_gib(runs[0])
    assumed = EDITIONS_TABLE[edition].assumed_accelerator
    expected = (f"accelerator memory x processes >= the checkpoint (§4.3.4; the v{edition} round checked an "
                f"{ACCELERATOR_MEMORY_GB[assumed]} GB {assumed.upper()} where none was declared)" if assumed else
                f"a declared accelerator of {', '.join(a for a in ACCELERATOR_MEMORY_GB if a not in WHAT_IF_ONLY)} "
                "(Table 3), its memory x processes >= the checkpoint (§4.3.4); results compare within one type")
    if len(declared) > 1:
        said = "; ".join(f"{r.path}: {a or 'not recorded'}" for r, a in zip(runs, named, strict=True))
        return Rule("accelerator memory", expected, f"the runs differ: {said}", False)
    accelerator = declared.pop() or assumed
    if accelerator is None:
        return Rule("accelerator memory", expected, "not recorded: set ++workload.accelerator_type=b200 (or mi355)",
                    False)
    memory = ACCELERATOR_MEMORY_GB.get(accelerator)
    if memory is None:
        return Rule("accelerator memory", expected,
                    f"{accelerator}: not in Table 3 ({', '.join(ACCELERATOR_MEMORY_GB)})", False)
    actual = f"{procs} x {accelerator} at {memory} GB = {procs * memory} vs a {size:.2f} GiB checkpoint"
    if accelerator in WHAT_IF_ONLY and not assumed:
        return Rule("accelerator memory", expected, f"{actual}; {accelerator} is what-if only", False)
    return Rule("accelerator memory", expected, actual, procs * memory >= size)


def _gap_rule(runs: list[Run], seen: list[Facts]) -> Rule:
    expected = (f"one invocation, or the read invocation started within {MAX_GAP_SECONDS:g} s of the write "
                "invocation's end (§4.7.1)")
    if len(runs) == 1:
        return Rule("write-to-read gap", expected, "one invocation: no gap", True)
    write, read = seen[0], seen[1]
    end, said_end = write.invocation_end, "invocation end"
    if end is None:
        end, said_end = _local_time(runs[0].summary.end), "summary end (no invocation end recorded)"
    start, said_start = read.invocation_start, "invocation start"
    if start is None:
        start, said_start = _local_time(runs[1].summary.start), "summary start (no invocation start recorded)"
    if end is None or start is None:
        return Rule("write-to-read gap", expected, "not recorded: no end time of the write or start of the read",
                    False)
    gap = (start - end).total_seconds()
    actual = f"{gap:.1f} s from the write's {said_end} to the read's {said_start}"
    if gap < 0:
        return Rule("write-to-read gap", expected, f"{actual}: negative, the clocks of the two hosts disagree",
                    False, warn=True)
    return Rule("write-to-read gap", expected, actual, gap <= MAX_GAP_SECONDS)


def _folders_rule(runs: list[Run], seen: list[Facts]) -> Rule:
    expected = "the checkpoint folder and the results folder on different file systems (§4.4.2)"
    actual = "; ".join(f.file_systems for f in seen)
    ok = all(f.object_store or f.same_file_system is False for f in seen)
    if any(f.same_file_system for f in seen):
        actual = "the same file system: " + actual
    return Rule("separate file systems", expected, actual, ok)


def _provenance_rule(runs: list[Run], model: MLPerfModel | None, division: str = "closed") -> Rule:
    """Stamped, recomputed from the config, one workload, and in CLOSED the model's comparability class:
    mlpstorage compares a CLOSED row only with rows of its class (its hash is DLIO's template's), so a
    run whose hashed keys differ from the template (another layout, a scale, a changed interval, one of our
    own checkpoint keys) is another workload, whatever its shape and size."""
    expected = "provenance.json with the run's core_config hash (mlpstorage's core-config-v1, checkpointing@1)"
    if division == "closed":
        expected += (f", {model.name}'s CLOSED class {model.class_hash} (mlpstorage's editions.yaml: DLIO's "
                     "template)" if model else ", the model's CLOSED class (mlpstorage's editions.yaml)")
    said, hashes = [], set()
    for run in runs:
        stamp = _json(run.folder / "provenance.json") if run.folder else {}
        stamped = stamp.get("core_config")
        stated = stamped.get("hash") if isinstance(stamped, dict) else None
        if not stated:
            said.append(f"{run.path}: no provenance.json" if not stamp else f"{run.path}: no core_config hash")
            continue
        hashes.add(stated)
        if run.config is None:
            said.append(f"{run.path}: core_config {stated}; no config beside it to recompute it from")
            continue
        mine = core_config(run.config)["hash"]
        said.append(f"{run.path}: core_config {stated}, " + ("recomputed equal" if mine == stated else
                                                             f"but its config hashes to {mine}"))
        hashes.add(mine)
    if len(hashes) > 1:
        said.append("the runs are not one workload")
    ok = len(hashes) == 1 and all("recomputed equal" in s for s in said)
    if division == "closed" and hashes:
        outside = _outside_class(runs[0], model, hashes)
        said += [outside] if outside else []
        ok = ok and not outside
    return Rule("provenance", expected, "; ".join(said), ok)


def _outside_class(run: Run, model: MLPerfModel | None, hashes: set[str]) -> str | None:
    """Why the run's hash is not its model's CLOSED class (None when it is), naming the hashed keys where the
    run differs from our workload YAML of the model (it hashes to the class: tests/unit/test_mlperf_editions.py)."""
    if model is None:
        return "no CLOSED class to compare with: the model is not one of the four"
    if hashes == {model.class_hash}:
        return None
    said = f"not {model.name}'s CLOSED class {model.class_hash}"
    if run.config is None:
        return said
    import yaml

    from dlio_ckpt.config import config_root  # config imports this module: imported when needed

    template = core_values(yaml.safe_load((config_root() / "workload" / f"{model.name}.yaml").read_text()))
    ours = core_values(run.config)
    keys = [k for k in sorted(template.keys() | ours.keys()) if template.get(k) != ours.get(k)]
    off = ", ".join(f"{k}={ours[k]!r}" + (f" (DLIO's template: {template[k]!r})" if k in template else
                                           " (not in DLIO's template)") if k in ours else
                    f"{k} missing (DLIO's template: {template[k]!r})" for k in keys[:6])
    more = f", and {len(keys) - 6} more" if len(keys) > 6 else ""
    return f"{said}: {off}{more}" if keys else said


def render(rules: list[Rule], paths: list[str], edition: str = EDITIONS[-1]) -> str:
    width = max(len(r.name) for r in rules)
    lines = [f"MLPerf Storage v{edition} checkpointing rules for {' then '.join(paths)}", ""]
    for r in rules:
        lines.append(f"{r.verdict:4}  {r.name:<{width}}  expected: {r.expected}")
        lines.append(f"{'':4}  {'':<{width}}  actual:   {r.actual}")
    failed = [r.name for r in rules if r.failed]
    warned = [r.name for r in rules if r.verdict == "WARN"]
    result = f"FAIL ({', '.join(failed)})" if failed else "PASS"
    lines += ["", f"result: {result}" + (f"; warnings: {', '.join(warned)}" if warned else "")]
    return "\n".join(lines)

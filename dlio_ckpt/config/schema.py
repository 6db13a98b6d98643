"""The workload's sections as pydantic models: DLIO's YAML keys and ours, each with its type, rules,
default and meaning.

Why this shape: DLIO maps ~150 YAML keys into a flat singleton by hand and silently drops the ones it
does not know (which is why its ``checkpoint.fsync`` does nothing). Here every section is a pydantic
model with ``extra="forbid"``: a typo is an error that names the key, never a silent no-op. A rule that
reads one section is that section's validator; the rules that read several sections are
:mod:`dlio_ckpt.config.rules`; those that need the world size :mod:`dlio_ckpt.config.world`.
Names offered as choices (layouts, formats, storage types, modes) come from :mod:`dlio_ckpt.registry`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dlio_ckpt.config.accelerators import ACCELERATOR_MEMORY_GB, H100_DEVICE_TO_HOST_GB_PER_SECOND
from dlio_ckpt.config.references import NAMES as REFERENCE_NAMES
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.model.dtypes import DTYPES
from dlio_ckpt.model.moe import is_moe_block
from dlio_ckpt.registry import BACKENDS, FORMATS, LAYOUTS, MODES
from dlio_ckpt.units import Bytes

MIB = 1 << 20

# The choices the registries and the dtype table hold, as pydantic's Literal types (the config offers
# exactly those names, and ``keys`` lists them); a type checker reads them as plain names
if TYPE_CHECKING:
    Datatype: TypeAlias = str
    LayoutName: TypeAlias = str
    FormatName: TypeAlias = str
    StorageType: TypeAlias = str
    ModeName: TypeAlias = str
    ReferenceName: TypeAlias = str
    AcceleratorType: TypeAlias = str
else:
    Datatype = Literal[tuple(DTYPES)]
    LayoutName, FormatName = Literal[LAYOUTS.names], Literal[FORMATS.names]
    StorageType, ModeName = Literal[BACKENDS.names], Literal[MODES.names]
    ReferenceName, AcceleratorType = Literal[REFERENCE_NAMES], Literal[tuple(ACCELERATOR_MEMORY_GB)]


class Section(BaseModel):
    """A YAML section: unknown keys are errors, values are checked, the model is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Parallelism(Section):
    tensor: int = Field(1, ge=1, description="tensor-parallel degree (TP)")
    pipeline: int = Field(1, ge=1, description="pipeline-parallel degree (PP)")
    data: int | None = Field(None, ge=1, description="subset mode only: the data-parallel size of the full job")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage: what is sharded over data "
                                            "parallelism (1: optimizer, 2: and gradients, 3: and parameters)")
    expert: int = Field(1, ge=1, description="expert-parallel degree (EP), family=moe: the routed experts are "
                        "split over EP ranks of each data-parallel group; the rest of the model over DP as usual")
    expert_tensor: int | None = Field(None, ge=1, description="expert tensor parallelism (Megatron's ETP), "
                                      "family=moe: each expert split over this many ranks; default: tensor")
    first_stage_layers: int | None = Field(None, ge=1, description="layout=megatron: blocks on the first "
                                           "pipeline stage (Megatron-LM's --decoder-first-pipeline-num-layers)")
    last_stage_layers: int | None = Field(None, ge=1, description="layout=megatron: blocks on the last pipeline "
                                          "stage (--decoder-last-pipeline-num-layers); the rest split evenly")


class Transformer(Section):
    vocab_size: int = Field(32000, ge=1, description="embedding and output rows")
    hidden_size: int = Field(2048, ge=1, description="model width")
    ffn_hidden_size: int = Field(8192, ge=1, description="MLP width (SwiGLU: three matrices of it)")
    num_attention_heads: int = Field(32, ge=1, description="query heads")
    num_kv_heads: int = Field(8, ge=1, description="key/value heads (grouped-query attention)")
    # family=moe only (the dense family keeps DLIO's fused Llama arithmetic): the published models' attention
    head_dim: int | None = Field(None, ge=1, description="per-head width where it is not hidden_size / heads "
                                 "(Qwen3, Llama 4)")
    qk_norm: bool = Field(False, description="RMSNorm weights on queries and keys per head (Qwen3)")
    attention: Literal["gqa", "mla"] = Field("gqa", description="grouped-query attention, or DeepSeek's "
                                             "multi-head latent attention (the *_rank and *_head_dim keys)")
    q_lora_rank: int | None = Field(None, ge=1, description="mla: the query's low-rank width (absent: a plain "
                                    "query projection)")
    kv_lora_rank: int | None = Field(None, ge=1, description="mla: the compressed key/value width")
    qk_rope_head_dim: int | None = Field(None, ge=1, description="mla: the rotary part of a query/key head")
    qk_nope_head_dim: int | None = Field(None, ge=1, description="mla: the non-rotary part of a query/key head")
    v_head_dim: int | None = Field(None, ge=1, description="mla: a value head's width")
    tie_embeddings: bool = Field(False, description="the output head is the embedding (no lm_head tensor)")

    @model_validator(mode="after")
    def _attention_keys(self) -> Transformer:
        """MLA needs its four widths and GQA none of them: a key that would be ignored is an error."""
        mla = {"kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim,
               "qk_nope_head_dim": self.qk_nope_head_dim, "v_head_dim": self.v_head_dim}
        key = "workload.model.transformer"
        if self.attention == "mla":
            for name, value in mla.items():
                if value is None:
                    raise ConfigError(f"{key}.{name}", None, "is required with transformer.attention=mla")
            for name, value in (("head_dim", self.head_dim), ("qk_norm", self.qk_norm or None)):
                if value is not None:
                    raise ConfigError(f"{key}.{name}", value, "applies to transformer.attention=gqa only (latent "
                                      "attention's heads are qk_nope_head_dim + qk_rope_head_dim and v_head_dim)")
        else:
            for name, value in (*mla.items(), ("q_lora_rank", self.q_lora_rank)):
                if value is not None:
                    raise ConfigError(f"{key}.{name}", value, "applies to transformer.attention=mla only")
        return self



class Moe(Section):
    """A mixture-of-experts model's MLPs (family=moe), as the published configs give them."""

    num_experts: int = Field(ge=1, description="routed experts per MoE layer")
    num_shared_experts: int = Field(0, ge=0, description="experts every token goes through (DeepSeek, Llama 4): "
                                    "one MLP num_shared_experts x expert_ffn_hidden_size wide")
    expert_ffn_hidden_size: int = Field(ge=1, description="an expert's MLP width (SwiGLU)")
    experts_per_token: int = Field(1, ge=1, description="routed experts a token goes through: compute, not "
                                   "checkpoint size (kept for the record; must not exceed num_experts)")
    first_dense_layers: int = Field(0, ge=0, description="the first blocks keep a dense MLP of ffn_hidden_size "
                                    "(DeepSeek-V3: 3)")
    layer_step: int = Field(1, ge=1, description="every layer_step-th block is MoE, the others dense "
                            "(Llama 4 Maverick: 2)")
    router_bias: bool = Field(False, description="DeepSeek's per-expert load-balancing bias (a buffer, saved)")

    @model_validator(mode="after")
    def _experts_chosen(self) -> Moe:
        if self.experts_per_token > self.num_experts:
            raise ConfigError("workload.model.moe.experts_per_token", self.experts_per_token,
                              f"must be <= moe.num_experts ({self.num_experts})")
        return self


class Model(Section):
    name: str = Field("default", description="the workload's name (run folder, summary.json)")
    type: Literal["transformer"] = "transformer"
    model_size: int | None = Field(None, description="DLIO key for non-transformer models; not used")
    num_layers: int = Field(ge=1, description="transformer blocks")
    model_datatype: Datatype = Field("fp16", description="parameters' dtype")
    optimizer_datatype: Datatype = Field("fp32", description="optimizer state's dtype (master weights and "
                                         "Adam's two moments)")
    moments_datatype: Datatype | None = Field(None, description="Adam's two moments' dtype where it is not "
                                              "optimizer_datatype (DeepSeek-V3: bf16 moments beside fp32 master "
                                              "weights); layout=dcp and megatron")
    master_weights: bool = Field(True, description="layout=dcp: FSDP2's mixed precision keeps the sharded "
                                 "parameters in optimizer_datatype (torchtitan's default); false: in model_datatype "
                                 "(pure low-precision training). DLIO's layouts always count fp32 master weights")
    family: Literal["dense", "moe"] = Field("dense", description="dense: DLIO's Llama arithmetic; moe: a "
                                            "mixture of experts (model.moe), held to the published model classes")
    mtp_layers: int = Field(0, ge=0, description="family=moe: DeepSeek-V3's multi-token-prediction depth (1)")
    parallelism: Parallelism = Parallelism()
    transformer: Transformer = Transformer()
    moe: Moe | None = None

    @model_validator(mode="after")
    def _family_keys(self) -> Model:
        """Each family's keys, and only those: the dense family is DLIO's arithmetic, which has no experts,
        latent attention, head width of its own or tied head."""
        key, t = "workload.model", self.transformer
        if self.family == "moe":
            if self.moe is None:
                raise ConfigError(f"{key}.moe", None, "is required with model.family=moe (num_experts, "
                                  "expert_ffn_hidden_size, ...)")
            e = self.moe
            if t.attention == "gqa" and t.num_attention_heads % t.num_kv_heads:
                raise ConfigError(f"{key}.transformer.num_kv_heads", t.num_kv_heads, "must divide num_attention_heads "
                                  f"({t.num_attention_heads}): each key/value head serves a group of query heads")
            if not any(is_moe_block(i, e.first_dense_layers, e.layer_step) for i in range(self.num_layers)):
                raise ConfigError(f"{key}.moe.first_dense_layers", e.first_dense_layers, f"leaves no MoE layer among "
                                  f"{self.num_layers} (layer_step {e.layer_step}): use family=dense")
            if e.num_experts % self.parallelism.expert:
                raise ConfigError(f"{key}.parallelism.expert", self.parallelism.expert, "must divide moe.num_experts "
                                  f"({e.num_experts}): each expert-parallel rank holds the same number of experts")
            return self
        dense_only = {"moe": self.moe, "mtp_layers": self.mtp_layers or None,
                      "parallelism.expert": self.parallelism.expert if self.parallelism.expert > 1 else None,
                      "parallelism.expert_tensor": self.parallelism.expert_tensor,
                      "transformer.attention": t.attention if t.attention != "gqa" else None,
                      "transformer.head_dim": t.head_dim, "transformer.qk_norm": t.qk_norm or None,
                      "transformer.tie_embeddings": t.tie_embeddings or None}
        for name, value in dense_only.items():
            if value is not None:
                shown = value.model_dump(exclude_defaults=True) if isinstance(value, Moe) else value
                raise ConfigError(f"{key}.{name}", shown, "applies to model.family=moe only (the dense family is "
                                  "DLIO's Llama arithmetic, held to DLIO): set model.family=moe, or leave it out")
        return self


class Checkpoint(Section):
    checkpoint_folder: str = Field("checkpoints", description="under storage_root; '.' for the root itself")
    time_between_checkpoints: float = Field(5.0, ge=0, description="seconds of training between checkpoints: "
                                            "emulated (checkpoint.training), or real training steps in mode=fsdp")
    num_checkpoints_write: int = Field(1, ge=0, description="checkpoints written; 0: read an earlier run's steps")
    num_checkpoints_read: int = Field(0, ge=0, description="checkpoints read back (verified) after the writes")
    fsync: bool = Field(False, description="fsync every file before its save ends (DLIO's key, honoured)")
    odirect: bool = Field(False, description="O_DIRECT writes and reads (local files)")
    mode: Literal["default", "subset"] = Field("default", description="subset: the first ranks of a job of "
                                               "model.parallelism.data data-parallel ranks (MLPerf's subset mode)")
    recovery_rank_shift: bool = Field(False, description="each rank reads the files of the rank one host further "
                                      "on (ranks_per_host), so reads cannot come from its own page cache")
    # Our own keys (DLIO has no equivalent):
    layout: LayoutName = Field(
        "dlio", description="whose files the emulated job writes: " + "; ".join(
            f"{name} ({entry.emulates})" for name, entry in LAYOUTS.items()))
    files_per_rank: int | None = Field(None, ge=1, le=64, description="layout=dcp or megatron: files each rank "
                                       "writes (the writer's thread_count); default the framework's: 1 for DCP's "
                                       "FileSystemWriter, 2 for Megatron's torch_dist")
    format: FormatName = Field("pt", description="the bytes of each file: "
                               "torch.save's zip (DLIO's), raw, safetensors, hdf5")
    scale: float = Field(1.0, gt=0, le=1, description="shrink every file by this ratio")
    miniature: Literal["shrink", "sample"] = Field(
        "shrink", description="how checkpoint.scale makes the miniature: shrink every tensor, keeping every rank's "
        "files and items; sample: a sample of the items whole, on ranks spread over the job (layout=dcp or "
        "megatron), so that the time per item keeps its full-size share and the projection holds at small scales")
    read_from_page_cache: bool = Field(
        False, description="false: evict each file's cached pages before it is read"
    )
    ranks_per_host: int | None = Field(None, ge=1, description="for recovery_rank_shift")
    verify: bool = Field(True, description="compare every byte read back; false: only count them")
    # What a storage may reduce the data by, as dgen-py and the MLCommons fork mean it (io/synthetic.py makes it)
    compression_ratio: float = Field(1.0, ge=1, le=64, description="what a compressor (zstd) may shrink the data "
                                     "by: 2, the storage may store half (each 4 KiB block's last half is zeros); 1: "
                                     "incompressible. summary.json io.data_reduction")
    dedup_ratio: float = Field(1.0, ge=1, le=1_000_000, description="what a 4 KiB deduplicator may shrink the "
                               "data by: 2, half the blocks repeat another of the same file; 1: no 512-byte sector "
                               "or larger unit repeats anywhere in a run or between runs")
    data_values: Literal["random", "torch_rand"] = Field(
        "random", description="the tensors' values: random (irreducible); torch_rand: torch.rand's of each file's "
        "datatype, DLIO v2.0.1's (zstd -19 keeps about 85 % of fp16, 66 to 71 % of bf16, 89 % of fp32; int8 and "
        "uint8 stay irreducible; nothing repeats). reference=dlio-2.0 sets it. summary.json io.data_reduction")
    overwrite: bool = Field(False, description="replace checkpoints an earlier run left in checkpoint_folder")
    io_timeout: float = Field(300.0, ge=0, description="end the job when I/O makes no progress this long; 0: never")
    progress: bool = Field(True, description="rank 0 shows a bar on a terminal, log lines otherwise")
    progress_interval: float = Field(10.0, gt=0, description="seconds between progress lines when not on a terminal")
    trace: bool = Field(False, description="each process writes every storage call it makes (rank, thread, file, "
                        "offset, size, phase, checkpoint) and the run's phases and checkpoints into the run folder as "
                        "a DFTracer trace, {rank}_trace.pfw.gz (DFTracer's format: dftracer-utils reads it; trace-diff "
                        "compares it with a job's trace). Real modes: the framework's own calls are not in it")
    chunk_size: Bytes = Field(ByteSize(8 * MIB), ge=4096, le=64 * MIB, multiple_of=4096, description="bytes per "
                            "write or read request; each request in flight holds two and 1 MiB "
                            "(storage_options.queue_depth)")
    io_pattern: Literal["framework", "stream"] = Field(
        "framework", description="how the emulated job writes: framework, as the layout's framework does (its "
        "writer threads, its calls and their sizes, its fsyncs and renames); stream, chunk_size requests with "
        "queue_depth in flight (what the storage can do). Layout dlio writes the stream either way")
    # Async checkpoints (our keys): time_between_checkpoints is then the training time between them
    async_save: bool = Field(False, description="hold training only to stage each checkpoint, write it in the "
                             "background while the next interval trains; the next checkpoint waits for it")
    staging_gb_per_second: float = Field(
        H100_DEVICE_TO_HOST_GB_PER_SECOND["pinned"], gt=0, description="async saves: the modelled copy of each "
        "accelerator's shard into pinned host memory, GB/s (DCP's async_save stages into pinned memory; the default "
        "is an H100's rate)")
    gpu_copy_gb_per_second: float = Field(
        H100_DEVICE_TO_HOST_GB_PER_SECOND["pageable"], ge=0, description="synchronous saves with io_pattern "
        "framework: the modelled copy of each tensor from its accelerator into pageable host memory before its "
        "framework writes it (DCP's .cpu() of each tensor, torch.save of a device tensor; megatron-core copies "
        "the rank's tensors before its writers start), GB/s per accelerator (the default is an H100's rate); "
        "loads copy what each rank needs back to its accelerator at the same rate, after their reads. "
        "0: the state is in host memory, no copy. summary.json gives its time apart (device_copy_seconds_max)")
    framework_item_us: float = Field(
        0.0, ge=0, le=5000, allow_inf_nan=False, description="saves with io_pattern framework in a layout whose "
        "framework's writer threads share one interpreter (dcp): microseconds each writer thread spends on each item "
        "before its first call (DCP's planner and torch.save's archive and pickling), played busy, holding Python's "
        "lock as the framework's Python does, so a process's writer threads take their items one at a time (at most "
        "Python's switch interval, 5 ms, beyond which the interpreter would share it; a process that plays several "
        "ranks takes all their items one at a time, where each rank of a job has its own interpreter). The "
        "framework's time, not the storage's: counted as the framework's CPU (summary.json, a save's "
        "cpu.framework_seconds). trace-diff works out a value from a job's trace. 0: none")
    staging: Literal["modelled", "real"] = Field("modelled", description="modelled: the shard at "
                                                 "staging_gb_per_second (memory bounded); real: a real copy of the "
                                                 "process's shard into host memory held for the run (memory = shard)")
    training: Literal["sleep", "cpu"] = Field("sleep", description="what a training interval does: sleep, or keep "
                                              "one core busy (shows background writes competing for CPU)")
    training_memory_gb: float = Field(0.0, ge=0, allow_inf_nan=False, description="GB of host memory each process "
                                      "writes afresh at the start of every training interval and frees at its "
                                      "end, as a job whose training churns host memory leaves it just before a "
                                      "save (so the save's page cache can land on warm memory: it moved the save "
                                      "on a virtual machine once it covered nearly all free memory); 0: the "
                                      "interval touches none. Its time is the interval's (summary.json "
                                      "training_memory)")
    mtbf_hours: float | None = Field(None, gt=0, description="mean time between failures of the job: adds goodput")
    reference: ReferenceName = Field(
        "none", description="do what a reference tool does on this file system: dlio-2.0 (upstream DLIO v2.0.1: "
        "torch.save archives, buffered, no fsync, reads from the page cache, not compared) or mlcommons (the "
        "MLCommons fork: raw bytes in 32 MiB writes, fadvise DONTNEED, fsync at close, 4 reads in flight); sets "
        "those keys (summary.json io.reference)")
    read_tier: int = Field(0, ge=0, description="where the read phase reads: 0 the storage section, k the k-th "
                           "entry of tiers (recovery after losing a node reads from a remote tier)")

    @field_validator("checkpoint_folder")
    @classmethod
    def _folder_named(cls, value: str) -> str:
        """An empty value would silently mean the current folder."""
        if not value.strip():
            raise ValueError("must name a folder under storage_root ('.' for storage_root itself)")
        return value

    @model_validator(mode="after")
    def _staging_is_async(self) -> Checkpoint:
        """Staging is the copy an async save makes before writing in the background; a synchronous save
        writes from the (emulated) device directly, so a real staging copy would be asked for and not made."""
        if self.staging == "real" and not self.async_save:
            raise ConfigError("workload.checkpoint.staging", "real", "applies to async saves only: add "
                              "++workload.checkpoint.async_save=True, or leave staging out")
        return self

    @model_validator(mode="after")
    def _reads_not_more_than_writes(self) -> Checkpoint:
        w, r = self.num_checkpoints_write, self.num_checkpoints_read
        if w > 0 and r > w:
            raise ConfigError(
                "workload.checkpoint.num_checkpoints_read", r,
                f"must be <= num_checkpoints_write ({w}) when checkpoints are written",
            )
        return self


class Restore(Section):
    """How the read phase loads (our keys): a restore is rarely the save played backwards. A job restarts on
    fewer or other GPUs, evaluation loads the weights alone; the layout decides what its framework reads
    then (``layouts.restore_plan``), and refuses what its framework cannot do."""

    world_size: int | None = Field(None, ge=1, description="ranks the load runs with (default: the save's); "
                                   "layout=dcp and megatron reshard as dcp.load and dist_checkpointing.load do, "
                                   "every rank reading the stored chunks its own shards overlap")
    tensor: int | None = Field(None, ge=1, description="layout=megatron: the load's tensor parallelism (default: "
                               "the save's); the stages stay the save's, data parallelism is the rest of world_size")
    expert: int | None = Field(None, ge=1, description="layout=megatron with model.family=moe: the load's expert "
                               "parallelism (default: the save's); each rank reads the stored chunks of the routed "
                               "experts it holds at the load's, wherever the save put them")
    model_only: bool = Field(False, description="load the model's weights alone, no optimizer state (evaluation, "
                             "fine-tuning starts, inference servers)")
    lost_hosts: list[int] = Field(default_factory=list, description="hosts (by index, in rank order) lost before "
                                  "the restore: with a node-scoped read tier, their processes read their share from "
                                  "the first shared tier below it, the others their own host's copy")


class Hosts(Section):
    """Which host each process is on. Real hosts are found by name (every process says its own); a test or
    a one-machine trial asks for pretend ones, and the same code then decides per pretend host."""

    simulate: int = Field(0, ge=0, le=4096, description="0: the real hosts; N: the processes grouped into N "
                          "pretend hosts of equal size in rank order (simhost0, simhost1, ...), each with its own "
                          "local ranks, acting rank and node-scoped folders (<storage_root>/simhostI)")


class Workflow(Section):
    generate_data: Literal[False] = False
    train: Literal[False] = False
    checkpoint: Literal[True] = True


class Storage(Section):
    storage_type: StorageType = Field(
        "local_fs", description="the backend that moves the bytes")
    storage_root: str = Field("./", description="a folder, or [s3://|gs://]bucket[/prefix]")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="the backend's options (below), "
                                            "checked by its own model")
    keep_last: int | None = Field(None, ge=1, description="our key: keep only the newest steps here; an older one "
                                  "is removed once it is durable on the next tier (None: keep every step)")
    scope: Literal["shared", "node", "peer"] = Field(
        "shared", description="our key: shared: one storage every host sees (its checks, markers and clean-up "
        "are rank 0's); node: the same path on each host's own storage (local NVMe, /dev/shm), so every host "
        "checks, marks and cleans its own copy, and a step is durable there when every host has its part; "
        "peer: like node, but each host keeps other hosts' parts there, sent over MPI (replicas, replication)")
    replicas: int = Field(1, ge=1, description="scope=peer: how many other hosts keep each host's part")
    replication: Literal["ring", "clique"] = Field(
        "ring", description="scope=peer: ring: host h's part goes to hosts h+1..h+replicas; clique: hosts in "
        "groups of replicas+1 consecutive ones, each keeping every other member's part")

    def identity(self) -> tuple[str, str, str]:
        """What makes two storages the same place: type, root (a local path made absolute) and endpoint."""
        root = os.path.abspath(self.storage_root) if BACKENDS[self.storage_type].local_folder \
            else self.storage_root.rstrip("/")
        return self.storage_type, root, str(self.storage_options.get("endpoint_url", ""))

    @field_validator("storage_type", mode="before")
    @classmethod
    def _null_is_a_name(cls, value: Any) -> Any:
        """``storage_type=null`` reaches us as None (YAML's null): it names the null backend."""
        return "null" if value is None else value

    @field_validator("storage_root")
    @classmethod
    def _root_named(cls, value: str, info: ValidationInfo) -> str:
        """An empty root would silently mean the current folder (or no bucket); null stores nothing."""
        kind = info.data.get("storage_type")
        if kind != "null" and not value.strip():
            raise ValueError(f"storage_type={kind} needs a folder or bucket here ('./' for the current folder)")
        return value


class LightningSettings(Section):
    """``mode=lightning``: the Lightning demo transformer (``nlayers = model.num_layers``), trained on
    synthetic tokens, a checkpoint saved through the chosen CheckpointIO after every step."""

    checkpoint_io: Literal["torch", "s3", "dataflux"] = Field(
        "torch", description="torch: Lightning's TorchCheckpointIO (a local path, or s3:// / gs:// through "
        "fsspec); s3: s3torchconnector's S3LightningCheckpoint (storage_type=s3); dataflux: gcs-torch-dataflux's "
        "DatafluxLightningCheckpoint (storage_type=gcs; its own environment, see scripts/setup.sh)")
    dataflux_multipart: bool = Field(
        True, description="dataflux: save through GCS's XML multipart upload (Dataflux's default); false: one "
        "resumable upload stream (its disable_multipart)")
    async_save: bool = Field(False, description="wrap it in Lightning's AsyncCheckpointIO")
    accelerator: Literal["cpu", "gpu", "auto"] = Field(
        "cpu", description="where the model trains and checkpoints are saved from: cpu as in the published "
        "benchmark; gpu saves from GPU memory (one GPU); auto lets Lightning choose")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="sgd as in the demo (no state); adam "
                                              "adds two tensors per parameter")
    vocab_size: int = Field(33278, ge=2, description="the demo's (WikiText2's) sizes")
    ninp: int = Field(200, ge=2)
    nhead: int = Field(2, ge=1)
    nhid: int = Field(200, ge=1)
    batch_size: int = Field(4, ge=1)
    seq_len: int = Field(35, ge=2)

    @model_validator(mode="after")
    def _heads_divide(self) -> LightningSettings:
        if self.ninp % self.nhead:
            raise ValueError(f"nhead={self.nhead} must divide ninp={self.ninp}")
        return self


class FSDPSettings(Section):
    """``mode=fsdp``: FSDP2 over every process, model and optimizer saved with torch.distributed.checkpoint.
    ``checkpoint.fsync`` becomes the FileSystemWriter's ``sync_files``."""

    backend: Literal["gloo", "nccl"] = "gloo"
    thread_count: int = Field(1, ge=1, le=64, description="DCP writer threads (files) per process")
    async_save: bool = Field(False, description="dcp.async_save: the step waits only for staging")
    optimizer: Literal["adam", "sgd"] = "adam"
    batch_size: int = Field(2, ge=1)
    seq_len: int = Field(64, ge=2)


GDSPath = Literal["gds", "cpu", "cpu_gpu", "pinned_async", "torch_gds"]


class GDSSettings(Section):
    """``mode=gds``: one GPU tensor moved along each path, reported like fio/gdsio."""

    paths: list[GDSPath] = Field(default_factory=lambda: list(get_args(GDSPath)))
    size_mib: int = Field(1024, ge=1, description="bytes moved per path per checkpoint")
    io_size_mib: int = Field(16, ge=1, description="bytes per request (kvikio task size, copy chunk)")
    threads: int = Field(4, ge=1, le=128, description="kvikio threads")
    compat_mode: Literal["auto", "on", "off"] = "auto"


class Workload(Section):
    """One workload YAML. ``dataset``, ``reader`` and ``train`` are DLIO's training sections: they
    are accepted so DLIO's own files load, and ignored because only checkpoint I/O is emulated."""

    model: Model
    mode: ModeName = Field(
        "emulated", description="emulated: synthetic bytes in DLIO's layout; the others run the framework")
    lightning: LightningSettings = LightningSettings()
    fsdp: FSDPSettings = FSDPSettings()
    gds: GDSSettings = GDSSettings()
    framework: Literal["pytorch"] = "pytorch"
    workflow: Workflow = Workflow()
    checkpoint: Checkpoint = Checkpoint()
    storage: Storage = Storage()
    tiers: list[Storage] = Field(default_factory=list, description="our key: storages each committed step is "
                                 "copied down to in the background, in order, after storage")
    restore: Restore = Restore()
    hosts: Hosts = Hosts()
    accelerator_type: AcceleratorType | None = Field(
        None, description="MLPerf Storage 3.0: the accelerator each process stands for (its memory times the "
        "processes must hold the checkpoint, rule 4.3.4); recorded in summary.json for check")
    dataset: dict[str, Any] | None = None
    reader: dict[str, Any] | None = None
    train: dict[str, Any] | None = None


    @property
    def storages(self) -> list[Storage]:
        """Every tier in order: ``storage`` first, then ``tiers``."""
        return [self.storage, *self.tiers]

    @staticmethod
    def tier_key(k: int) -> str:
        """The configuration key of tier ``k`` (0: ``storage``), for messages: on the workload, where the plan's
        rules find it without importing this package (whose runtime imports reach the cluster)."""
        return "workload.storage" if k == 0 else f"workload.tiers[{k - 1}]"


tier_key = Workload.tier_key


# Checkpoint keys that shape the emulator's files or its emulated training loop and mean nothing to a
# framework's own save (real modes have fsdp.async_save and lightning.async_save)
EMULATOR_ONLY = ("layout", "files_per_rank", "format", "scale", "miniature", "odirect", "verify", "chunk_size",
                 "io_pattern", "recovery_rank_shift", "ranks_per_host", "mode", "async_save", "staging_gb_per_second",
                 "staging", "gpu_copy_gb_per_second", "framework_item_us", "training", "training_memory_gb",
                 "mtbf_hours", "read_tier")

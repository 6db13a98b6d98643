"""The workload configuration: DLIO's YAML keys, composed by Hydra, validated by pydantic.

Why this shape: DLIO maps ~150 YAML keys into a flat singleton by hand and silently drops the ones
it does not know (which is why its ``checkpoint.fsync`` does nothing). Here every section is a
pydantic model with ``extra="forbid"``: a typo is an error that names the key, never a silent no-op.
Hydra's compose API gives users DLIO's override grammar (``++workload.a.b=v``) and config groups
(``workload=NAME``, ``--config-dir``) without a hand-written parser.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dlio_ckpt.cluster.placement import holder
from dlio_ckpt.errors import ConfigError
from dlio_ckpt.io.backends import NAMES as BACKEND_NAMES
from dlio_ckpt.io.backends import REGISTRY as BACKENDS
from dlio_ckpt.plan.layouts import NAMES as LAYOUT_NAMES
from dlio_ckpt.plan.layouts import load_layout
from dlio_ckpt.references import NAMES as REFERENCE_NAMES
from dlio_ckpt.references import expand as with_reference
from dlio_ckpt.run.modes import NAMES as MODE_NAMES
from dlio_ckpt.run.modes import REGISTRY as MODES
from dlio_ckpt.tools.mlperf import ACCELERATOR_MEMORY_GB

Datatype = Literal["fp16", "bf16", "fp32", "fp64", "int8", "uint8"]
MIB = 1 << 20


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


def is_moe_block(layer: int, first_dense: int, step: int) -> bool:
    """Whether block ``layer`` (0-based) is MoE: DeepSeek's first dense blocks, Llama 4's interleaving (every
    ``step``-th block). The rules below ask it before a shape exists; ``moe.MoeShape`` asks it too."""
    return layer >= first_dense and (layer + 1) % step == 0


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
    time_between_checkpoints: float = Field(5.0, ge=0, description="seconds of (emulated) training between "
                                            "checkpoints")
    num_checkpoints_write: int = Field(1, ge=0, description="checkpoints written; 0: read an earlier run's steps")
    num_checkpoints_read: int = Field(0, ge=0, description="checkpoints read back (verified) after the writes")
    fsync: bool = Field(False, description="fsync every file before its save ends (DLIO's key, honoured)")
    odirect: bool = Field(False, description="O_DIRECT writes and reads (local files)")
    mode: Literal["default", "subset"] = Field("default", description="subset: the first ranks of a job of "
                                               "model.parallelism.data data-parallel ranks (MLPerf's subset mode)")
    recovery_rank_shift: bool = Field(False, description="each rank reads the files of the rank one host further "
                                      "on (ranks_per_host), so reads cannot come from its own page cache")
    # Our own keys (DLIO has no equivalent):
    layout: Literal[LAYOUT_NAMES] = Field(  # type: ignore[valid-type]
        "dlio", description="whose files the emulated job writes: dlio (DLIO's model of a DeepSpeed job, "
        "MLPerf Storage), deepspeed (what DeepSpeed's engine writes), dcp (torch.distributed.checkpoint of an "
        "FSDP2 job), megatron (Megatron-core's torch_dist of a GPT job with the distributed optimizer)")
    files_per_rank: int | None = Field(None, ge=1, le=64, description="layout=dcp or megatron: files each rank "
                                       "writes (the writer's thread_count); default the framework's: 1 for DCP's "
                                       "FileSystemWriter, 2 for Megatron's torch_dist")
    format: Literal["pt", "raw", "safetensors", "hdf5"] = Field("pt", description="the bytes of each file: "
                                                                "torch.save's zip (DLIO's), raw, safetensors, hdf5")
    scale: float = Field(1.0, gt=0, le=1, description="shrink every file by this ratio")
    read_from_page_cache: bool = Field(
        False, description="false: evict each file's cached pages before it is read"
    )
    ranks_per_host: int | None = Field(None, ge=1, description="for recovery_rank_shift")
    verify: bool = Field(True, description="compare every byte read back; false: only count them")
    overwrite: bool = Field(False, description="replace checkpoints an earlier run left in checkpoint_folder")
    io_timeout: float = Field(300.0, ge=0, description="end the job when I/O makes no progress this long; 0: never")
    progress: bool = Field(True, description="rank 0 shows a bar on a terminal, log lines otherwise")
    progress_interval: float = Field(10.0, gt=0, description="seconds between progress lines when not on a terminal")
    chunk_size: int = Field(8 * MIB, ge=4096, le=64 * MIB, multiple_of=4096, description="bytes per write or "
                            "read request; each request in flight holds two and 1 MiB (storage_options.queue_depth)")
    # Async checkpoints (our keys): time_between_checkpoints is then the training time between them
    async_save: bool = Field(False, description="hold training only to stage each checkpoint, write it in the "
                             "background while the next interval trains; the next checkpoint waits for it")
    staging_gb_per_second: float = Field(12.5, gt=0, description="modelled device-to-host copy rate per accelerator, "
                                     "GB/s (H100: 55 from pinned memory, 12.5-17 pageable)")
    staging: Literal["modelled", "real"] = Field("modelled", description="modelled: the shard at "
                                                 "staging_gb_per_second (memory bounded); real: a real copy of the "
                                                 "process's shard into host memory held for the run (memory = shard)")
    training: Literal["sleep", "cpu"] = Field("sleep", description="what a training interval does: sleep, or keep "
                                              "one core busy (shows background writes competing for CPU)")
    mtbf_hours: float | None = Field(None, gt=0, description="mean time between failures of the job: adds goodput")
    reference: Literal[REFERENCE_NAMES] = Field(  # type: ignore[valid-type]
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
    storage_type: Literal[BACKEND_NAMES] = Field(  # type: ignore[valid-type]
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

    paths: list[GDSPath] = Field(default_factory=lambda: ["gds", "cpu", "cpu_gpu", "pinned_async", "torch_gds"])
    size_mib: int = Field(1024, ge=1, description="bytes moved per path per checkpoint")
    io_size_mib: int = Field(16, ge=1, description="bytes per request (kvikio task size, copy chunk)")
    threads: int = Field(4, ge=1, le=128, description="kvikio threads")
    compat_mode: Literal["auto", "on", "off"] = "auto"


class Workload(Section):
    """One workload YAML. ``dataset``, ``reader`` and ``train`` are DLIO's training sections: they
    are accepted so DLIO's own files load, and ignored because only checkpoint I/O is emulated."""

    model: Model
    mode: Literal[MODE_NAMES] = Field(  # type: ignore[valid-type]
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
    accelerator_type: Literal[tuple(ACCELERATOR_MEMORY_GB)] | None = Field(  # type: ignore[valid-type]
        None, description="MLPerf Storage 3.0: the accelerator each process stands for (its memory times the "
        "processes must hold the checkpoint, rule 4.3.4); recorded in summary.json for check")
    dataset: dict[str, Any] | None = None
    reader: dict[str, Any] | None = None
    train: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _layout_rules(self) -> Workload:
        par, ck = self.model.parallelism, self.checkpoint
        key = "workload.model"
        if self.model.num_layers < par.pipeline:
            raise ConfigError(f"{key}.num_layers", self.model.num_layers,
                              f"must be >= model.parallelism.pipeline ({par.pipeline}): every "
                              "pipeline stage needs a layer")
        if par.zero_stage == 3 and par.pipeline != 1:
            raise ConfigError(f"{key}.parallelism.pipeline", par.pipeline,
                              "must be 1 with zero_stage=3 (ZeRO-3 does not combine with "
                              "pipeline parallelism)")
        if ck.mode == "subset" and par.data is None:
            raise ConfigError(f"{key}.parallelism.data", None,
                              "is required when checkpoint.mode=subset (the data-parallel size of "
                              "the full job whose first ranks this run emulates)")
        if ck.mode == "default" and par.data is not None:
            raise ConfigError(f"{key}.parallelism.data", par.data,
                              "is only allowed with checkpoint.mode=subset; in default mode the "
                              "data-parallel size is world size // (tensor*pipeline)")
        if ck.files_per_rank is not None and ck.layout not in ("dcp", "megatron"):
            raise ConfigError("workload.checkpoint.files_per_rank", ck.files_per_rank,
                              f"means nothing with checkpoint.layout={ck.layout}: its files are one per model part; "
                              "set checkpoint.layout=dcp or megatron, or leave files_per_rank out")
        if not self.model.master_weights and ck.layout != "dcp":
            raise ConfigError("workload.model.master_weights", False,
                              f"means nothing with checkpoint.layout={ck.layout}: DLIO's arithmetic always writes "
                              "master weights in the optimizer files; set checkpoint.layout=dcp, or leave it out")
        load_layout(ck.layout).check(self)
        if self.model.moments_datatype is not None and ck.layout not in ("dcp", "megatron"):
            raise ConfigError("workload.model.moments_datatype", self.model.moments_datatype, f"means nothing with "
                              f"checkpoint.layout={ck.layout}: its optimizer files keep every state in "
                              "optimizer_datatype; set checkpoint.layout=dcp or megatron, or leave it out")
        for name in ("first_stage_layers", "last_stage_layers"):
            value = getattr(par, name)
            if value is not None and ck.layout != "megatron":
                raise ConfigError(f"{key}.parallelism.{name}", value, f"means nothing with checkpoint.layout="
                                  f"{ck.layout}: it is Megatron's uneven pipeline split; set "
                                  "checkpoint.layout=megatron, or leave it out")
        return self

    @property
    def storages(self) -> list[Storage]:
        """Every tier in order: ``storage`` first, then ``tiers``."""
        return [self.storage, *self.tiers]

    @model_validator(mode="after")
    def _tier_rules(self) -> Workload:
        """Tiers that cannot work are refused before anything is written: one place listed twice, a
        storage a drain cannot copy through, steps the read phase needs that keep_last removes."""
        ck, everywhere = self.checkpoint, self.storages
        if ck.read_tier > len(self.tiers):
            raise ConfigError("workload.checkpoint.read_tier", ck.read_tier,
                              f"must be <= the number of tiers ({len(self.tiers)}): 0 reads from storage")
        seen: dict[tuple[str, str, str], str] = {}
        for k, st in enumerate(everywhere):
            key = tier_key(k)
            if st.identity() in seen:
                raise ConfigError(f"{key}.storage_root", st.storage_root,
                                  f"is the same storage as {seen[st.identity()]}: each tier must be another place")
            seen[st.identity()] = key
            if self.tiers and not BACKENDS[st.storage_type].tier:
                raise ConfigError(f"{key}.storage_type", st.storage_type,
                                  "cannot be a tier: a drain reads each file back and verifies it on the host")
            if st.scope != "shared" and not BACKENDS[st.storage_type].local_folder:
                raise ConfigError(f"{key}.scope", st.scope, f"needs a folder on each host (local_fs); storage_type="
                                  f"{st.storage_type} is one store every host reaches: scope shared")
            if st.scope != "peer" and (st.replicas != 1 or st.replication != "ring"):
                raise ConfigError(f"{key}.replicas" if st.replicas != 1 else f"{key}.replication",
                                  st.replicas if st.replicas != 1 else st.replication, "applies to scope=peer only")
            if st.scope == "peer" and k == 0:
                raise ConfigError(f"{key}.scope", "peer", "cannot be the first storage: a peer tier keeps copies "
                                  "of what a tier above holds (list it in workload.tiers, after a node tier)")
            if st.scope == "peer" and (bad := _peer_rule(st, self.hosts.simulate)):
                raise ConfigError(f"{key}.replicas", st.replicas, bad)
        lost = self.restore.lost_hosts
        read_tiers = [ck.read_tier, *([self.lost_source()] if lost else [])]
        for t in read_tiers:
            reader = everywhere[t]
            if ck.num_checkpoints_read and reader.keep_last and reader.keep_last < ck.num_checkpoints_write:
                key = tier_key(t)
                raise ConfigError(f"{key}.keep_last", reader.keep_last,
                                  f"keeps only the newest {reader.keep_last} of {ck.num_checkpoints_write} steps "
                                  f"there, and the read phase reads steps 1..{ck.num_checkpoints_read} from it: "
                                  "raise keep_last to num_checkpoints_write, or read from another tier "
                                  "(checkpoint.read_tier)")
        if everywhere[ck.read_tier].scope == "peer":
            raise ConfigError("workload.checkpoint.read_tier", ck.read_tier, f"{tier_key(ck.read_tier)} is a peer "
                              "tier: each host keeps other hosts' parts there, read only by a lost host's "
                              "replacement (restore.lost_hosts); read from a node or shared tier")
        if everywhere[ck.read_tier].scope == "node" and (self.restore.world_size or self.restore.tensor):
            raise ConfigError("workload.restore.world_size" if self.restore.world_size else "workload.restore.tensor",
                              self.restore.world_size or self.restore.tensor, f"reshards, reading other ranks' files, "
                              f"and {tier_key(ck.read_tier)} (the read tier) is node-scoped: each host holds only its "
                              "own; read from a shared tier (checkpoint.read_tier)")
        if everywhere[ck.read_tier].scope == "node" and ck.recovery_rank_shift:
            raise ConfigError("workload.checkpoint.recovery_rank_shift", True, f"reads another host's files, and "
                              f"{tier_key(ck.read_tier)} (the read tier) is node-scoped: each host holds only its "
                              "own; declare hosts lost instead (restore.lost_hosts), or read from a shared tier")
        return self

    def lost_source(self, hosts: int = 0) -> int:
        """The tier lost hosts restore from: the first peer or shared one below the read tier, the fastest that
        still holds their share (a node tier below is each host's own, gone with the host); an error (exit 2)
        where there is none."""
        ck, lost = self.checkpoint, self.restore.lost_hosts
        if self.storages[ck.read_tier].scope != "node":
            raise ConfigError("workload.restore.lost_hosts", lost, f"needs a node-scoped read tier: "
                              f"{tier_key(ck.read_tier)} is shared, and every host reads it alike")
        hosts = hosts or self.hosts.simulate  # 0: not known before the run (real hosts), checked again once placed
        if hosts and (beyond := [h for h in lost if h >= hosts]):
            raise ConfigError("workload.restore.lost_hosts", lost, f"host {beyond[0]} is not one of the job's "
                              f"{hosts} hosts (0..{hosts - 1}, in the order of their first rank)")
        for k in range(ck.read_tier + 1, len(self.storages)):
            st = self.storages[k]
            if st.scope == "shared" or st.scope == "peer" and (not hosts or all(
                    holder(hosts, h, st.replicas, st.replication, lost) is not None for h in lost)):
                return k
        raise ConfigError("workload.restore.lost_hosts", lost, f"no tier below {tier_key(ck.read_tier)} holds a "
                          "lost host's share: every tier after it is node-scoped (gone with the host); add a "
                          "peer or shared tier (workload.tiers) for the restore to read from")

    @model_validator(mode="after")
    def _real_mode_rules(self) -> Workload:
        """What a real mode cannot honour is refused here, never silently dropped (DLIO's defect)."""
        if self.mode == "emulated":
            return self
        st, ck, mode = self.storage, self.checkpoint, self.mode
        if self.model.family != "dense":
            raise ConfigError("workload.model.family", self.model.family, f"mode={mode} trains the dense Llama "
                              "of real/llama.py; MoE models run emulated (leave workload.mode out)")
        supported = MODES[mode].storage or BACKEND_NAMES
        if {"parallel_fs": "local_fs"}.get(st.storage_type, st.storage_type) not in supported:
            raise ConfigError("workload.storage.storage_type", st.storage_type,
                              f"mode={mode} supports storage_type {', '.join(supported)}")
        for name in EMULATOR_ONLY:
            value = getattr(ck, name)
            if value != Checkpoint.model_fields[name].default:
                raise ConfigError(f"workload.checkpoint.{name}", value, f"applies to emulated runs only: in "
                                  f"mode={mode} the framework decides it; leave it out")
        if self.tiers or st.keep_last is not None or ck.read_tier:
            raise ConfigError("workload.tiers" if self.tiers else "workload.storage.keep_last" if st.keep_last
                              else "workload.checkpoint.read_tier",
                              [t.storage_root for t in self.tiers] or st.keep_last or ck.read_tier,  # no options: keys
                              f"tiers apply to emulated runs only: in mode={mode} the framework saves to one storage")
        if self.restore != Restore():
            raise ConfigError("workload.restore", self.restore.model_dump(exclude_defaults=True),
                              f"applies to emulated runs only: mode={mode} loads what it saved, as it saved it")
        if st.scope != "shared" or self.hosts.simulate:
            key, value = ("workload.storage.scope", st.scope) if st.scope != "shared" else \
                ("workload.hosts.simulate", self.hosts.simulate)
            raise ConfigError(key, value, f"applies to emulated runs only: in mode={mode} the framework places "
                              "its files and its processes")
        if st.storage_options.get("spread_prefixes"):
            raise ConfigError("workload.storage.storage_options.spread_prefixes", st.storage_options["spread_prefixes"],
                              "applies to emulated runs only: in real modes the framework names the objects")
        if st.storage_options.get("library", "s3torchconnector") != "s3torchconnector":
            raise ConfigError("workload.storage.storage_options.library", st.storage_options["library"],
                              f"applies to emulated runs only: mode={mode} writes through its framework's own client")
        if ck.num_checkpoints_write == 0:
            raise ConfigError("workload.checkpoint.num_checkpoints_write", 0,
                              f"must be >= 1 in mode={mode} (it reads back what this run saved)")
        store = {"s3": "s3", "dataflux": "gcs"}.get(self.lightning.checkpoint_io)
        if mode == "lightning" and store and st.storage_type != store:
            raise ConfigError("workload.lightning.checkpoint_io", self.lightning.checkpoint_io,
                              f"needs storage_type={store} (storage_type is {st.storage_type})")
        if mode == "fsdp" and self.model.model_datatype not in FSDP_DATATYPES:
            raise ConfigError("workload.model.model_datatype", self.model.model_datatype,
                              f"mode=fsdp trains in one of {', '.join(FSDP_DATATYPES)}")
        return self


def _peer_rule(st: Storage, hosts: int) -> str | None:
    """What a peer tier's replication cannot do on ``hosts`` hosts (0: not known before the run)."""
    if hosts and st.replicas >= hosts:
        return f"must be below the number of hosts ({hosts}): a host cannot keep its own copy as a peer's"
    if hosts and st.replication == "clique" and hosts % (st.replicas + 1):
        return f"cliques of replicas+1={st.replicas + 1} hosts must divide the {hosts} hosts"
    return None


def tier_key(k: int) -> str:
    """The configuration key of tier ``k`` (0: ``storage``), for messages."""
    return "workload.storage" if k == 0 else f"workload.tiers[{k - 1}]"


# Checkpoint keys that shape the emulator's files or its emulated training loop and mean nothing to a
# framework's own save (real modes have fsdp.async_save and lightning.async_save)
EMULATOR_ONLY = ("layout", "files_per_rank", "format", "scale", "odirect", "verify", "chunk_size",
                 "recovery_rank_shift", "ranks_per_host", "mode", "async_save", "staging_gb_per_second", "staging",
                 "training", "mtbf_hours", "read_tier")
FSDP_DATATYPES = ("fp16", "bf16", "fp32", "fp64")  # torch dtypes the real model can train in


MAX_WORLD_SIZE = 1 << 18  # plan's time and memory grow with it (bench/plan_scale.py: json ~1.6 KiB, ~40 us a rank)


def check_world_size(workload: Workload, world_size: int, processes: int | None = None) -> None:
    """Every rule that needs the world size (DLIO's) or the process count (``processes``; None for
    ``plan``, which starts none), checked before anything is written."""
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
    world_rule = getattr(load_layout(workload.checkpoint.layout), "check_world", None)
    if world_rule is not None:  # the layout's own (DeepSpeed: EP within data parallelism)
        world_rule(workload, world_size)
    if workload.checkpoint.mode == "subset" and par.data * mp < world_size:
        raise ConfigError(
            "workload.model.parallelism.data", par.data,
            f"data*tensor*pipeline={par.data * mp} must be >= the world size {world_size} "
            "(subset mode emulates the first ranks of a larger job)",
        )


# ---------------------------------------------------------------------------------------------
# Composition


def config_root() -> Path:
    """The packaged configs: ``dlio_ckpt/configs`` when installed, the repo's ``configs/`` else."""
    installed = Path(__file__).parent / "configs"
    return installed if (installed / "config.yaml").is_file() else Path(__file__).parent.parent / "configs"


def available_workloads(config_dir: str | None = None) -> list[str]:
    dirs = [config_root() / "workload"] + ([Path(config_dir) / "workload"] if config_dir else [])
    return sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})


def compose(overrides: list[str], config_dir: str | None = None, folder: Literal["run", "sweep"] = "run",
            ) -> tuple[Workload, dict, str]:
    """Compose ``workload=NAME`` plus overrides, validate, and return (workload, raw dict, run dir;
    or with ``folder="sweep"`` the sweep's folder).

    The run dir is returned unresolved-by-us: Hydra resolves ``${now:...}`` here, so only rank 0
    should call this for the directory it will broadcast (all ranks may call it to validate).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_override_keys(overrides)
    extra = list(overrides)
    if config_dir is not None:
        if not os.path.isdir(config_dir):
            raise ConfigError("--config-dir", config_dir, "is not a directory")
        extra.append(f"hydra.searchpath=[file://{os.path.abspath(config_dir)}]")
    try:
        with initialize_config_dir(config_dir=str(config_root()), version_base=None):
            cfg = hydra_compose("config", overrides=extra, return_hydra_config=True)
            raw = OmegaConf.to_container(cfg.workload, resolve=True)
            run_dir = str(cfg.hydra[folder].dir)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError("", None, _hydra_message(exc, config_dir)) from None
    except Exception as exc:  # malformed YAML surfaces as yaml.YAMLError from inside Hydra
        if type(exc).__module__.startswith("yaml"):
            raise ConfigError("", None, f"malformed YAML: {exc}") from None
        raise
    raw = with_reference(raw)  # its keys set: the run folder's config says what ran
    return validate(raw), raw, run_dir


def workload_keys(model: type[BaseModel] = Workload, prefix: str = "workload") -> list[str]:
    """Every key of the workload, dotted (``workload.checkpoint.format``), sections included: what an
    override may name (a dict-valued key such as ``storage.storage_options`` takes any key below it)."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append(f"{prefix}.{name}")
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += workload_keys(ann, f"{prefix}.{name}")
    return keys


def _keys_of(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, pydantic field) of every key under a model; a list of sections (``tiers``) gives
    its own key, then its items' keys as ``tiers[N].KEY``."""
    for name, field in model.model_fields.items():
        ann, key = field.annotation, f"{prefix}.{name}"
        item = get_args(ann)[0] if get_origin(ann) is list and get_args(ann) else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _keys_of(ann, key)
            continue
        yield key, field
        if isinstance(item, type) and issubclass(item, BaseModel):
            yield from _keys_of(item, f"{key}[N]")


def describe_keys(section: str | None = None, more: Iterable[tuple[str, Any, str]] = ()) -> str:
    """``dlio_ckpt keys``: each key as ``++workload.KEY``, its type and rules, its default and its
    meaning; ``more``: (key, field, note) of keys the workload passes on unchecked (storage options,
    which each backend's own model checks)."""
    rows = [(k, f, "") for k, f in _keys_of(Workload, "workload")] + list(more)
    lines = []
    for key, field, note in rows:
        top = key.split(".")[1].split("[")[0]
        if section and section not in (top, key.removeprefix("workload.").split("[")[0]):
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rules = ", ".join([_kind(field.annotation), *(_rule(m) for m in field.metadata if _rule(m))])
        meaning = "; ".join(t for t in (field.description, note) if t)
        lines.append(f"++{key}  ({rules}; default {default})" + (f"\n      {meaning}" if meaning else ""))
    if not lines:
        raise ConfigError("SECTION", section, "names no key of the workload; one of "
                          + ", ".join(sorted({k.split(".")[1].split("[")[0] for k, _, _ in rows})))
    return "\n".join(lines)


def _kind(ann: Any) -> str:
    if get_origin(ann) is Literal:
        return "one of " + "|".join(str(a) for a in get_args(ann))
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "").replace("pydantic.types.", "")


def _rule(meta: Any) -> str:
    """A pydantic constraint as a reader writes it (``>= 1``)."""
    for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "a multiple of")):
        if getattr(meta, attr, None) is not None:
            return f"{sign} {getattr(meta, attr)}"
    return ""


def parse_overrides(overrides: list[str]) -> list[Any]:
    """Hydra's parse of the command line's overrides (its ``Override`` objects); its syntax errors
    as one line of ours."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError("", None, str(exc).replace("\n", " ")) from None


def check_override_keys(overrides: list[str]) -> None:
    """An override whose key is neither the workload's nor Hydra's would be composed into the config
    and then read by nothing (``++checkpoint.format=raw`` wrote pt): it is an error, naming the key
    the user most likely meant."""
    for o in parse_overrides(overrides):
        key = o.key_or_group
        if key in ("workload", "hydra") or key.startswith(("workload.", "hydra.", "hydra/")):
            continue
        known = [k.removeprefix("workload.") for k in workload_keys()]
        guess = key if key in known else next(iter(difflib.get_close_matches(key, known, n=1, cutoff=0.8)), None)
        hint = f"did you mean workload.{guess}? " if guess else ""
        raise ConfigError(key, o.input_line.partition("=")[2], f"not a key of the configuration ({hint}workload keys "
                          "are set as ++workload.SECTION.KEY=VALUE, Hydra's as ++hydra.KEY=VALUE; the README's "
                          "Keys section lists them)")


def _hydra_message(exc: Exception, config_dir: str | None) -> str:
    text = str(exc).strip()
    if text.startswith("Could not override '") and "To append to your config use +" in text:
        key = text.split("'")[1]
        known = workload_keys()
        open_ = [k for k, f in _keys_of(Workload, "workload") if "dict" in str(f.annotation)]  # any key below
        if key not in known and not any(key.startswith(k + ".") for k in open_):  # a typo, not a missing key
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"{key}: not a key of the configuration{hint}; `dlio_ckpt keys` lists them"
        return (f"{key}: not in the workload's YAML, so Hydra cannot override it: write ++{key}=... "
                "(sets a key whether or not the YAML has it)")
    if "You must specify 'workload'" in text or "Could not find 'workload/" in text:
        names = ", ".join(available_workloads(config_dir))
        first = text.splitlines()[0].removeprefix("In 'config': ")
        return f"workload: {first}; available: {names}"
    return text.replace("\n", " ")


def validate(raw: Any) -> Workload:
    """Validate a composed workload dict, turning pydantic's errors into ones that teach."""
    if not isinstance(raw, dict):
        raise ConfigError("workload", raw, "must be a mapping of sections (model, checkpoint, ...)")
    try:
        return Workload.model_validate(with_reference(raw))
    except ValidationError as exc:
        lines = [_explain(err) for err in exc.errors()]
        raise ConfigError("", None, "invalid workload configuration:\n  " + "\n  ".join(lines)) from None


def _explain(err: dict) -> str:
    loc = list(err["loc"])
    key = "workload" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return (f"{key}={err['input']!r}: unknown key{hint}; allowed keys here: "
                f"{', '.join(allowed)}")
    if err["type"] == "missing":
        return f"{key}: required key is missing"
    return f"{key}={err['input']!r}: {err['msg']}"


def _model_at(path: list[str | int]) -> type[BaseModel] | None:
    """The section a validation error's location points into (a list's item: its element model)."""
    model: type[BaseModel] = Workload
    ann: Any = None
    for part in path:
        if isinstance(part, int):  # an item of a list field such as tiers: its element type
            args = getattr(ann, "__args__", ())
            ann = args[0] if args else None
        else:
            ann = getattr(model.model_fields.get(part), "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            if isinstance(part, int) or getattr(ann, "__args__", None) is None:
                return None
            continue  # a list: the next part is its index
        model = ann
    return model

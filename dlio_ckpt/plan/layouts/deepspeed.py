"""DeepSpeed's own files: what its engine's ``save_checkpoint`` writes for ZeRO 1, 2 and 3, named as it
names them, over the same model arithmetic and parallelism as DLIO's layout.

Held to real saves of DeepSpeed 0.19.8 (CPU accelerator, gloo; tiny at TP 2, DP 2 and 3, ZeRO 1, 2, 3, bf16
and fp32: every name rank by rank, every tensor byte), recorded by ``tests/oracles/deepspeed_save.py``, and to
its source for the names
(``deepspeed/runtime/engine.py`` ``_get_ckpt_name``, ``_get_rank_zero_ckpt_name``; ``runtime/pipe/module.py``
``ckpt_layer_path``). What DeepSpeed writes, and where DLIO's arithmetic differs:

- ZeRO 1 and 2: data-parallel rank 0 of each model-parallel rank writes ``mp_rank_{mp:02d}_model_states.pt``,
  the module's weights in the training dtype (with pipeline parallelism
  ``layer_{i:02d}-model_{tp:02d}-model_states.pt`` per layer, from the source: not saved here).
- ZeRO 3: every rank writes ``zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt`` holding an empty placeholder
  per parameter (8 KB for tiny's 27): the weights are only in the optimizer files. DLIO's layout writes each rank's
  shard of the weights there, 2 bytes a parameter DeepSpeed does not write.
- Every rank writes ``[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt``: its equal partition of the
  model-parallel rank's parameters (ZeRO 1/2: flattened and padded to a multiple of twice the data-parallel
  size, the model file holding that padded buffer; ZeRO 3: each parameter padded to divide) as fp32 master weights and
  Adam's two moments, and a one-element ``step``: 12 bytes a parameter (``bf16_`` when training in bf16).
- ZeRO 0 keeps the optimizer inside the model files: not measured here, refused (use ``layout=dlio``).
- Beside the step folders, rank 0 writes at every save (:data:`BESIDE_THE_STEPS`, the plan's
  folder files, :class:`~dlio_ckpt.plan.types.FolderFile`): the recovery scripts ``zero_to_fp32.py`` (38,580 B) and
  ``zero_to_torch.py`` (2,490 B), then ``latest``, the step's name. Steps are ``global_epoch1_step{N}`` in every
  layout (DeepSpeed's tag is ``global_step{N}``, its ``latest`` 12 B).

The load (:func:`restore`) is ``engine.load_checkpoint(dir, tag)``'s, held to real loads of the same saves (every
file each rank ``torch.load``s, in order: ``tests/oracles/deepspeed_load_reads.py``) and to its source
(``runtime/engine.py``, ``runtime/state_dict_factory.py``). Every file is ``torch.load(path)``, read whole, by
``TorchCheckpointEngine.load``; each rank reads, in order:

1. model-parallel rank 0's model file (``mp_rank_00_model_states.pt``; ZeRO 3: ``zero_pp_rank_{dp}_mp_rank_00_...``):
   ``_load_checkpoint`` globs the model files (``_get_all_ckpt_names``) and ``SDLoaderBase.__init__``'s
   ``check_ckpt_list`` loads the first, whole, to read ``mp_world_size`` from it;
2. its own model-parallel rank's model file (``SDLoaderBase.load``): every data-parallel rank reads the one file
   of its MP rank that data-parallel rank 0 wrote (ZeRO 3: its own placeholders);
3. its own optimizer partition alone (``_load_zero_checkpoint``, ``_get_all_zero_checkpoint_state_dicts``: the
   other data-parallel ranks' names are listed, but only the rank's own is loaded unless
   ``zero_optimization.elastic_checkpoint``, off by default).

A mixture of experts (``model.family=moe``, :mod:`.deepspeed_moe`, held to real loads of its saves too) reads
the same two model files, then, between them and its optimizer partition, each of its expert-parallel rank's
experts in each MoE layer (``layer_{L}_expert_{E}_mp_rank_{mp:02d}_model_states.pt``, ``load_moe_state_dict``), as
written by that EP rank's expert-data-parallel rank 0.

``latest`` is read (Python's ``open``, not ``torch.load``) only when ``load_checkpoint`` is given no tag; the load
here is that of an explicit tag, and does not read it. ``restore.model_only`` is ``load_module_only=True``: steps 1
and 2 alone (and a mixture's experts), for ZeRO 1 and 2 (under ZeRO 3 DeepSpeed's then reads only the empty
placeholders, restoring no weights: refused). At another world size DeepSpeed needs the universal-checkpoint
conversion (refused). Pipeline parallelism (the pipeline engine loads its ``layer_*`` files, from the source) is not
modelled: each rank reads its own files whole, and the load says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.plan.formats import Calls, Format
from dlio_ckpt.plan.formats.pt import PtFormat, save_calls
from dlio_ckpt.plan.layouts import at_saved_world, deepspeed_moe, dlio
from dlio_ckpt.plan.layouts.base import FrameworkIO, Layout
from dlio_ckpt.plan.layouts.deepspeed_files import (
    flat_partition,
    loaded_models,
    model_states,
    model_stem,
    optimizer_states,
    optimizer_stem,
    per_parameter_partition,
    placeholder_states,
)
from dlio_ckpt.plan.layouts.rules import every_rank_writes, shared_read_tier, torch_save_only
from dlio_ckpt.plan.pattern import FileObject, Threads
from dlio_ckpt.plan.reads import FileReads, RankReads, RestorePlan, whole_files
from dlio_ckpt.plan.types import FilePlan, FolderFile, Plan, PlannedFile, RankPlan

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

def follows(moe: bool, model_only: bool) -> str:
    """What a DeepSpeed load reads, as summary.json's restore says it follows (:func:`restore`)."""
    files = ["model-parallel rank 0's model file", "its own model-parallel rank's",
             *(["its expert-parallel rank's expert files layer by layer"] if moe else []),
             *([] if model_only else ["its own optimizer partition"])]
    call = f"load_checkpoint(dir, tag{', load_module_only=True' if model_only else ''})"
    return (f"DeepSpeed 0.19.8's {call}{' of a mixture of experts' if moe else ''}: each rank torch.loads, whole, "
            f"{', '.join(files[:-1])}, then {files[-1]}")


READS = follows(moe=False, model_only=False)
NOT_MODELLED = "each rank reads its own files whole"  # a load not modelled (pipeline): DLIO's read phase
NO_RESTORE = ("DeepSpeed loads ZeRO partitions only at the parallelism they were saved with (another "
              "needs the universal-checkpoint conversion, ds_to_universal.py, not emulated); checkpoint.layout=dcp "
              "reshards")



def check(workload: Workload) -> None:
    torch_save_only(workload, "deepspeed", "DeepSpeed")
    every_rank_writes(workload, "deepspeed")  # subset mode is DLIO's: DeepSpeed's partitions are the job's
    if workload.model.family == "moe":
        deepspeed_moe.check(workload)
    stage = workload.model.parallelism.zero_stage
    if stage == 0:
        raise ConfigError("workload.model.parallelism.zero_stage", stage, "must be 1, 2 or 3 with "
                          "checkpoint.layout=deepspeed (without ZeRO DeepSpeed keeps the optimizer inside the model "
                          "files, not measured here; layout=dlio models it)")


@dataclass(frozen=True)
class DeepSpeedParams(dlio.DlioParams):
    name: ClassVar[str] = "deepspeed"

    def layer_stem(self, layer: int, mp: int, tp: int) -> str:
        return f"layer_{layer:02d}-model_{tp:02d}-model_states"

    def model_stem(self, mp: int) -> str:
        return model_stem(mp)

    def sharded_model_stem(self, dp: int, mp: int) -> str:
        return f"zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states"

    def optimizer_stem(self, dp: int, mp: int) -> str:
        return optimizer_stem(dp, mp, self.model_dtype)

    def load_stems(self, rank: RankPlan, model_only: bool) -> list[str]:
        """The files ``load_checkpoint(dir, tag)`` has ``rank`` ``torch.load``, in order (the module's docstring):
        ``_get_all_ckpt_names``' model files of every MP rank (ZeRO 3: of this DP rank), sorted, the first loaded by
        ``check_ckpt_list``, then this rank's (``SDLoaderBase.load``: index mp x files / MP world); then its own
        optimizer partition (unless ``model_only``)."""
        stems = loaded_models([self.sharded_model_stem(rank.dp, m) if self.zero_stage == 3 else self.model_stem(m)
                               for m in range(self.mp)], rank.mp, self.mp)
        if not model_only:
            stems.append(self.optimizer_stem(rank.dp, rank.mp))
        return stems

    def problems(self, plan: Plan) -> list[str]:
        """Every model-parallel rank's parameters in its data-parallel ranks' optimizer partitions."""
        problems = []
        for pp in range(self.pipeline):
            need = self.stage_elements(pp)
            held = sum(f.groups[0].numels[0] for r in plan.ranks if r.pp == pp and r.tp == 0 for f in r.files
                       if isinstance(f, FilePlan) and f.kind == "optimizer")
            if self.scale == 1.0 and held < need:
                problems.append(f"stage {pp}: optimizer partitions hold {held} of {need} parameters")
        return problems

    def stage_numels(self, pp: int) -> tuple[int, ...]:
        """The parameters of one model-parallel rank of stage ``pp`` (unsharded: ZeRO partitions them)."""
        return tuple(self.scaled(n) for layer in self.shape.stage_layers(pp, self.pipeline)
                     for n in self.shape.layer_numels(layer, self.tensor, 1))

    def stage_elements(self, pp: int) -> int:
        return sum(self.stage_numels(pp))

    def partition(self, pp: int) -> int:
        """Each data-parallel rank's share of stage ``pp``'s model-parallel rank, padded as DeepSpeed pads it."""
        if self.zero_stage == 3:
            return per_parameter_partition(self.stage_numels(pp), self.data)
        return flat_partition(self.stage_elements(pp), self.data)

    def rank_plan(self, rank: int) -> RankPlan:
        tp, pp, dp, mp = self.coordinates(rank)
        files: list[FilePlan] = []
        groups = self.stage_groups(pp, nested=True)
        if self.zero_stage in (1, 2) and dp == 0 and self.pipeline > 1:
            layers = self.shape.stage_layers(pp, self.pipeline)
            for layer, group in zip(layers, self.stage_groups(pp, nested=False), strict=True):
                files.append(model_states(self.layer_stem(layer, mp, tp), self.model_dtype, group.numels))
        elif self.zero_stage in (1, 2) and dp == 0:
            # the weights are views of ZeRO's flat buffer: torch.save writes it whole, padding and all, as the
            # one storage of the file (DeepSpeed's saves: one record of data)
            files.append(model_states(self.model_stem(mp), self.model_dtype, (self.data * self.partition(pp),)))
        elif self.zero_stage == 3:
            files.append(placeholder_states(self.sharded_model_stem(dp, mp), self.model_dtype,
                                            sum(len(g.numels) for g in groups)))
        files.append(optimizer_states(self.optimizer_stem(dp, mp), self.optimizer_dtype, (self.partition(pp),)))
        return RankPlan(rank, tp, pp, dp, mp, tuple(files))


# What every save writes beside the step folders, rank 0 alone, in this order (deepspeed/runtime/engine.py of
# DeepSpeed 0.19.8, dense and MoE alike): _save_zero_checkpoint, once rank 0's optimizer file is saved, copies the
# recovery scripts there (_copy_recovery_script: shutil.copyfile, sizes those of the 0.19.8 sdist's
# deepspeed/utils/); save_checkpoint then writes 'latest' (open(..., "w"), the tag) before its closing barrier.
# The names are held to real saves (tests/data/deepspeed_*.json, "beside_the_step").
BESIDE_THE_STEPS = (FolderFile("zero_to_fp32.py", 38_580), FolderFile("zero_to_torch.py", 2_490), FolderFile("latest"))


def make_plan(workload: Workload, world_size: int) -> Plan:
    plan = deepspeed_moe.make_plan(workload, world_size) if workload.model.family == "moe" else \
        dlio.make_plan(workload, world_size, DeepSpeedParams)
    return replace(plan, folder=BESIDE_THE_STEPS)


def modelled(workload: Workload) -> str | None:
    """Why DeepSpeed's own load is not modelled for this workload (None: it is)."""
    if workload.model.parallelism.pipeline > 1:
        return "DeepSpeed's pipeline engine's load_checkpoint (its layer_* files) is not modelled"
    return None


def reads_others(workload: Workload, world_size: int) -> bool:
    """Whether some rank of DeepSpeed's load reads a file another rank wrote: model-parallel rank 0's model file
    (every rank), its MP rank's (ZeRO 1, 2: data-parallel rank 0's), a mixture's experts (expert-data-parallel rank
    0's: MoE is ZeRO 1 or 2, so the model files already are)."""
    if modelled(workload) is not None or world_size == 1:
        return False
    return workload.model.parallelism.zero_stage != 3 or workload.model.parallelism.tensor > 1


def check_world(workload: Workload, world_size: int) -> None:
    """DeepSpeed's load reads other ranks' model files: a tier that keeps each host's files apart cannot serve it."""
    if workload.model.family == "moe":
        deepspeed_moe.check_world(workload, world_size)
    if reads_others(workload, world_size):
        experts = (", and its expert-parallel rank's expert files (written by expert-data-parallel rank 0)"
                   if workload.model.family == "moe" else "")
        models = "model-parallel rank 0's placeholder file of its own data-parallel rank" \
            if workload.model.parallelism.zero_stage == 3 else \
            "model-parallel rank 0's model file and its own model-parallel rank's (written by data-parallel rank 0)"
        shared_read_tier(workload, f"DeepSpeed's load_checkpoint has every rank torch.load {models}{experts}")


def restore(workload: Workload, plan: Plan, world_size: int, model_only: bool) -> RestorePlan:
    """What each rank of DeepSpeed's ``engine.load_checkpoint(dir, tag)`` reads (the module's docstring, and
    ``tests/unit/test_deepspeed_restore.py``: held to real loads): whole files, in DeepSpeed's order, each named by
    the writer that wrote it. A rank needs its model-parallel rank's weights (the model file's tensors; ZeRO 3's
    placeholders hold none), a mixture's experts of its expert-parallel rank, and its own optimizer partition;
    model-parallel rank 0's file, read first by every rank (and again by MP rank 0), is read amplification.
    ``model_only``: ``load_module_only=True``, the model (and expert) files alone (ZeRO 1, 2)."""
    name = workload.checkpoint.layout
    at_saved_world(workload, plan, world_size, NO_RESTORE)
    if (why := modelled(workload)) is not None:
        if model_only:
            raise ConfigError("workload.restore.model_only", True, f"is not modelled with checkpoint.layout={name}: "
                              f"{why}")
        return whole_files(plan, f"{NOT_MODELLED} ({why})")
    lay = plan.layout
    assert isinstance(lay, DeepSpeedParams | deepspeed_moe.DeepSpeedMoeParams)
    if model_only and workload.model.parallelism.zero_stage == 3:
        raise ConfigError("workload.restore.model_only", True, f"is not modelled with checkpoint.layout={name} and "
                          "model.parallelism.zero_stage=3: DeepSpeed's load_module_only then reads only each rank's "
                          "zero_pp_rank_*_model_states.pt, empty placeholders, and restores no weights (they are in "
                          "the optimizer files, which it skips)")
    where = {f.stem: (r.rank, k) for r in plan.ranks for k, f in enumerate(r.files)}
    ranks = []
    for r in plan.ranks:
        stems = lay.load_stems(r, model_only)
        kept = stems[1:]  # its MP rank's weights, its experts and its own partition
        needed = sum(plan.ranks[where[s][0]].files[where[s][1]].payload_bytes for s in kept)
        ranks.append(RankReads(r.rank, tuple(FileReads(*where[s]) for s in stems), needed))
    moe = isinstance(lay, deepspeed_moe.DeepSpeedMoeParams)
    return RestorePlan(world_size, plan.world_size, model_only, tuple(ranks), follows(moe, model_only))


def load_caveat(workload: Workload) -> str | None:
    """Said beside the load's figures where DeepSpeed's own load is not modelled (pipeline)."""
    why = modelled(workload)
    return None if why is None else f"not the framework's own load ({why}): {NOT_MODELLED}"


def file_format(workload: Workload) -> Format:
    """``torch.save(state_dict, path)``: pt, its records named by the file (``checkpoint.format=pt`` is checked)."""
    return PtFormat(by_path=True)


def file_calls(file: PlannedFile) -> Calls:
    """A file as DeepSpeed's ``TorchCheckpointEngine.save`` writes it: ``torch.save(state_dict, path)``."""
    assert isinstance(file, FilePlan)  # DeepSpeed's files are state dicts
    return save_calls(file)


# deepspeed/runtime/checkpoint_engine/torch_checkpoint_engine.py (deepspeedai/DeepSpeed, 0.19.x): save() is
# torch.save(state_dict, path), each of a rank's files in turn on its own thread; load() is torch.load(path).
# torch.save of a path writes through C++'s std::ofstream, and nothing syncs the file.
FRAMEWORK_IO = FrameworkIO(writer="DeepSpeed TorchCheckpointEngine: torch.save(state_dict, path) (torch 2.13.0)",
                           file_calls=file_calls, threads=Threads.CALLER, file_object=FileObject.CPP,
                           syncs_files=False, archives=True)


LAYOUT = Layout(make_plan=make_plan, file_format=file_format, check=check, check_world=check_world,
                restore=restore, reads=READS, no_restore=NO_RESTORE, framework_io=FRAMEWORK_IO,
                # None: restore() is DeepSpeed's load (with tensor 1 under ZeRO 3, each rank reading its own files
                # whole is it); where it is not modelled (pipeline), load_caveat says so
                whole_file_load=None, load_caveat=load_caveat)

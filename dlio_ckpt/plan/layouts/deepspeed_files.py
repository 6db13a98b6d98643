"""DeepSpeed's file names and what its files hold, for dense models (:mod:`.deepspeed`) and mixtures of
experts (:mod:`.deepspeed_moe`) alike: DeepSpeed 0.19.8's ``runtime/engine.py`` (``_get_ckpt_name``,
``_get_zero_ckpt_name``, ``_get_expert_ckpt_name``). Only ``mp`` is zero-padded; ``bf16_`` prefixes the
optimizer files of a bf16 run whatever the ZeRO stage."""

from __future__ import annotations

from dlio_ckpt.plan.types import FilePlan, TensorGroup


def model_stem(mp: int) -> str:
    return f"mp_rank_{mp:02d}_model_states"


def optimizer_stem(dp: int, mp: int, model_dtype: str) -> str:
    return f"{'bf16_' if model_dtype == 'bf16' else ''}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states"


def expert_stem(layer: int, expert: int, mp: int) -> str:
    """One expert of one MoE layer: ``layer`` counts MoE layers only, ``expert`` is the global id."""
    return f"layer_{layer}_expert_{expert}_mp_rank_{mp:02d}_model_states"


def loaded_models(stems: list[str], mp: int, mp_world: int) -> list[str]:
    """The model files DeepSpeed 0.19.8's ``load_checkpoint`` has model-parallel rank ``mp`` ``torch.load``, of the
    ``stems`` its ``_get_all_ckpt_names`` finds (``runtime/engine.py``): sorted, the first loaded whole by
    ``SDLoaderBase.check_ckpt_list`` (for ``mp_world_size``), then this rank's (``SDLoaderBase.load``: index
    mp x files / MP world; ``runtime/state_dict_factory.py``)."""
    models = sorted(stems)
    return [models[0], models[mp * len(models) // mp_world]]


def model_states(stem: str, dtype: str, numels: tuple[int, ...]) -> FilePlan:
    """The module's weights (ZeRO 1, 2): one tensor per parameter, in the training dtype."""
    return FilePlan(stem, "model", dtype, (TensorGroup("module", numels),))


def placeholder_states(stem: str, dtype: str, parameters: int) -> FilePlan:
    """ZeRO 3's model file: an empty tensor per parameter, the weights being in the optimizer's partitions."""
    return FilePlan(stem, "model", dtype, (TensorGroup("module", (0,) * parameters),))


def flat_partition(elements: int, data: int) -> int:
    """ZeRO 1 and 2: a rank's share of a param group flattened into one buffer, which DeepSpeed pads to a
    multiple of twice the data-parallel size (``stage_1_and_2.py``: ``nccl_start_alignment_factor`` 2)."""
    return -(-elements // (2 * data)) * 2


def per_parameter_partition(numels: tuple[int, ...], data: int) -> int:
    """ZeRO 3: a rank's share, each parameter partitioned on its own and padded to divide by the
    data-parallel size (``partition_parameters.py``)."""
    return sum(-(-n // data) for n in numels)


def optimizer_states(stem: str, dtype: str, partitions: tuple[int, ...]) -> FilePlan:
    """A data-parallel rank's partition of each param group (``partitions``: its elements, padded as
    :func:`flat_partition` or :func:`per_parameter_partition` says): fp32 master weights, exp_avg, exp_avg_sq
    and step; an MoE model's second group is the EP rank's expert parameters, over expert-data-parallel ranks."""
    numels = tuple(n for e in partitions for n in (e,) * 3 + (1,))
    return FilePlan(stem, "optimizer", dtype, (TensorGroup(None, numels),))

"""A real Megatron-core ``torch_dist`` save on CPU (gloo), the oracle of ``checkpoint.layout=megatron``.

    python tests/oracles/megatron_save.py OUT WORLD TP LAYERS HIDDEN FFN HEADS KV_HEADS VOCAB DTYPE THREADS [MOE]
    python tests/oracles/megatron_save.py load OUT_JSON STEP TP:WORLD:MODEL_ONLY[:EP][,...] TP LAYERS ... [MOE]
    python tests/oracles/megatron_save.py saves OUT WORLD TP LAYERS ... [MOE] + OUT WORLD TP LAYERS ... [MOE] + ...
    python tests/oracles/megatron_save.py then-load OUT_JSON TP:WORLD:MODEL_ONLY[:EP][,...] OUT WORLD TP ... [MOE]

TP is ``TP``, ``TPxPP`` or ``TPxPPxFIRST``: pipeline parallelism PP (a GPTModel per stage, its pre_process
and post_process as Megatron-LM sets them), FIRST the first stage's blocks (Megatron's uneven split,
``num_layers_in_first_pipeline_stage``).

The fourth form is the first form's save, then the second form's loads of the step it saved, from one process
(megatron-core imported once for both). The third form makes several saves of the first form's, one after
another (each its ranks forked afresh from this process, which imported megatron-core once for all of them).

The second form loads a saved step as Megatron-LM loads by default (``dist_checkpointing.load``, no fully
parallel load) at each TP and world size given (the save's stages kept; a mixture of experts, given the save's MOE,
at the MOE's expert parallelism or EP where given), the model alone when MODEL_ONLY is 1,
and writes what each rank read, in order: every file it opened in the step folder, whole (``metadata.json``,
``common.pt``, ``.metadata``: whichever library opens them), and (file, offset, length) per item DCP's
``FileSystemReader`` reads of the ``.distcp`` files.

MOE, a JSON object, makes it a mixture of experts (``layout=megatron`` with ``family=moe``): ``experts``,
``moe_ffn``, ``shared`` (the shared experts' width, 0: none), ``freq`` (Megatron's ``moe_layer_freq``: an int or
a 0/1 list), ``ep``, ``etp``, ``expert_bias``, ``qk_norm``, and ``mla`` (``q_lora``, ``kv_lora``, ``nope``,
``rope``, ``v``) for latent attention, ``mtp`` (DeepSeek's multi-token-prediction depth). Megatron's local
(non-TransformerEngine) specs are what runs on a CPU:
SequentialMLP experts; MLA's core attention, which has no parameters, is replaced by an empty module.

A GPTModel (local layer spec: RMSNorm, SwiGLU, no biases, untied output layer), one Adam step of the
distributed optimizer on made-up gradients, then ``dist_checkpointing.save`` of the model's and the
optimizer's sharded state dicts (``fully_reshardable``) with the fully parallel save over data-parallel
ranks, as Megatron-LM saves. megatron-core 0.16.1 assumes CUDA in a few places that have nothing to do
with the layout: those calls are sent to the CPU here (``_on_cpu``) and nothing else is changed.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _on_cpu() -> None:
    """torch.cuda.synchronize and current_device (the savers), factory calls with device='cuda' and
    Tensor.cuda (the optimizer's buffers) go to the CPU; Tensor.type() answers with CUDA type names,
    which the distributed optimizer checks for."""
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.empty_cache = lambda *a, **k: None

    def cpu(kw: dict) -> dict:
        d = kw.get("device")
        if isinstance(d, int) or (isinstance(d, str) and d.startswith("cuda")) or \
                (isinstance(d, torch.device) and d.type == "cuda"):
            kw["device"] = "cpu"
        return kw
    for name in ("tensor", "zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "arange"):
        original = getattr(torch, name)
        setattr(torch, name, functools.wraps(original)(lambda *a, _f=original, **kw: _f(*a, **cpu(kw))))
    torch.Tensor.cuda = lambda self, *a, **k: self
    plain_type = torch.Tensor.type

    def cuda_type(self: torch.Tensor, *a: object, **k: object) -> object:
        if a or k:
            return plain_type(self, *a, **k)
        name = plain_type(self)
        return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
    torch.Tensor.type = cuda_type


def _moe_config(moe: dict) -> dict:
    """TransformerConfig's MoE keys from the oracle's MOE argument."""
    cfg = {"num_moe_experts": moe["experts"], "moe_ffn_hidden_size": moe["moe_ffn"],
           "moe_layer_freq": moe.get("freq", 1), "expert_model_parallel_size": moe.get("ep", 1),
           "expert_tensor_parallel_size": moe.get("etp", 1), "moe_token_dispatcher_type": "allgather",
           "qk_layernorm": moe.get("qk_norm", False), "mtp_num_layers": moe.get("mtp") or None}
    if moe.get("shared"):
        cfg["moe_shared_expert_intermediate_size"] = moe["shared"]
    if moe.get("expert_bias"):
        cfg.update(moe_router_enable_expert_bias=True, moe_router_score_function="sigmoid")
    return cfg


def _mla_spec(spec: object) -> None:
    """MLA on the local spec: its DotProductAttention does not take MLA's head widths (it has no
    parameters: an empty module stands in), and megatron-core 0.16.1 asks isinstance of TE classes."""
    import megatron.core.transformer.multi_latent_attention as mla

    class NoCoreAttention(torch.nn.Module):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__()
    mla.HAVE_TE = False
    for layer in spec.layer_specs:
        layer.submodules.self_attention.submodules.core_attention = NoCoreAttention


def build(rank: int, world: int, port: int, args: list[str]) -> tuple:
    """The process group, the model and its distributed optimizer after one step, as the save has them."""
    tp_pp, layers, hidden, ffn, heads, kv, vocab, dtype, threads = args[:9]
    parts = tp_pp.split("x")  # TP, TPxPP or TPxPPxFIRST (the first stage's blocks, Megatron's uneven split)
    tp, pp, first = (parts + ["1", ""][len(parts) - 1:])[:3]
    moe = json.loads(args[9]) if len(args) > 9 else None
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    _on_cpu()
    import torch.nn.functional as F  # noqa: N812
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_layer_local_spec,
        get_gpt_mtp_block_spec,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    moe_keys = _moe_config(moe) if moe else {}
    ps.initialize_model_parallel(tensor_model_parallel_size=int(tp), pipeline_model_parallel_size=int(pp),
                                 expert_model_parallel_size=moe_keys.get("expert_model_parallel_size", 1),
                                 expert_tensor_parallel_size=moe_keys.get("expert_tensor_parallel_size"))
    bf16 = dtype == "bf16"
    params_dtype = torch.bfloat16 if bf16 else torch.float32
    common = dict(num_layers=int(layers), hidden_size=int(hidden), ffn_hidden_size=int(ffn),
                  num_attention_heads=int(heads), gated_linear_unit=True,
                  activation_func=F.silu, normalization="RMSNorm", add_bias_linear=False,
                  use_cpu_initialization=True, tensor_model_parallel_size=int(tp),
                  pipeline_model_parallel_size=int(pp), pipeline_dtype=params_dtype,
                  num_layers_in_first_pipeline_stage=int(first) if first else None,
                  params_dtype=params_dtype, bf16=bf16, bias_activation_fusion=False,
                  masked_softmax_fusion=False, persist_layer_norm=False,
                  gradient_accumulation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False, **moe_keys)
    mla = (moe or {}).get("mla")
    if mla:
        cfg = MLATransformerConfig(**common, multi_latent_attention=True, q_lora_rank=mla["q_lora"],
                                   kv_lora_rank=mla["kv_lora"], qk_head_dim=mla["nope"],
                                   qk_pos_emb_head_dim=mla["rope"], v_head_dim=mla["v"], rope_type="rope")
    else:
        cfg = TransformerConfig(**common, num_query_groups=int(kv))
    if moe:
        spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization="RMSNorm")
        if mla:
            _mla_spec(spec)
    else:
        spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    mtp = get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False) if (moe or {}).get("mtp") else None
    gpt = GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=int(vocab), max_sequence_length=64,
                   share_embeddings_and_output_weights=False, position_embedding_type="rope", mtp_block_spec=mtp,
                   pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())
    model = Float16Module(cfg, gpt) if bf16 else gpt
    ddp = DistributedDataParallel(config=cfg, module=model, ddp_config=DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=False, grad_reduce_in_fp32=True))
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, use_distributed_optimizer=True,
                                                 bf16=bf16, params_dtype=params_dtype), [ddp])
    gen = torch.Generator().manual_seed(rank)
    for p in ddp.parameters():  # made-up gradients: the optimizer has state to save
        p.main_grad.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    ddp.finish_grad_sync()
    opt.step()
    return gpt, opt, ps


def worker(rank: int, world: int, port: int, out: str, args: list[str]) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    gpt, opt, ps = build(rank, world, port, args)
    threads = args[8]
    model_sd = gpt.sharded_state_dict()  # the unwrapped model, as Megatron-LM saves it
    state = {"model": model_sd, "iteration": 1,
             "optimizer": opt.sharded_state_dict(model_sd, is_loading=False,
                                                 metadata={"distrib_optim_sharding_type": "fully_reshardable"})}
    writer = TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=int(threads))
    strategy = FullyParallelSaveStrategyWrapper(writer, ps.get_data_parallel_group(with_context_parallel=True), True)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
    dist.barrier()
    dist_checkpointing.save(state, out, sharded_strategy=strategy)
    dist.barrier()
    dist.destroy_process_group()


def load_worker(rank: int, world: int, port: int, out: str, args: list[str]) -> None:
    """Megatron-LM's default load of what ``worker`` saved (TorchDistLoadShardedStrategy, no fully parallel
    load), at this run's tensor parallelism, recording every slice DCP's FileSystemReader reads."""
    import builtins
    import io

    from torch.distributed.checkpoint import FileSystemReader

    step, model_only, rest = args[0], args[1] == "1", args[2:]
    folder = os.path.realpath(step)
    reads: list[tuple[str, int, int]] = []
    slice_file, plain_open = FileSystemReader._slice_file, builtins.open

    def recorded_open(file, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        """Every whole file opened in the step folder (json's metadata.json, torch.load's common.pt, DCP's
        .metadata), by whichever library: its name and size; a .distcp's slices are recorded below."""
        if isinstance(file, str | os.PathLike) and os.path.dirname(os.path.realpath(file)) == folder and \
                not str(file).endswith(".distcp"):
            reads.append((os.path.basename(file), 0, os.path.getsize(file)))
        return plain_open(file, *a, **k)

    def recorded_slice(self, file, sinfo):  # noqa: ANN001, ANN202
        reads.append((os.path.basename(file.name), sinfo.offset, sinfo.length))
        return slice_file(self, file, sinfo)
    builtins.open = io.open = recorded_open
    FileSystemReader._slice_file = recorded_slice
    from megatron.core import dist_checkpointing

    gpt, opt, _ = build(rank, world, port, rest)
    model_sd = gpt.sharded_state_dict()
    state = {"model": model_sd}
    if not model_only:
        state["optimizer"] = opt.sharded_state_dict(model_sd, is_loading=True,
                                                    metadata={"distrib_optim_sharding_type": "fully_reshardable"})
    dist_checkpointing.load(state, step)
    gathered = [None] * world
    dist.all_gather_object(gathered, reads)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({str(r): x for r, x in enumerate(gathered)}, f)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    """``OUT WORLD MODEL...`` saves; ``load OUT_JSON STEP TP:WORLD:MODEL_ONLY[:EP],... MODEL...`` loads STEP once
    per load given (the model's TP replaced by the load's, and a mixture of experts' EP where given) and writes
    ``{"TP:WORLD:MODEL_ONLY[:EP]": {rank: reads}}``.
    The ranks are forked from this process: megatron-core is imported once, not once per rank."""
    import megatron.core.dist_checkpointing  # noqa: F401 - imported once, before the ranks are forked
    if sys.argv[1] == "then-load":  # the first form's save, then the second form's loads of it
        out_json, loads, out, world, *model = sys.argv[2:]
        mp.start_processes(worker, args=(int(world), _port(), out, model), nprocs=int(world), join=True,
                           start_method="fork")
        _loads(out_json, out, loads.split(","), model)
        return
    if sys.argv[1] == "saves":  # the first form's arguments, case after case, "+" between them
        cases: list[list[str]] = [[]]
        for arg in sys.argv[2:]:
            if arg == "+":
                cases.append([])
            else:
                cases[-1].append(arg)
        for out, world, *rest in (case for case in cases if case):
            mp.start_processes(worker, args=(int(world), _port(), out, rest), nprocs=int(world), join=True,
                               start_method="fork")
        return
    if sys.argv[1] != "load":
        out, world, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
        mp.start_processes(worker, args=(world, _port(), out, rest), nprocs=world, join=True, start_method="fork")
        return
    _loads(sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5:])


def _loads(out: str, step: str, loads: list[str], model: list[str]) -> None:
    """The second form: ``step`` loaded once per load given, what each rank read written to ``out``."""
    found = {}
    for load in loads:
        tp, world, model_only, *ep = load.split(":")
        part = f"{out}.{load.replace(':', '-')}"
        stages = model[0][len(model[0].split("x")[0]):]  # the save's stages, kept
        rest = [*model[1:9], *([json.dumps({**json.loads(model[9]), "ep": int(ep[0])})] if ep else model[9:])]
        mp.start_processes(load_worker, args=(int(world), _port(), part, [step, model_only, tp + stages, *rest]),
                           nprocs=int(world), join=True, start_method="fork")
        with open(part) as f:
            found[load] = json.load(f)
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main()
    # done and written: the interpreter's last collection would walk every object torch made (1 s of the exit)
    gc.freeze()

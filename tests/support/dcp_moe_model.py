"""The mixture of experts ``tests/oracles/dcp_moe_save.py`` saves (torchtitan v0.2.0's modules and placements,
rebuilt on torch), as that oracle takes it (a dict: its attention, ``MLA`` or ``GQA``, and sizes) and as our
workload in DCP's layout (:func:`moe_overrides`): the live saves (tests/against_frameworks/test_dcp_layout.py)
and the recorded restores (tests/support/restore_cases.py) share them; Megatron's MoE oracle takes the same ``MLA``."""

from __future__ import annotations

# latent attention's ranks (megatron_save.py takes the same keys for its MoE models)
MLA = {"q_lora": 24, "kv_lora": 16, "nope": 16, "rope": 8, "v": 16}
GQA = {"kv_heads": 2, "head_dim": 32, "qk_norm": True}


def moe_overrides(c: dict) -> list[str]:
    """tiny_moe in DCP's layout, shaped as the oracle's model."""
    keys = {"parallelism.expert": c["ep"], "num_layers": c["layers"], "transformer.hidden_size": c["dim"],
            "transformer.ffn_hidden_size": c["inter"], "transformer.num_attention_heads": c["heads"],
            "transformer.vocab_size": c["vocab"], "model_datatype": "fp32", "mtp_layers": 0,
            "moe.num_experts": c["experts"], "moe.expert_ffn_hidden_size": c["moe_inter"],
            "moe.num_shared_experts": c["shared"], "moe.first_dense_layers": c["dense"], "moe.router_bias": c["bias"],
            "moe.experts_per_token": 1}
    mla = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if "mla" in c:
        keys |= {"transformer.num_kv_heads": c["heads"]}
        keys |= {f"transformer.{k}": c["mla"][m] for k, m in zip(mla, ("q_lora", "kv_lora", "nope", "rope", "v"),
                                                                   strict=True)}
        gone = []
    else:
        keys |= {"transformer.attention": "gqa", "transformer.num_kv_heads": c["kv_heads"],
                 "transformer.head_dim": c["head_dim"], "transformer.qk_norm": c["qk_norm"]}
        gone = [f"~workload.model.transformer.{k}" for k in mla]
    model = [f"++workload.model.{k}={v}" for k, v in keys.items()]
    files = f"++workload.checkpoint.files_per_rank={c['threads']}"
    return ["workload=tiny_moe", "++workload.checkpoint.layout=dcp", files, *model, *gone]

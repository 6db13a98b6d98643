"""Every MoE workload we ship, held to the published model class: transformers builds it on the meta
device from the same values (no weights, no download), and its state dict's names and shapes, and its
parameter count, equal ours exactly (:mod:`dlio_ckpt.moe`)."""

from __future__ import annotations

import pytest
import yaml

from dlio_ckpt.config import Model
from dlio_ckpt.moe import MoeShape

from .conftest import REPO

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MOE_WORKLOADS = ("deepseek_v3", "mixtral_8x7b", "qwen3_235b_a22b", "qwen3_30b_a3b", "llama4_maverick")


def shipped(workload: str) -> MoeShape:
    """The model section of a workload we ship, as the config validates it (the layout's rules aside)."""
    raw = yaml.safe_load((REPO / "configs" / "workload" / f"{workload}.yaml").read_text())
    return MoeShape.from_model(Model.model_validate(raw["model"]))


def hf_model(name: str, s: MoeShape):
    """The transformers class and config a workload's published model is, from our workload's values."""
    common = dict(vocab_size=s.vocab_size, hidden_size=s.hidden_size, num_hidden_layers=s.num_layers,
                  num_attention_heads=s.num_attention_heads, num_key_value_heads=s.num_kv_heads,
                  tie_word_embeddings=s.tie_embeddings)
    if name == "deepseek_v3":
        cfg = transformers.DeepseekV3Config(
            **common, intermediate_size=s.ffn_hidden_size, moe_intermediate_size=s.expert_ffn_hidden_size,
            n_routed_experts=s.num_experts, n_shared_experts=s.num_shared_experts,
            first_k_dense_replace=s.first_dense_layers, q_lora_rank=s.q_lora_rank, kv_lora_rank=s.kv_lora_rank,
            qk_rope_head_dim=s.qk_rope_head_dim, qk_nope_head_dim=s.qk_nope_head_dim, v_head_dim=s.v_head_dim,
            num_experts_per_tok=8, n_group=8, topk_group=4)
        return transformers.DeepseekV3ForCausalLM, cfg
    if name == "mixtral_8x7b":
        cfg = transformers.MixtralConfig(**common, intermediate_size=s.expert_ffn_hidden_size,
                                         num_local_experts=s.num_experts, num_experts_per_tok=2)
        return transformers.MixtralForCausalLM, cfg
    if name.startswith("qwen3"):
        cfg = transformers.Qwen3MoeConfig(**common, intermediate_size=s.ffn_hidden_size, head_dim=s.head_dim,
                                          moe_intermediate_size=s.expert_ffn_hidden_size, num_experts=s.num_experts,
                                          num_experts_per_tok=8, decoder_sparse_step=s.layer_step)
        return transformers.Qwen3MoeForCausalLM, cfg
    if name.startswith("llama4"):
        cfg = transformers.Llama4TextConfig(**common, head_dim=s.head_dim, intermediate_size=s.expert_ffn_hidden_size,
                                            intermediate_size_mlp=s.ffn_hidden_size, num_local_experts=s.num_experts,
                                            num_experts_per_tok=1, interleave_moe_layer_step=s.layer_step)
        return transformers.Llama4ForCausalLM, cfg
    raise AssertionError(f"no transformers class for {name}")


def ours_in_hf_terms(name: str, s: MoeShape) -> dict[str, tuple[int, ...]]:
    """Our tensors under transformers' names: its ``model.`` prefix; Llama 4 calls the MLP ``feed_forward``,
    the router ``router``, the shared expert ``shared_expert`` and keeps experts as (experts, in, out)."""
    out = {}
    for p in s.params:
        if p.name.startswith("mtp."):
            continue  # transformers leaves the MTP module out
        key, shape = ("" if p.name == "lm_head.weight" else "model.") + p.name, p.shape
        if name.startswith("llama4"):
            key = key.replace(".mlp.gate.", ".mlp.router.").replace(".mlp.shared_experts.", ".mlp.shared_expert.")
            key = key.replace(".mlp.", ".feed_forward.")
            if p.experts:
                shape = (shape[0], shape[2], shape[1])
        out[key] = shape
    return out


@pytest.mark.parametrize("workload", MOE_WORKLOADS)
def test_every_tensor_and_the_parameter_count_equal_the_published_model_class(workload):
    s = shipped(workload)
    cls, cfg = hf_model(workload, s)
    with torch.device("meta"):
        model = cls(cfg)
    theirs = {k: tuple(t.shape) for k, t in model.state_dict().items()}
    ours = ours_in_hf_terms(workload, s)
    assert sorted(set(theirs) ^ set(ours)) == []
    assert {k: v for k, v in ours.items() if theirs[k] != v} == {}
    assert s.num_parameters == sum(p.numel() for p in model.parameters())


def test_deepseek_v3_is_671b_and_its_mtp_module_is_one_more_moe_block_beside_it():
    """The report's 671B main model; the MTP module, which transformers leaves out, is transformers' own MoE
    block plus the projection of [normed embedding; normed hidden state] and three norms (the embedding and
    head it shares with the model are saved once, with the model)."""
    s = shipped("deepseek_v3")
    assert round(s.num_parameters / 1e9) == 671
    cls, cfg = hf_model("deepseek_v3", s)
    with torch.device("meta"):
        model = cls(cfg)
    block = sum(p.numel() for p in model.model.layers[s.first_dense_layers].parameters())
    h = s.hidden_size
    assert s.mtp_parameters == block + 2 * h * h + 3 * h

"""Every MoE workload we ship, held to the published model: transformers builds each model's class on the meta
device from its published config (written out below, not read from our workloads; no weights, no download),
whose parameter count is the published total, and whose state dict's names and shapes, and parameter count,
equal ours exactly (:mod:`dlio_ckpt.model.moe`, from the workload we ship)."""

from __future__ import annotations

import pytest
import torch
import transformers
import yaml

from dlio_ckpt.config import Model
from dlio_ckpt.model.moe import MoeShape
from tests.support import REPO

# Each model's config.json on the Hugging Face Hub, the values that shape its tensors (the rest: rope, eps,
# ... change no tensor), with the total its model card or report publishes, in billions to one decimal; the
# classes by name, looked up when a test asks (transformers imports a model's module then: 2.4 s for these five,
# which every pytest worker would pay at collection)
PUBLISHED = {
    # deepseek-ai/DeepSeek-V3 config.json; the technical report's 671B total (the MTP module's 14B aside:
    # transformers leaves it out, see below)
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", 671.0, dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
        n_routed_experts=256, first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
        qk_nope_head_dim=128, v_head_dim=128, num_experts_per_tok=8, n_group=8, topk_group=4,
        tie_word_embeddings=False)),
    # mistralai/Mixtral-8x7B-v0.1 config.json; Mistral's "46.7B total parameters"
    "mixtral_8x7b": ("MixtralConfig", "MixtralForCausalLM", 46.7, dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False)),
    # Qwen/Qwen3-235B-A22B config.json; its model card's "235B in total"
    "qwen3_235b_a22b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", 235.1, dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
        num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)),
    # Qwen/Qwen3-30B-A3B config.json; its model card's "30.5B in total"
    "qwen3_30b_a3b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", 30.5, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)),
    # meta-llama/Llama-4-Maverick-17B-128E config.json's text_config (the language model alone: no vision
    # encoder); 400.7B, the "400B total" of Meta's model card to one decimal
    "llama4_maverick": ("Llama4TextConfig", "Llama4ForCausalLM", 400.7, dict(
        vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
        num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128, num_local_experts=128,
        num_experts_per_tok=1, interleave_moe_layer_step=2, tie_word_embeddings=False)),
}
MOE_WORKLOADS = tuple(PUBLISHED)


def shipped(workload: str) -> MoeShape:
    """The model section of a workload we ship, as the config validates it (the layout's rules aside)."""
    raw = yaml.safe_load((REPO / "configs" / "workload" / f"{workload}.yaml").read_text())
    return MoeShape.from_model(Model.model_validate(raw["model"]))


def published(name: str) -> tuple[torch.nn.Module, float]:
    """The published model on the meta device (no memory, no weights), and its published total in billions."""
    config, cls, total, values = PUBLISHED[name]
    with torch.device("meta"):
        return getattr(transformers, cls)(getattr(transformers, config)(**values)), total


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
def test_the_published_config_is_the_published_total_and_every_tensor_is_ours(workload):
    model, total = published(workload)
    count = sum(p.numel() for p in model.parameters())
    assert round(count / 1e9, 1) == total, count
    s = shipped(workload)
    theirs = {k: tuple(t.shape) for k, t in model.state_dict().items()}
    ours = ours_in_hf_terms(workload, s)
    assert sorted(set(theirs) ^ set(ours)) == []
    assert {k: v for k, v in ours.items() if theirs[k] != v} == {}
    assert s.num_parameters == count


def test_deepseek_v3_is_671b_and_its_mtp_module_is_one_more_moe_block_beside_it():
    """The report's 671B main model; the MTP module, which transformers leaves out, is transformers' own MoE
    block plus the projection of [normed embedding; normed hidden state] and three norms
    (the embedding and head it shares with the model are saved once, with the model)."""
    s = shipped("deepseek_v3")
    assert round(s.num_parameters / 1e9) == 671
    model, _ = published("deepseek_v3")
    block = sum(p.numel() for p in model.model.layers[s.first_dense_layers].parameters())
    h = s.hidden_size
    assert s.mtp_parameters == block + 2 * h * h + 3 * h

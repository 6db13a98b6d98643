"""Tensor arithmetic of Lightning's demo transformer and the size of its checkpoint file. Imports no torch.

Why here, below the plan: ``checkpoint.layout=lightning`` (:mod:`dlio_ckpt.plan.layouts.lightning`) writes the
file a Lightning job of this model writes, and ``plan`` predicts the file ``mode=lightning`` will write (held
within 1% of real runs: tests/e2e/test_real_modes.py), both without torch. The demo is ``nn.Transformer`` with
``nlayers`` encoder and ``nlayers`` decoder layers, an embedding and a decoder head.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from dlio_ckpt.model.dtypes import DATATYPE_BYTES

if TYPE_CHECKING:
    from dlio_ckpt.config import Workload

# Fitted to .ckpt files written by torch 2.13 / Lightning 2.6 (2, 10 and 100 layers, SGD and Adam;
# tests/e2e/test_real_modes.py holds the prediction to 1%): per parameter tensor, its zip record, pickle
# entry (the state_dict key) and 64-byte alignment; per optimizer-state tensor (exp_avg, exp_avg_sq,
# step) the same without a long key; the fixed part (loops, callbacks, versions, param groups).
PARAM_TENSOR_BYTES = 365
STATE_TENSOR_BYTES = 252
FIXED_BYTES = 1600


@dataclass(frozen=True)
class DemoTransformer:
    vocab_size: int
    ninp: int
    nhid: int
    nlayers: int

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every parameter of ``lightning.pytorch.demos.Transformer``, in state_dict order."""
        n, h, v = self.ninp, self.nhid, self.vocab_size

        def attention(prefix: str) -> list[tuple[str, tuple[int, ...]]]:
            return [(f"{prefix}.in_proj_weight", (3 * n, n)), (f"{prefix}.in_proj_bias", (3 * n,)),
                    (f"{prefix}.out_proj.weight", (n, n)), (f"{prefix}.out_proj.bias", (n,))]

        def feed_forward(prefix: str, norms: int) -> list[tuple[str, tuple[int, ...]]]:
            out = [(f"{prefix}.linear1.weight", (h, n)), (f"{prefix}.linear1.bias", (h,)),
                   (f"{prefix}.linear2.weight", (n, h)), (f"{prefix}.linear2.bias", (n,))]
            for i in range(1, norms + 1):
                out += [(f"{prefix}.norm{i}.weight", (n,)), (f"{prefix}.norm{i}.bias", (n,))]
            return out

        out: list[tuple[str, tuple[int, ...]]] = [("embedding.weight", (v, n))]
        for i in range(self.nlayers):
            p = f"transformer.encoder.layers.{i}"
            out += attention(f"{p}.self_attn") + feed_forward(p, 2)
        out += [("transformer.encoder.norm.weight", (n,)), ("transformer.encoder.norm.bias", (n,))]
        for i in range(self.nlayers):
            p = f"transformer.decoder.layers.{i}"
            out += attention(f"{p}.self_attn") + attention(f"{p}.multihead_attn") + feed_forward(p, 3)
        out += [("transformer.decoder.norm.weight", (n,)), ("transformer.decoder.norm.bias", (n,)),
                ("decoder.weight", (v, n)), ("decoder.bias", (v,))]
        return out

    @property
    def num_parameters(self) -> int:
        return sum(prod(shape) for _, shape in self.shapes())

    @classmethod
    def of(cls, workload: Workload) -> DemoTransformer:
        """The demo a workload describes: ``workload.lightning``'s sizes, ``model.num_layers`` deep."""
        s = workload.lightning
        return cls(s.vocab_size, s.ninp, s.nhid, workload.model.num_layers)


@dataclass(frozen=True)
class LightningPrediction:
    num_parameters: int
    num_tensors: int  # in the .ckpt: parameters, then optimizer state
    payload_bytes: int
    file_bytes: int  # predicted size of one .ckpt


def predict(workload: Workload) -> LightningPrediction:
    """The size of one Lightning checkpoint of this workload (fp32 parameters, as the demo trains)."""
    model = DemoTransformer.of(workload)
    params = model.num_parameters
    count = len(model.shapes())
    width = DATATYPE_BYTES["fp32"]
    payload = params * width
    overhead = FIXED_BYTES + count * PARAM_TENSOR_BYTES
    tensors = count
    if workload.lightning.optimizer == "adam":  # exp_avg and exp_avg_sq like each parameter, and a scalar step
        payload += 2 * params * width + count * 4
        overhead += 3 * count * STATE_TENSOR_BYTES
        tensors += 3 * count
    file_bytes = payload + overhead
    return LightningPrediction(params, tensors, payload, file_bytes)

"""The tensor datatypes a workload may name, and what each is called where its bytes go: one table.

Why one table: a dtype's width decides every size the tool plans, and its names in torch, in
``torch.save``'s pickle, in safetensors' header and in HDF5 must agree with that width; a dtype added in
one place and not the others would plan one size and write another. This module imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    bytes: int  # one element's width
    torch: str  # torch's attribute (torch.bfloat16)
    storage: str  # torch.save's storage class in data.pkl
    safetensors: str  # safetensors' header name
    hdf5: str  # h5py.h5t's type (bf16 has none: its 2-byte words are stored as unsigned integers)
    trains: bool  # a floating type a real model can train in (mode=fsdp)


DTYPES: dict[str, Dtype] = {
    "fp16": Dtype(2, "float16", "HalfStorage", "F16", "IEEE_F16LE", True),
    "bf16": Dtype(2, "bfloat16", "BFloat16Storage", "BF16", "STD_U16LE", True),
    "fp32": Dtype(4, "float32", "FloatStorage", "F32", "IEEE_F32LE", True),
    "fp64": Dtype(8, "float64", "DoubleStorage", "F64", "IEEE_F64LE", True),
    "int8": Dtype(1, "int8", "CharStorage", "I8", "STD_I8LE", False),
    "uint8": Dtype(1, "uint8", "ByteStorage", "U8", "STD_U8LE", False),
}
DATATYPE_BYTES: dict[str, int] = {name: d.bytes for name, d in DTYPES.items()}
TRAINABLE = tuple(name for name, d in DTYPES.items() if d.trains)

"""``checkpoint.reference``: a run that does on the same storage what a reference tool does, so a user
sees beside our best settings what DLIO v2.0 and the MLCommons fork of DLIO would report there,
without holding the checkpoint in memory as those tools do.

Why presets of our own keys rather than another engine: what makes the tools' figures differ is their
I/O pattern (bytes per write, requests in flight, buffered or direct, fsync, fadvise, whether reads
may come from the page cache), and each of those is a key here already; a preset sets them together,
and ``summary.json`` (``io``) says what was done. What each tool does, from its source (read for
this; file and commit named):

- ``dlio-2.0``: upstream DLIO v2.0.1 (argonne-lcf/dlio_benchmark b56c741,
  ``dlio_benchmark/checkpointing/pytorch_checkpointing.py``): ``torch.save`` of a dict of tensors
  (our ``pt`` format writes the same archive) through Python's buffered ``open(name, "wb")``; never
  fsyncs (``utils/config.py`` reads ``checkpoint.fsync`` into ``checkpoint_sync``, and the writer
  looks at ``checkpoint_fsync``, which stays False); reads with ``torch.load``, nothing dropped from
  the page cache before (so a read right after the writes is served from memory); checks only that
  the loaded dict has keys (so reads here count bytes, not compare them). One write at a time per rank.
  Its tensors are ``torch.rand``'s of the model's datatype (layers) and the optimizer's (optimizer states)
  (``checkpointing/base_checkpointing.py`` ``get_layer_state``, ``pytorch_checkpointing.py``
  ``get_tensor_core``; ``checkpoint.randomize_tensor`` defaults to True): the preset writes values of that
  distribution per file (``checkpoint.data_values=torch_rand``), as reducible as DLIO's (zstd -19 keeps about
  85 % of fp16, 66 or 71 % of bf16, 89 % of fp32; no block repeats; bench/results/2026-12-06-synthetic-bytes.md).
- ``mlcommons``: the MLCommons fork (mlcommons/DLIO_local_changes at cbe2001, the revision
  mlcommons/storage pins, with ``mlpstorage_py/checkpointing``'s streaming writer): raw bytes of
  exactly the tensors' size, written in 32 MiB chunks one at a time per file (4 buffers let data
  generation run ahead; one write is outstanding), ``posix_fadvise(DONTNEED)`` after every write,
  ``fsync`` at close whatever ``checkpoint.fsync`` says; reads in 4 threads over a file with
  ``fadvise(RANDOM)`` and ``DONTNEED`` after each read, bytes counted, not compared; no page-cache
  drop before reads. Where we differ: its readers split a file into 4 contiguous quarters read in
  128 MiB requests; here 4 requests of 32 MiB are in flight along the file (our chunk limit is 64 MiB).

File systems only (``local_fs``, ``parallel_fs``): the fork's S3 clients (s3dlio, minio,
s3torchconnector, 32 MiB parts) and its ``direct_fs`` (s3dlio's, buffered writes in the versions it
pins) are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlio_ckpt.errors import ConfigError
from dlio_ckpt.registry import BACKENDS

MIB = 1 << 20
# The fork's bytes, dgen-py at its defaults (dedup_ratio=1, compress_ratio=1, which its streaming checkpoint keeps),
# measure as irreducible (zstd -19 --long=31 keeps them whole, no 4 KiB block repeats; bench/cpu.py --reducibility)
IRREDUCIBLE = {"compression_ratio": 1.0, "dedup_ratio": 1.0, "data_values": "random"}
# DLIO v2.0.1's bytes: torch.rand's tensors of each file's datatype, nothing repeated or zeroed
TORCH_RAND = {"compression_ratio": 1.0, "dedup_ratio": 1.0, "data_values": "torch_rand"}


@dataclass(frozen=True)
class Reference:
    tool: str
    checkpoint: dict[str, Any]  # workload.checkpoint keys it sets
    storage_options: dict[str, Any]  # workload.storage.storage_options keys it sets
    decides: tuple[str, ...] = ()  # checkpoint keys the tool reads but decides itself (an earlier value is replaced)
    differences: tuple[str, ...] = ()  # what we still do otherwise, said in summary.json


REFERENCES: dict[str, Reference] = {
    "dlio-2.0": Reference(
        "upstream DLIO v2.0.1 (b56c741)",
        {"format": "pt", "fsync": False, "odirect": False, "read_from_page_cache": True, "verify": False,
         **TORCH_RAND},
        {"threads": 1, "queue_depth": 1, "read_queue_depth": 1, "fadvise_dontneed": False},
        decides=("fsync",),
        differences=("torch.save's own write sizes are not reproduced (chunk_size bytes per write here)",
                     "torch.load's unpickling and tensor allocation on reads are not done (bytes are counted)",
                     "data: torch.rand's values of each file's datatype, as DLIO's, and as reducible (zstd keeps "
                     "within 0.3 points of torch.rand's share of fp16 and fp32; of bf16 at -3 and -9, and at -19 "
                     "one of the two shares it keeps of torch.rand's own by the seed), but from our generator: "
                     "each 4 KiB block begins with a 32-byte stamp, and each MiB of a file is its datatype's "
                     "torch.rand pool with the mantissas XORed anew")),
    "mlcommons": Reference(
        "the MLCommons DLIO fork (DLIO_local_changes cbe2001, mlpstorage_py streaming checkpointing)",
        {"format": "raw", "fsync": True, "odirect": False, "chunk_size": 32 * MIB, "read_from_page_cache": True,
         "verify": False, **IRREDUCIBLE},
        {"threads": 1, "queue_depth": 1, "read_queue_depth": 4, "fadvise_dontneed": True},
        decides=("fsync",),
        differences=("reads: 4 requests of 32 MiB in flight along a file, where the fork's 4 threads read its "
                     "4 quarters in 128 MiB requests", "data: our synthetic stream, where the fork uses dgen-py "
                     "(both irreducible: dgen-py's defaults, which the fork keeps for checkpoints)")),
}
NAMES = ("none", *REFERENCES)


def expand(raw: dict[str, Any]) -> dict[str, Any]:
    """The composed workload with its reference's keys set. A key the user set otherwise is refused
    (exit 2), except those the tool decides itself (``fsync``: the YAML's value is what the tool
    would have been given, and ignored)."""
    ck = raw.get("checkpoint") or {}
    name = ck.get("reference", "none")
    if name not in REFERENCES:
        return raw  # "none", or a bad name: the config's own check names the choices
    ref = REFERENCES[name]
    storage = raw.get("storage") or {}
    kind = storage.get("storage_type", "local_fs")
    file_systems = [n for n, entry in BACKENDS.items() if entry.kind == "file_system"]
    if kind not in file_systems:
        raise ConfigError("workload.checkpoint.reference", name, f"models a file system's I/O "
                          f"({', '.join(file_systems)}); storage_type is {kind}")
    if raw.get("mode", "emulated") != "emulated":
        raise ConfigError("workload.checkpoint.reference", name, "applies to emulated runs only")
    options = storage.get("storage_options") or {}
    for section, given, wanted in (("checkpoint", ck, ref.checkpoint),
                                   ("storage.storage_options", options, ref.storage_options)):
        for key, value in wanted.items():
            if key in given and given[key] != value and key not in ref.decides:
                raise ConfigError(f"workload.{section}.{key}", given[key],
                                  f"checkpoint.reference={name} sets it to {value!r} ({ref.tool}); leave it out")
    return {**raw, "checkpoint": {**ck, **ref.checkpoint},
            "storage": {**storage, "storage_options": {**options, **ref.storage_options}}}


def describe(name: str) -> dict[str, Any] | None:
    """summary.json's ``io.reference``: the tool, what the preset set, and where we still differ."""
    if name not in REFERENCES:
        return None
    ref = REFERENCES[name]
    return {"name": name, "tool": ref.tool, "sets": {**{f"checkpoint.{k}": v for k, v in ref.checkpoint.items()},
                                                     **{f"storage.storage_options.{k}": v
                                                        for k, v in ref.storage_options.items()}},
            "differences": list(ref.differences)}

"""The accelerator's device-to-host copy rate, into pinned and into pageable host memory, and its host-to-device
rate from pageable memory: the figures the emulator models copies at (``checkpoint.staging_gb_per_second``: an
async save's staging, pinned; ``checkpoint.gpu_copy_gb_per_second``: a synchronous save's copy of each tensor,
pageable, and a load's copy back, taken at the same rate), beside their defaults (an H100's published rates,
``dlio_ckpt/config/accelerators.py``). Needs a CUDA GPU; ``scripts/gpu_check.sh copy``
runs it where one is lent.

    python bench/device_copy.py [--mib 1024] [--rounds 5]

Each round copies a tensor of ``--mib`` MiB from the device into a pinned buffer, then into a pageable one (as
``tensor.cpu()`` makes one), then from a pageable buffer back into the device tensor (as a load's ``copy_`` into
the state dict does), alternating; the medians of the rounds are printed in GB/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from dlio_ckpt.config.accelerators import H100_DEVICE_TO_HOST_GB_PER_SECOND


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return 1
    n = a.mib << 20
    device = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    # each row's default: the published figure of the copy it models (a load's copy back: the pageable rate)
    defaults = {"pinned": H100_DEVICE_TO_HOST_GB_PER_SECOND["pinned"],
                "pageable": H100_DEVICE_TO_HOST_GB_PER_SECOND["pageable"],
                "pageable, to the device": H100_DEVICE_TO_HOST_GB_PER_SECOND["pageable"]}
    rates: dict[str, list[float]] = {kind: [] for kind in defaults}
    pageable = torch.empty(n, dtype=torch.uint8).fill_(2)
    device.cpu()  # the first copy pays for the context and the allocator
    for _ in range(a.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        pinned.copy_(device, non_blocking=True)
        torch.cuda.synchronize()
        rates["pinned"].append(n / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        device.cpu()
        rates["pageable"].append(n / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        device.copy_(pageable)
        torch.cuda.synchronize()
        rates["pageable, to the device"].append(n / (time.perf_counter() - t0) / 1e9)
    print(f"device: {torch.cuda.get_device_name()}, {a.mib} MiB, {a.rounds} rounds")
    print("| host memory | median GB/s | rounds | default (H100, published) |")
    print("|---|---|---|---|")
    for kind, got in rates.items():
        print(f"| {kind} | {statistics.median(got):.1f} | {', '.join(f'{r:.1f}' for r in got)} | "
              f"{defaults[kind]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

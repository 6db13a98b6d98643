#!/usr/bin/env bash
# Everything that needs a GPU, run on the lent GPU machine in one or two commands (the device tool:
# carry .whl, made here first by scripts/gpu_wheels.sh). Steps: tests, sizes, mode, fsdp, lightning,
# copy, bench (all by default). Output goes to stdout and $OUT/gpu_check.log; checkpoints under .gpucheck/.
#   bash scripts/gpu_check.sh tests sizes mode       # then: bash scripts/gpu_check.sh fsdp lightning copy bench
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/opt/torch/.venv/bin/python}
MPI=$(dirname "$PY")/mpiexec
W=$PWD/.gpucheck
OUT=${OUT:-$W}
STEPS=${*:-tests sizes mode fsdp lightning copy bench}
# DRY_RUN_PYTHONPATH=tests/standins tries the script here against the CPU stand-ins (nothing measured)
export PYTHONPATH=${DRY_RUN_PYTHONPATH:+$PWD/$DRY_RUN_PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
mkdir -p "$W" "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
[ -n "${DRY_RUN_PYTHONPATH:-}" ] || "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade .whl/*.whl \
  || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
"$PY" -c "import torch, cupy, kvikio; print('torch', torch.__version__, 'cupy', cupy.__version__, 'kvikio', kvikio.__version__)"
df -h "$W" | tail -1
show() {  # the figures of one run folder
  "$PY" - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
m, io = s["metric"], s["io"]
print({k: round(v, 3) for k, v in m.items() if k.endswith(("GiB_per_second", "size_GiB"))})
print("rss MiB per process:", [r >> 20 for r in s["memory"]["peak_rss_bytes_per_process"]])
print("storage:", {k: io["storage"].get(k) for k in ("transport", "why", "file_system", "device")})
if "paths" in io:
    for name, row in io["paths"].items():
        print(f"  {name}: {row}")
PY
}
run() {  # name, then dlio_ckpt arguments
  local name=$1; shift
  rm -rf "$W/$name"
  echo "--- $name: $*"
  /usr/bin/time -f "wall %e s, max RSS of mpiexec/python %M KiB" timeout 540 "$@" "++hydra.run.dir=$W/$name" \
    && show "$W/$name"
}
for step in $STEPS; do
  echo "=== $step"
  case $step in
    tests)
      timeout 400 "$PY" -m pytest -q -p no:cacheprovider tests/e2e/test_conformance.py -k "gds and not standin"
      timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_gds_standin.py tests/e2e/test_gds_standin.py \
        -k "not extras" ;;
    sizes)  # 8 processes, about 2 and 16 GiB: peak RSS per process must not grow with the checkpoint
      for gib in ${GIBS:-2 16}; do
        scale=$("$PY" -c "from dlio_ckpt.config import compose; from dlio_ckpt.plan.types import make_plan
p = make_plan(compose(['workload=llama_7b_zero3'])[0], 8); print($gib * 2**30 / sum(r.payload_bytes for r in p.ranks))")
        run "gds_${gib}g" "$MPI" -n 8 "$PY" -m dlio_ckpt workload=llama_7b_zero3 --world-size 8 \
          ++workload.storage.storage_type=gds "++workload.storage.storage_root=$W/store" \
          "++workload.checkpoint.scale=$scale" ++workload.checkpoint.num_checkpoints_write=1 \
          ++workload.checkpoint.num_checkpoints_read=1 ++workload.checkpoint.fsync=True \
          ++workload.checkpoint.progress=False ++workload.checkpoint.overwrite=True
        rm -rf "$W/store"
      done ;;
    mode)
      run gds_mode "$PY" -m dlio_ckpt workload=tiny ++workload.mode=gds ++workload.gds.size_mib=2048 \
        ++workload.checkpoint.fsync=True "++workload.storage.storage_root=$W/mode_store" \
        ++workload.checkpoint.num_checkpoints_write=2 ++workload.checkpoint.num_checkpoints_read=2
      rm -rf "$W/mode_store" ;;
    fsdp)
      run fsdp_nccl "$MPI" -n 1 "$PY" -m dlio_ckpt workload=tiny ++workload.mode=fsdp ++workload.fsdp.backend=nccl \
        "++workload.storage.storage_root=$W/fsdp_store" ++workload.checkpoint.overwrite=True
      run fsdp_gloo "$MPI" -n 2 "$PY" -m dlio_ckpt workload=tiny ++workload.mode=fsdp ++workload.fsdp.backend=gloo \
        "++workload.storage.storage_root=$W/fsdp_store" ++workload.checkpoint.overwrite=True
      rm -rf "$W/fsdp_store" ;;
    lightning)
      run lightning_gpu "$PY" -m dlio_ckpt workload=lightning_demo ++workload.lightning.accelerator=gpu \
        "++workload.storage.storage_root=$W/light_store" ++workload.checkpoint.overwrite=True
      "$PY" -c "import json; print(json.load(open('$W/lightning_gpu/summary.json'))['per_process'][0]['accelerator'])"
      rm -rf "$W/light_store" ;;
    copy)  # the device-to-host and host-to-device rates saves and loads copy at, beside their defaults
      timeout 120 "$PY" bench/device_copy.py ;;
    bench)
      timeout 540 "$PY" bench/gds.py --dir "$W/bench" --procs 8 --gib 1 --rounds 3
      rm -rf "$W/bench" ;;
  esac
done

#!/usr/bin/env bash
# The device path on a machine with a GPU, as that machine is: nvcc, CMake, a compiler and a
# Python with torch, and nothing of Debian's (no MPI, Gloo, GoogleTest or LibTorch packages).
# Builds the layers up to the runtime with the CUDA backend and tests/gpu/gpu_check.cc, runs
# it (every check of tests/harness/device_checks.h on CUDA memory, then the all-reduce's
# speed beside the GPU's copy bandwidth), then the same checks in 2 processes sharing the GPUs
# (device all-reduces between them over CUDA IPC, with their speed), runs a short pass of it
# under compute-sanitizer's memcheck where that exists; then, against the Python's LibTorch,
# the torch layer and tests/gpu/gpu_torch_check.cc (tensor collectives, the gradient reducer
# and batch norm on CUDA tensors, and 50 steps of the classifier's network); prints one
# summary line.
#
#   scripts/gpu_check.sh [OUT_DIR]     (default: ./gpu_check_out; $OUT on the device machine)
#
# Writes OUT_DIR/gpu_check.json (the checks and the speed rows), OUT_DIR/gpu_torch_check.json
# (the torch checks and the classifier's images/s) and OUT_DIR/*.txt (the logs). PYTHON names
# the Python whose torch is used (default python3); a Python without torch fails the check
# unless GPU_CHECK_TORCH=off leaves the torch part out.
# Exit status: 0 all passed, 1 a check failed, 77 no GPU visible.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-${OUT:-$PWD/gpu_check_out}}"
build="${BUILD_DIR:-$root/build-gpu}"
mkdir -p "$out"
start=$(date +%s)

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
python="${PYTHON:-python3}"
torch_root=""
torch_missing=""
if [[ "${GPU_CHECK_TORCH:-on}" != off ]]; then
  torch_root="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' \
    2>/dev/null || true)"
  if [[ -z "$torch_root" ]]; then
    torch_missing="$python has no torch (GPU_CHECK_TORCH=off leaves the torch part out)"
  fi
fi
torch_flags=(-DREPLICATOR_WITH_TORCH=OFF)
if [[ -n "$torch_root" ]]; then
  torch_flags=(-DREPLICATOR_WITH_TORCH=ON "-DREPLICATOR_TORCH_ROOT=$torch_root")
fi
# nccl.h for the NCCL comm between hosts (compiled here, not run: one host): the wheel's.
nccl_include="$(dirname "$torch_root")/nvidia/nccl/include"
if [[ -n "$torch_root" && -f "$nccl_include/nccl.h" ]]; then
  torch_flags+=("-DREPLICATOR_NCCL_INCLUDE_DIR=$nccl_include")
fi
echo "== build (core layers, CUDA backend, gpu_check; torch layer and gpu_torch_check" \
  "against ${torch_root:-no LibTorch})"
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DREPLICATOR_GPU_CHECK_ONLY=ON -DREPLICATOR_WITH_CUDA=ON -DREPLICATOR_WITH_MPI=OFF \
  -DREPLICATOR_WITH_GLOO=OFF "${torch_flags[@]}" -DREPLICATOR_BUILD_PYTHON=OFF \
  -DREPLICATOR_BUILD_TESTS=OFF -DREPLICATOR_BUILD_APPS=OFF -DREPLICATOR_WITH_GRPC=OFF \
  >"$out/configure.txt" 2>&1 || { cat "$out/configure.txt"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target gpu_check >"$out/build.txt" 2>&1 ||
  { tail -50 "$out/build.txt"; exit 1; }
# The torch part fails on its own: the device path's checks run whatever becomes of it.
torch_built=no
if [[ -n "$torch_root" ]] &&
  cmake --build "$build" -j"$(nproc)" --target gpu_torch_check >"$out/build_torch.txt" 2>&1; then
  torch_built=yes
elif [[ -n "$torch_root" ]]; then
  tail -30 "$out/build_torch.txt"
fi
built=$(date +%s)
echo "built in $((built - start)) s (gpu_torch_check: $torch_built)"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L | tee "$out/gpus.txt"; fi

echo "== checks and speed"
status=0
"$build/gpu_check" --json "$out/gpu_check.json" | tee "$out/gpu_check.txt" || status=$?
if [[ $status -eq 77 ]]; then exit 77; fi

echo "== two processes sharing the GPUs: device all-reduces between them over CUDA IPC"
processes_status=0
"$build/gpu_check" --processes 2 --json "$out/gpu_check_processes.json" |
  tee "$out/gpu_check_processes.txt" || processes_status=$?
if [[ $processes_status -ne 0 ]]; then status=1; fi
processes_line="2 processes: $(grep -c ': PASS' "$out/gpu_check_processes.txt") of 2 passed"

memcheck="not run (no compute-sanitizer)"
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" ]]; then
  echo "== compute-sanitizer memcheck (a short pass)"
  if "$sanitizer" --tool memcheck --error-exitcode 3 "$build/gpu_check" --quick \
    >"$out/memcheck.txt" 2>&1; then
    memcheck="clean"
  else
    memcheck="FAILED (see memcheck.txt)"
    status=1
  fi
  tail -3 "$out/memcheck.txt"
fi
torch_line="torch checks not built"
if [[ $torch_built == yes ]]; then
  echo "== the torch layer on CUDA tensors"
  torch_status=0
  "$build/gpu_torch_check" --json "$out/gpu_torch_check.json" --steps 50 |
    tee "$out/gpu_torch_check.txt" || torch_status=$?
  torch_line="$(tail -1 "$out/gpu_torch_check.txt")"
  # gpu_check saw a GPU: LibTorch not seeing it is a failure too.
  if [[ $torch_status -ne 0 ]]; then status=1; fi
elif [[ -n "$torch_root" ]]; then
  torch_line="gpu_torch_check FAILED to build (see build_torch.txt and configure.txt)"
  status=1
elif [[ -n "$torch_missing" ]]; then
  torch_line="torch checks FAILED: $torch_missing"
  status=1
fi
# NCCL takes one rank per GPU: beside NCCL's all-reduce needs two GPUs.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
if [[ $gpus -lt 2 ]]; then
  echo "NCCL row: not measured ($gpus GPU: NCCL refuses two ranks on one GPU)"
fi
end=$(date +%s)
echo "gpu_check.sh: $(tail -1 "$out/gpu_check.txt"); $processes_line; memcheck $memcheck;" \
  "$torch_line;" \
  "$((end - start)) s" |
  tee "$out/summary.txt"
exit "$status"

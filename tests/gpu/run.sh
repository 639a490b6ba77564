#!/usr/bin/env bash
# The CUDA backend's GPU checks, one command on the GPU machine (issue E1). Run from the repository root:
#   tests/gpu/run.sh [BIN_DIR]      (BIN_DIR: where test_cuda_backend and bench_cuda_* are; default carry/)
# Stages, each under its own time limit (the machine's calls are limited to 10 minutes): the fixtures and
# exactness checks through the backend vtable, the kernel harnesses (correctness, row invariance, timing), and
# the end-to-end model benchmark at the Llama-3.1-8B shape (Q4_0 by default; WEFT_GPU_BENCH="q4_0 mlx4" etc.).
# Logs go to $OUT (when set) or /tmp/weft-gpu; a summary table is printed last. Exit status 1 on any failure.
set -u
BIN=${1:-carry}
LOG=${OUT:-/tmp/weft-gpu}
mkdir -p "$LOG"
declare -a NAMES STATUS SECS
fail=0

stage() { # name, time limit (s), command...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    NAMES+=("$name")
    SECS+=($((SECONDS - t0)))
    if [ $rc -eq 0 ]; then STATUS+=("pass"); else STATUS+=("FAIL($rc)"); fail=1; fi
    echo "=== $name (rc=$rc) ==="
    tail -n 40 "$LOG/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv,noheader \
    >"$LOG/gpu.txt" 2>&1
cat "$LOG/gpu.txt"

stage fixtures 240 "$BIN/test_cuda_backend"
stage kernels_ops 120 "$BIN/bench_cuda_ops"
stage kernels_attention 180 "$BIN/bench_cuda_attention"
stage kernels_matmul 300 "$BIN/bench_cuda_matmul"
for f in ${WEFT_GPU_BENCH:-q4_0}; do
    stage "model_8b_$f" 300 "$BIN/bench_cuda_model" "$f" 8b 512 128
done

echo
printf '%-24s %-10s %s\n' stage result seconds
for i in "${!NAMES[@]}"; do printf '%-24s %-10s %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"; done
exit $fail

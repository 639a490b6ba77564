#!/usr/bin/env bash
# The CUDA backend's GPU checks, one command on the GPU machine (issue E1). Run from the repository root:
#   tests/gpu/run.sh [BIN_DIR]      (BIN_DIR: where test_cuda_backend, bench_cuda_* and weft are; default carry/)
# Stages, each under its own time limit (the machine's calls are limited to 10 minutes): the fixtures and
# exactness checks through the backend vtable, the kernel harnesses (correctness, row invariance, timing), and
# the end-to-end model benchmark at the Llama-3.1-8B shape (WEFT_GPU_BENCH="q4_0 mlx4 f16" by default, plus
# the 32B dense shape at Q4_0 and Q4_0 without CUDA graphs, unless WEFT_GPU_32B / WEFT_GPU_NOGRAPH are set empty;
# WEFT_GPU_ATTN= skips the attention harness; WEFT_GPU_BASELINE="q4_0" (default) also runs those formats with
# WEFT_CUDA_BASELINE=1, session 2's kernels, side by side; WEFT_MATMUL_QUICK=1 skips the per-layout table).
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

# the Q4F layout's host functions (also run by .ci/run), where the binary was carried
[ -x "$BIN/test_q4f_layout" ] && stage q4f_layout 30 "$BIN/test_q4f_layout"
# WEFT_GPU_MODEL (optional): a real-shape GGUF (bench/cuda/peer_gguf.py) for test_cuda_backend's chunk-cut check
stage fixtures 150 "$BIN/test_cuda_backend" ${WEFT_GPU_MODEL:+"$WEFT_GPU_MODEL"}
# --backend auto on a model the GPU backend refuses (stories260K: head size 8) runs it on the CPU and says so
if [ -x "$BIN/weft" ]; then
    stage auto_fallback 60 bash -c "o=\$('$BIN/weft' run tests/data/stories260K/stories260K.gguf --backend auto \
        --tokens 1,403 --max-tokens 8 --temperature 0 2>&1); echo \"\$o\"; grep -q 'running on the CPU' <<<\"\$o\""
fi
stage kernels_ops 40 "$BIN/bench_cuda_ops"
if [ -n "${WEFT_GPU_ATTN-1}" ]; then
    stage kernels_attention 60 "$BIN/bench_cuda_attention"
    # the one-kernel batch-1 attention == rope_store + attention + prep, bit for bit (attention_decode.cu)
    stage kernels_attention_decode 60 "$BIN/bench_cuda_attention_decode"
fi
stage kernels_matmul 240 "$BIN/bench_cuda_matmul"
for f in ${WEFT_GPU_BENCH:-q4_0 mlx4 f16}; do
    stage "model_8b_$f" 150 "$BIN/bench_cuda_model" "$f" 8b 512 128
done
for f in ${WEFT_GPU_BASELINE-q4_0}; do
    stage "model_8b_${f}_baseline" 150 env WEFT_CUDA_BASELINE=1 "$BIN/bench_cuda_model" "$f" 8b 512 128
done
if [ -n "${WEFT_GPU_32B-1}" ]; then
    stage model_32b_q4_0 240 "$BIN/bench_cuda_model" q4_0 32b 256 64
fi
if [ -n "${WEFT_GPU_NOGRAPH-1}" ]; then
    stage model_8b_q4_0_nograph 180 env WEFT_NO_GRAPHS=1 "$BIN/bench_cuda_model" q4_0 8b 512 128
fi

echo
printf '%-24s %-10s %s\n' stage result seconds
for i in "${!NAMES[@]}"; do printf '%-24s %-10s %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"; done
exit $fail

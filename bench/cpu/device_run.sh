#!/bin/bash
# weft vs llama.cpp on the CPU, back to back on the same two pinned cores, run on an otherwise idle host.
#
#   DEV=dir-with-binaries OUT=results-dir bash bench/cpu/device_run.sh
#
# DEV holds: weft (the CLI, linked with its libraries static), llama/ (llama-bench and its .so files),
# smol.head + smol.json (bench/cpu/gguf_reweight.py split of SmolLM2-135M-Instruct Q4_1), and optionally
# bench_cpu_kernels. SmolLM2 is rebuilt here as a same-shape random-weight copy (gguf_reweight.py build), the
# small models come from the repository. Each model: ROUNDS rounds of (llama-bench -r 3, then weft bench
# --repeat 3); bench/cpu/summarize.py turns $OUT into the table of bench/RESULTS.md (medians over rounds).
set -u
DEV=${DEV:?} OUT=${OUT:?}
ROUNDS=${ROUNDS:-3}
CORES=${CORES:-2,3}
export LD_LIBRARY_PATH=$DEV/llama
mkdir -p "$OUT"
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; cat /proc/loadavg; } > "$OUT/machine.txt"
python3 bench/cpu/gguf_reweight.py build "$DEV/smol.head" "$DEV/smol.json" /tmp/smol_rand.gguf

run_pair() { # name model llama-args weft-args... (weft runs once per "P G" pair)
    local name=$1 model=$2 largs=$3
    shift 3
    for r in $(seq 1 "$ROUNDS"); do
        taskset -c "$CORES" "$DEV/llama/llama-bench" -m "$model" -t 2 $largs -r 3 -o json \
            > "$OUT/llama_${name}_$r.json" 2> "$OUT/llama_${name}_$r.err"
        : > "$OUT/weft_${name}_$r.md"
        for pg in "$@"; do
            read -r np ng <<< "$pg"
            taskset -c "$CORES" "$DEV/weft" bench "$model" --threads 2 --prompt-len "$np" --gen-len "$ng" \
                --repeat 3 2>&1 | tail -1 >> "$OUT/weft_${name}_$r.md"
        done
    done
}

run_pair smol /tmp/smol_rand.gguf "-p 128 -n 64" "128 65"
for q in q4_0 q4_1 q8_0 q4_k q6_k q4_k_m-mix f16 bf16; do
    run_pair "$q" "tests/data/llamacpp/quant/model-$q.gguf" "-p 64,128 -n 32,128" "64 33" "128 128"
done
run_pair stories260K assets/stories260K/stories260K.gguf "-p 64,128 -n 32,128" "64 33" "128 128"
run_pair fixture-q8_0 tests/data/fixtures/llama-gguf-q8_0/model.gguf "-p 64,128 -n 32,128" "64 33" "128 128"
if [ -x "$DEV/bench_cpu_kernels" ]; then
    taskset -c "${CORES%%,*}" "$DEV/bench_cpu_kernels" --reps 31 > "$OUT/kernels_1t.md" 2>&1
    taskset -c "${CORES%%,*}" "$DEV/bench_cpu_kernels" --reps 31 --rows 1 --cold 300 > "$OUT/kernels_1t_cold.md" 2>&1
    taskset -c "$CORES" "$DEV/bench_cpu_kernels" --reps 31 --threads 2 --only Q4_1 > "$OUT/kernels_2t_q4_1.md" 2>&1
fi
cat /proc/loadavg >> "$OUT/machine.txt"

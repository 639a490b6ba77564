#!/usr/bin/env bash
# weft against llama.cpp on the same GPU and the same random-weight GGUF (issue E1, SPEC §7), one command on the
# GPU machine, run from the repository root:
#   WEFT_SBS="weft lcpp http ncu" bash bench/cuda/side_by_side.sh
# carry/ holds: weft.xz (the static CUDA build, `cmake -DWEFT_CUDA=ON -DWEFT_STATIC=ON`, stripped), libs.tar.xz
# (lib/: the shared libraries libmicrohttpd's gnutls needs), test_cuda_backend.xz (for the part "test"), tok128k.json.xz (bench/cuda/vocab_for_shape.py of the Qwen3 tokenizer:
# the first 128,256 ids, a consistent BPE), and either llama.tar.xz (a llama.cpp CUDA build brought back by an
# earlier run) or llamacpp-src.tar.xz (the unslothai/llama.cpp snapshot's source, built here for sm_90a in the
# background while weft runs: ~6 min on 13 cores).
# Parts (WEFT_SBS): ab = the variants of wefts.tar.xz side by side (decode, 16 streams); pp = prefill 512/2k/8k with and without the many-row GEMM (WEFT_PP_MASKS: timing knobs);
# matmul / attn / attnd = the kernel harnesses (bench_cuda_matmul.xz / bench_cuda_attention.xz /
# bench_cuda_attention_decode.xz in carry/); imma = the
# integer-arithmetic probe (bench_cuda_imma_probe.xz); i8 = its one-row matvec (bench_cuda_i8matvec.xz); gemmncu =
# profiler sections of the GEMM (wgemmncu: of the wgmma GEMM; gemvncu: of the one-row matmuls, f16 and hi/lo); attnncu = those of the prefill attention tiles; f16ncu = the f16 prefill kernels at 2,048 rows (bulk-copy GEMM, attention tiles 8 / -8) with stall samples per SASS instruction; attn16ncu = those of the separate decode attention kernels at 16 rows; weft = `weft bench` in-process (prefill 512/2k/8k/32k, batch-1 decode, 4/16/64 streams);
# attndncu = those of the batch-1 one-kernel decode attention (f16 span form) in the model, with stall samples per SASS instruction;
# lcpp = llama-bench + llama-batched-bench; http = `weft serve` + tools/bench_*.py; ncu = per-kernel times of
# decode steps (ncu replays kernels one by one: latency-bound kernels may run at idle clocks there); ncu2 =
# ncu sections (speed of light, warp states, occupancy) of the decode kernels; twice = decode tok/s with each
# stage launched twice (WEFT_CUDA_TIMING_TWICE): the difference is the stage's cost inside the graph; test =
# tests/gpu's test_cuda_backend (every fixture, the exactness checks); split = 4/16/64 streams without the
# few-row split GEMM (compare with quick); splitncu = profiler sections of the split GEMM at 16 rows; f16 = weft
# (and llama.cpp, with lcpp) on an F16 file of the same weights (peer_gguf.py ... f16; not yet run). The model: bench/cuda/peer_gguf.py (Llama-3.1-8B shape, Q4_0) at /tmp/m8b.gguf.
# Logs: $OUT/sbs.log; llama.cpp's build comes back as $OUT/llama.tar.xz.* (15 MB parts) when it was built here.
set -u
C=${CARRY:-carry}
LOG=/tmp/sbs # every log; concatenated into $OUT/sbs.log at the end ($OUT takes at most 8 files)
M=/tmp/m8b.gguf
LC=/tmp/lcpp
parts=${WEFT_SBS:-weft lcpp}
mkdir -p "$LOG" /tmp/w
T0=$SECONDS
el() { echo "[$((SECONDS - T0))s] $*"; }
has() { [[ " $parts " == *" $1 "* ]]; }
run() { # name, limit, command... (output to $LOG/name.log, tail shown)
    local name=$1 limit=$2
    shift 2
    el "start $name"
    timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
    echo "rc=$?" >>"$LOG/$name.log"
    el "done $name"
    tail -n 8 "$LOG/$name.log"
}

unpack() { # carry/NAME.xz -> /tmp/w/AS (default NAME), executable; without carry/NAME.xz, the copy that
    # wefts.tar.xz brought (one archive of many binaries shares one xz dictionary: less carry)
    [ -f "$C/$1.xz" ] || { [ -x "/tmp/w/$1" ] && { [ -z "${2-}" ] || cp "/tmp/w/$1" "/tmp/w/$2"; }; return; }
    xz -dc "$C/$1.xz" >"/tmp/w/${2:-$1}" && chmod +x "/tmp/w/${2:-$1}"
}

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader
# wefts.tar.xz (instead of weft.xz): weft plus variants weft_<name> of it in one archive (one xz dictionary
# spans them, so each variant costs little carry); part ab times every variant against weft.
if [ -f "$C/wefts.tar.xz" ]; then tar -xJf "$C/wefts.tar.xz" -C /tmp/w; else xz -dc "$C/weft.xz" >/tmp/w/weft; fi
chmod +x /tmp/w/weft* && tar -xJf "$C/libs.tar.xz" -C /tmp/w
export LD_LIBRARY_PATH=/tmp/w/lib

if has lcpp; then
    if [ -f "$C/llama.tar.xz" ]; then
        mkdir -p $LC/build && tar -xJf "$C/llama.tar.xz" -C $LC/build && touch $LC/built
    else
        mkdir -p $LC && tar -xJf "$C/llamacpp-src.tar.xz" -C $LC && mkdir -p $LC/tools/ui &&
            : >$LC/tools/ui/CMakeLists.txt
        (cd $LC && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release &&
            nice -n 10 taskset -c 3-15 cmake --build build -j13 --target llama-bench llama-batched-bench &&
            touch $LC/built) >"$LOG/lcpp_build.log" 2>&1 &
    fi
fi

[ -f $M ] || [ -n "${WEFT_SBS_NO_MODEL-}" ] || { # (WEFT_SBS_NO_MODEL: parts that need no model file)
    xz -dc "$C/tok128k.json.xz" >/tmp/tok128k.json
    run make_gguf 200 python3 bench/cuda/peer_gguf.py $M /tmp/tok128k.json llama3-8b
}

if has test; then
    unpack test_cuda_backend
    run test 240 /tmp/w/test_cuda_backend $M # the fixtures, then chunk-cut invariance on the 8B file
    if ! grep -q "^rc=0" "$LOG/test.log"; then # keep measuring, without PDL, if that is what broke
        export WEFT_CUDA_NO_PDL=1
        run test_nopdl 240 /tmp/w/test_cuda_backend $M
    fi
fi

if has matmul; then # the kernel harness: every 4-bit layout, M in {1..300} bit-identical to the fp32 kernel
    unpack bench_cuda_matmul
    run matmul 150 env WEFT_MATMUL_QUICK=1 /tmp/w/bench_cuda_matmul
fi
if has attn; then # the attention harness: tiles == per-row kernel bit for bit, prefill / decode timings
    unpack bench_cuda_attention
    run attn 120 /tmp/w/bench_cuda_attention
fi
if has attnd; then # the one-kernel decode attention == the separate kernels bit for bit, and their times
    unpack bench_cuda_attention_decode
    run attnd 120 /tmp/w/bench_cuda_attention_decode
fi
if has attndncu; then # profiler sections and per-SASS stall samples of the one-kernel decode attention at 600
    # (f16 K/V unless ATTND_F16=0)
    unpack bench_cuda_attention_decode
    run attndncu 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
        --section MemoryWorkloadAnalysis \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
        -k regex:attn_decode --launch-skip 40 --launch-count 1 /tmp/w/bench_cuda_attention_decode time 600 1 \
        ${ATTND_F16:-1}
    ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:attn_decode \
        --launch-skip 40 --launch-count 1 -f -o /tmp/attnd /tmp/w/bench_cuda_attention_decode time 600 1 \
        ${ATTND_F16:-1} \
        >/dev/null 2>&1 &&
        ncu -i /tmp/attnd.ncu-rep --page source --print-source sass --csv >"$LOG/attnd_sass.csv.log" 2>&1
fi
if has attn16ncu; then # profiler sections of the separate decode attention kernels at 16 rows x 600 positions
    # (a 16-stream round's attention: ≈ 56 µs per layer, ≈ 1.4 TB/s of fp32 K/V, bench/NOTES.md session 13)
    unpack bench_cuda_attention_decode
    run attn16ncu 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy --section LaunchStats \
        -k regex:attn_span --launch-skip 40 --launch-count 1 /tmp/w/bench_cuda_attention_decode time 600 16
fi
if has probe; then # does a wgmma k16 step give mma.sync's bits? (bench/cuda/wgmma_probe.cu)
    unpack bench_cuda_wgmma_probe probe
    run probe 60 /tmp/w/probe
fi
if has imma; then # the proposed integer 4-bit arithmetic: exact on mma .u8.s8? (bench/cuda/imma_probe.cu)
    unpack bench_cuda_imma_probe imma
    run imma 60 /tmp/w/imma
fi
if has i8; then # the proposed integer matvec: prep and product == the CPU definition, timing vs bf16 hi/lo
    unpack bench_cuda_i8matvec i8matvec
    run i8 120 /tmp/w/i8matvec
fi
if has gemmncu; then # profiler sections of the many-row GEMM (8B FFN shape, 512 rows)
    unpack bench_cuda_matmul
    run gemmncu 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats -k regex:gemm_q4 --launch-skip 3 --launch-count 1 \
        /tmp/w/bench_cuda_matmul gemm 14336 4096 512
fi

if has wgemmncu; then # the same for the wgmma GEMM (gemm_q4w.cu), with stall reasons and pipe use
    unpack bench_cuda_matmul
    run wgemmncu 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section InstructionStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" \
        -k regex:gemm_q4w --launch-skip 3 --launch-count 1 /tmp/w/bench_cuda_matmul wgemm 14336 4096 512
    # stall samples per SASS instruction (a CSV: ncu's source page of the same kernel)
    ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:gemm_q4w --launch-skip 3 \
        --launch-count 1 -f -o /tmp/wgemm /tmp/w/bench_cuda_matmul wgemm 14336 4096 512 >/dev/null 2>&1 &&
        ncu -i /tmp/wgemm.ncu-rep --page source --print-source sass --csv >"$LOG/wgemm_sass.csv.log" 2>&1
fi

if has gemvncu; then # profiler sections of the one-row matmul: gemv_q4.cu's on f16 buffers (the batch-1 decode of
    # --activations f16) and on hi/lo ones, mma_q4x.cu's (WEFT_NO_GEMV); stall samples per SASS instruction of
    # the f16 gate|up shape (bench/NOTES.md session 20, "What is left": the stream's stall mix)
    unpack bench_cuda_matmul
    NS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
        --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"
    for nk in "28672 4096" "4096 14336" "6144 4096"; do
        run "gemvncu_f16_${nk% *}" 120 env WEFT_F16=1 ncu --clock-control none $NS -k regex:gemv_q4 --launch-skip 3 \
            --launch-count 1 /tmp/w/bench_cuda_matmul gemv $nk
        run "gemvncu_${nk% *}" 120 ncu --clock-control none $NS -k regex:gemv_q4 --launch-skip 3 --launch-count 1 \
            /tmp/w/bench_cuda_matmul gemv $nk
        run "gemvncu_old_${nk% *}" 120 env WEFT_NO_GEMV=1 ncu --clock-control none $NS -k regex:q4x_kernel \
            --launch-skip 3 --launch-count 1 /tmp/w/bench_cuda_matmul gemv $nk
    done
    WEFT_F16=1 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:gemv_q4 \
        --launch-skip 3 --launch-count 1 -f -o /tmp/gemv /tmp/w/bench_cuda_matmul gemv 28672 4096 >/dev/null 2>&1 &&
        ncu -i /tmp/gemv.ncu-rep --page source --print-source sass --csv >"$LOG/gemv_sass.csv.log" 2>&1
fi

if has attndncu; then # the batch-1 decode attention in one kernel, f16 (its span form, 8.6 µs per layer for
    # 2.4 MB at 600 positions: bench/NOTES.md session 23): sections and stall samples per SASS instruction, in
    # the model's decode (after its q|k|v matmul, as the chain runs it) and alone in the harness
    NS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
        --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"
    run attndncu 150 ncu --clock-control none $NS -k regex:attn_decode_span --launch-skip 64 --launch-count 2 \
        /tmp/w/weft bench $M --backend cuda --activations f16 --prompt-len 600 --gen-len 4 --repeat 1 --chunk 600
    ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:attn_decode_span \
        --launch-skip 64 --launch-count 1 -f -o /tmp/attnd /tmp/w/weft bench $M --backend cuda --activations f16 \
        --prompt-len 600 --gen-len 4 --repeat 1 --chunk 600 >/dev/null 2>&1 &&
        ncu -i /tmp/attnd.ncu-rep --page source --print-source sass --csv >"$LOG/attnd_sass.csv.log" 2>&1
fi

if has splitncu; then # profiler sections of the cluster-split GEMM at 16 rows (two 8B shapes)
    unpack bench_cuda_matmul
    for nk in "14336 4096" "4096 14336"; do
        run "splitncu_${nk% *}" 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
            --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
            -k regex:gemm_q4 --launch-skip 3 --launch-count 1 /tmp/w/bench_cuda_matmul split $nk 16
    done
fi

if has attnncu; then # profiler sections of the prefill attention tiles (256 rows ending at 8192)
    unpack bench_cuda_attention
    run attnncu 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section InstructionStats -k regex:attn_tile --launch-skip 2 --launch-count 1 \
        /tmp/w/bench_cuda_attention prefill 8192
fi

if has f16ncu; then # ncu of the f16 prefill kernels at the model's 2,048-row chunks: the wgmma GEMM with bulk
    # copies (14336x4096), the attention tiles at 8k (mma.sync form 8, wgmma form -8); sections, then stall
    # samples per SASS instruction (CSV of ncu's source page) for each
    unpack bench_cuda_matmul
    unpack bench_cuda_attention
    NS="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy
        --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"
    NM="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active"
    for part in "f16gemm:gemm_q4w_kernel:3:env WEFT_F16=1 /tmp/w/bench_cuda_matmul wgemm 14336 4096 2048" \
        "attn8:attn_tile:1:/tmp/w/bench_cuda_attention prefill 8192 1 2048 8" \
        "attnwg:attn_tile:1:/tmp/w/bench_cuda_attention prefill 8192 1 2048 -8"; do
        IFS=: read -r nm kr sk cmd <<<"$part"
        # shellcheck disable=SC2086 # (word splitting of the sections and the command is intended)
        run "${nm}ncu" 150 ncu --clock-control none $NS --metrics "$NM" -k "regex:$kr" --launch-skip "$sk" \
            --launch-count 1 $cmd
        # shellcheck disable=SC2086
        ncu --clock-control none --section SourceCounters --section WarpStateStats -k "regex:$kr" \
            --launch-skip "$sk" --launch-count 1 -f -o "/tmp/$nm" $cmd >/dev/null 2>&1 &&
            ncu -i "/tmp/$nm.ncu-rep" --page source --print-source sass --csv >"$LOG/${nm}_sass.csv.log" 2>&1
    done
fi

W="taskset -c 0-2 /tmp/w/weft bench $M --backend cuda"
W0=$W
# WEFT_EVENTS=1: the weft part also prints device time vs wall time per forward (WEFT_CU_T_EVENTS)
[ -n "${WEFT_EVENTS-}" ] && W="env WEFT_CUDA_TIMING_TWICE=256 $W"
if has quick; then # a short check of a change: batch 1 + 16 streams, 64 streams, attention launched twice
    run quick_s16 60 $W --prompt-len 512 --gen-len 128 --repeat 2 --streams 16 --chunk 512
    run quick_s64 60 $W --prompt-len 512 --gen-len 128 --repeat 1 --streams 64 --chunk 512
    run quick_attn2 40 env WEFT_CUDA_TIMING_TWICE=257 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --chunk 512
fi
if has ab; then # A/B: batch-1 decode and 16 streams for every binary of wefts.tar.xz (or weft alone) under
    # every WEFT_CUDA_TIMING_TWICE mask of AB_MASKS (default 0), each in turn, twice
    for rep in 1 2; do
        for b in /tmp/w/weft /tmp/w/weft_*; do
            [ -x "$b" ] || continue
            for mask in ${AB_MASKS:-0}; do
                run "ab_$(basename $b)_m${mask}_$rep" 90 env WEFT_CUDA_TIMING_TWICE=$mask taskset -c 0-2 $b bench $M \
                    --backend cuda --prompt-len 512 --gen-len 128 --repeat 2 --streams ${AB_STREAMS:-16} --chunk 512
            done
        done
    done
fi
if has var; then # A/B: without PDL, with session 3's 4-quad kernel for 5..16 rows, attention launched twice
    run var_nopdl 60 env WEFT_CUDA_NO_PDL=1 $W0 --prompt-len 512 --gen-len 128 --repeat 2 --streams 16 --chunk 512
    run var_rq4 60 env WEFT_CUDA_TIMING_TWICE=512 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --streams 16 \
        --chunk 512
    run var_attn2 40 env WEFT_CUDA_TIMING_TWICE=257 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --chunk 512
fi
if has split; then # A/B: 5..16-row matmuls without the cluster-split GEMM (16384 = WEFT_CU_T_NO_SPLIT)
    run split_s4 60 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --streams 4 --chunk 512
    run nosplit_s4 60 env WEFT_CUDA_TIMING_TWICE=16384 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --streams 4 \
        --chunk 512
    run nosplit_s16 60 env WEFT_CUDA_TIMING_TWICE=16384 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --streams 16 \
        --chunk 512
    run nosplit_s64 60 env WEFT_CUDA_TIMING_TWICE=16384 $W0 --prompt-len 512 --gen-len 128 --repeat 1 --streams 64 \
        --chunk 512
fi
if has twice; then
    for mask in ${WEFT_TWICE_MASKS:-0 1 2 4 8 240}; do
        run "twice_$mask" 60 env WEFT_CUDA_TIMING_TWICE=$mask $W0 --prompt-len 512 --gen-len 96 --repeat 2
    done
fi
if has pp; then # prefill with the many-row GEMM and without it (1024 = WEFT_CU_T_NO_GEMM; 4096 = the mma.sync GEMM instead of the wgmma GEMM)
    for n in ${WEFT_PP_LENS:-512 2048 8192}; do
        for mask in ${WEFT_PP_MASKS:-0 1024}; do
            run "pp${n}_$mask" 90 env WEFT_CUDA_TIMING_TWICE=$mask $W0 --prompt-len $n --gen-len 2 --repeat 2 \
                --chunk ${WEFT_PP_CHUNK:-512}
        done
    done
fi
if has weft; then
    run weft_pp512_tg128_s16 150 $W --prompt-len 512 --gen-len 128 --repeat 3 --streams 16 --chunk 512
    run weft_pp2048 60 $W --prompt-len 2048 --gen-len 2 --repeat 2 --chunk 512
    run weft_pp8192 90 $W --prompt-len 8192 --gen-len 2 --repeat 2 --chunk 512
    run weft_pp32768 150 $W --prompt-len 32768 --gen-len 2 --repeat 1 --chunk 512
    run weft_s4 60 $W --prompt-len 512 --gen-len 128 --repeat 1 --streams 4 --chunk 512
    run weft_s64 120 $W --prompt-len 512 --gen-len 128 --repeat 1 --streams 64 --chunk 512
fi

MF=/tmp/m8b-f16.gguf # part f16: the same random weights as $M before quantization, stored as F16 (16 GB)
if has f16; then
    [ -f /tmp/tok128k.json ] || xz -dc "$C/tok128k.json.xz" >/tmp/tok128k.json
    [ -f $MF ] || run make_gguf_f16 300 python3 bench/cuda/peer_gguf.py $MF /tmp/tok128k.json llama3-8b f16
    WF="taskset -c 0-2 /tmp/w/weft bench $MF --backend cuda"
    run weft_f16_pp512_tg128_s16 150 $WF --prompt-len 512 --gen-len 128 --repeat 2 --streams 16 --chunk 512
    run weft_f16_pp2048 60 $WF --prompt-len 2048 --gen-len 2 --repeat 2 --chunk 512
fi

if has http; then # 16 streams of 9,216 positions (fp32 KV: 2.4 GB each)
    taskset -c 0-3 /tmp/w/weft serve $M --backend cuda --port 8090 --parallel 16 --context 9216 \
        --metrics-open >"$LOG/serve.log" 2>&1 &
    SP=$!
    U=http://127.0.0.1:8090
    for _ in $(seq 180); do
        python3 -c "import urllib.request; urllib.request.urlopen('$U/health', timeout=2)" 2>/dev/null && break
        sleep 1
    done
    run http_decode 120 python3 tools/bench_decode.py --base-url $U --runs 3 --max-tokens 128
    run http_prefill 120 python3 tools/bench_prefill.py --base-url $U --sizes 2k,8k --runs 1
    run http_streams 240 python3 tools/bench_concurrency.py --base-url $U --levels 1,4,16 --requests 16 \
        --max-tokens 128:128 --token-prompts --vocab 100000
    kill -INT $SP
    wait $SP
    tail -n 5 "$LOG/serve.log"
fi

if has ncu; then
    run ncu 150 ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
        --launch-skip ${NCU_SKIP:-400} --launch-count 700 /tmp/w/weft bench $M --backend cuda \
        --prompt-len ${NCU_PROMPT:-32} --gen-len 8 --repeat 1 --chunk 1024
    python3 - "$LOG/ncu.log" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki, vi = h.index("Kernel Name"), h.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    tot[r[ki][:60]] += v; cnt[r[ki][:60]] += 1
s = sum(tot.values())
print(f"ncu: {sum(cnt.values())} kernels, {s/1e3:.1f} us of kernel time")
for k, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{v/1e3:10.1f} us {cnt[k]:5d} x {v/cnt[k]/1e3:8.2f} us  {k}")
EOF
fi

if has ncu2; then
    run ncu2 200 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        -k "${NCU2_K:-regex:attn_span|rope_store|rmsnorm|q4x}" --launch-skip ${NCU2_SKIP:-300} --launch-count 5 /tmp/w/weft bench $M --backend cuda --prompt-len 600 --gen-len 4 \
        --repeat 1 --chunk 600
fi

if has ncu3; then # full sections of the decode attention and a 16-row matmul
    run ncu3a 120 ncu --clock-control none --set full -k 'regex:attn_span|attn_combine' --launch-skip 64 \
        --launch-count 2 /tmp/w/weft bench $M --backend cuda --prompt-len 600 --gen-len 4 --repeat 1 --chunk 600
    run ncu3b 120 ncu --clock-control none --set full -k 'regex:q4x_kernel<2, 1, 4, 4, 4>' --launch-skip 8 \
        --launch-count 2 /tmp/w/weft bench $M --backend cuda --prompt-len 64 --gen-len 8 --repeat 1 --streams 16
fi

if has lcpp; then
    el "waiting for llama.cpp"
    while [ ! -f $LC/built ] && jobs -r | grep -q . && [ $((SECONDS - T0)) -lt ${LCPP_WAIT:-470} ]; do sleep 5; done
    tail -n 3 "$LOG/lcpp_build.log" 2>/dev/null
    if [ -f $LC/built ]; then
        B=$LC/build/bin
        export LD_LIBRARY_PATH=$B:$LD_LIBRARY_PATH
        run lcpp_bench 200 $B/llama-bench -m $M -fa 1 -p 512,2048,8192 -n 128 -r 3 -o md
        run lcpp_bench_d512 60 $B/llama-bench -m $M -fa 1 -p 0 -n 128 -d 512 -r 3 -o md
        run lcpp_bench_32k 120 $B/llama-bench -m $M -fa 1 -p 32768 -n 0 -r 1 -o md
        if has f16; then
            run lcpp_f16_bench 200 $B/llama-bench -m $MF -fa 1 -p 512,2048 -n 128 -r 3 -o md
            run lcpp_f16_batched 120 $B/llama-batched-bench -m $MF -c 12000 -b 2048 -ub 512 -npp 512 -ntg 128 \
                -npl 1,16 -fa on
        fi
        run lcpp_batched 200 $B/llama-batched-bench -m $M -c 42000 -b 2048 -ub 512 -npp 512 -ntg 128 \
            -npl 1,4,16,64 -fa on
        [ -f "$C/llama.tar.xz" ] || [ -z "${OUT-}" ] ||
            (cd $LC/build && tar -cf - bin | xz -T8 -6 | split -b 15m - "$OUT/llama.tar.xz.")
    fi
fi
if has b32w && [ $((SECONDS - T0)) -lt ${B32_BEFORE:-430} ]; then # weft alone on the 32B dense shape
    rm -f $M
    run make_gguf32 120 python3 bench/cuda/peer_gguf.py /tmp/m32b.gguf /tmp/tok128k.json dense-32b
    run weft32_pp2048 100 taskset -c 0-2 /tmp/w/weft bench /tmp/m32b.gguf --backend cuda --prompt-len 2048 \
        --gen-len 64 --repeat 1 --chunk 512 --streams 16
fi
el "end"
[ -n "${OUT-}" ] && for f in "$LOG"/*.log; do echo "===== $f"; cat "$f"; done >"$OUT/sbs.log"

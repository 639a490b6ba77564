#!/usr/bin/env bash
# weft against llama.cpp in one device call (issue E1's same-call table), from the repository root on the GPU
# machine: llama.cpp builds in the background on cores 3-15 while weft runs on cores 0-2, then llama.cpp runs.
#   bash bench/cuda/same_call.sh            # carry/: wefts.tar.xz (weft [+ weft_<variant>...]), libs.tar.xz,
#                                           #         tok128k.json.xz, llamacpp-src.tar.xz (bench/NOTES.md session 18)
# WEFT_AB="weft weft_x": binaries alternated twice on batch-1 decode + 16 streams before the table.
# WEFT_KNOBS="0 131072": WEFT_CUDA_TIMING_TWICE masks for the prefill 2k / 8k A/B of the weft binary
# (WEFT_PP_BINS="weft weft_x": of each of those binaries).
# WEFT_PRE="bash carry/x.sh": a command run after the setup, before the table (harnesses while llama.cpp builds).
# Logs: $OUT/logs.tar.xz. About 350 s.
set -u
T0=$SECONDS
OD=${OUT:-/tmp/out}
mkdir -p "$OD" /tmp/L
LC=/tmp/lcpp
mkdir -p $LC && tar -xJf carry/llamacpp-src.tar.xz -C $LC && mkdir -p $LC/tools/ui && : >$LC/tools/ui/CMakeLists.txt
(cd $LC && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release &&
    nice -n 10 taskset -c 3-15 cmake --build build -j13 --target llama-bench llama-batched-bench &&
    touch $LC/built) >/tmp/L/lcpp_build.log 2>&1 &
WEFT_SBS=none bash bench/cuda/side_by_side.sh >/tmp/L/setup.log 2>&1 # /tmp/w binaries, /tmp/m8b.gguf
echo "setup $((SECONDS - T0))s"
[ -z "${WEFT_PRE-}" ] || bash -c "$WEFT_PRE"
M=/tmp/m8b.gguf
t() { # name, limit, command...: the log's last line
    local n=$1 lim=$2 s=$SECONDS
    shift 2
    timeout "$lim" "$@" >"/tmp/L/$n.log" 2>&1
    echo "== $n rc=$? $((SECONDS - s))s (at $((SECONDS - T0))s): $(tail -1 "/tmp/L/$n.log")"
}
B="bench $M --backend cuda --activations f16"
for r in 1 2; do for v in ${WEFT_AB-}; do
    t "ab_${v}_$r" 60 taskset -c 0-2 "/tmp/w/$v" $B --prompt-len 512 --gen-len 128 --repeat 2 --streams 16 --chunk 512
done; done
for s in 1 4 16 64; do
    t "s$s" 60 taskset -c 0-2 /tmp/w/weft $B --prompt-len 512 --gen-len 128 --repeat 1 --streams $s --chunk 512
done
for v in ${WEFT_PP_BINS:-weft}; do for k in ${WEFT_KNOBS:-0}; do for n in 2048 8192; do
    t "pp${n}_${k}_$v" 60 env WEFT_CUDA_TIMING_TWICE=$k taskset -c 0-2 "/tmp/w/$v" $B --prompt-len $n --gen-len 2 \
        --repeat 2 --chunk 2048
done; done; done
t pp8192_fp32 60 taskset -c 0-2 /tmp/w/weft bench $M --backend cuda --activations fp32 --prompt-len 8192 --gen-len 2 \
    --repeat 2 --chunk 2048
while [ ! -f $LC/built ] && jobs -r | grep -q . && [ $((SECONDS - T0)) -lt 450 ]; do sleep 5; done
tail -n 1 /tmp/L/lcpp_build.log
if [ -f $LC/built ]; then
    export LD_LIBRARY_PATH=$LC/build/bin:${LD_LIBRARY_PATH-}
    t lcpp_tg 90 $LC/build/bin/llama-bench -m $M -fa 1 -p 0 -n 128 -d 512 -r 3 -o md
    t lcpp_pp 120 $LC/build/bin/llama-bench -m $M -fa 1 -p 512,2048,8192 -n 0 -r 2 -o md
    t lcpp_batched 150 $LC/build/bin/llama-batched-bench -m $M -c 42000 -b 2048 -ub 512 -npp 512 -ntg 128 \
        -npl 1,4,16,64 -fa on
    grep -hE "tg128|pp[0-9]|^\|  *512" /tmp/L/lcpp_*.log
fi
tar -cJf "$OD/logs.tar.xz" -C /tmp/L .
echo "end $((SECONDS - T0))s"

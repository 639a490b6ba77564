#!/usr/bin/env bash
# weft and llama.cpp in the same call on the GPU machine: batch-1 decode after a 512-token prompt and 1/4/16/64
# streams (llama-bench tg128 @ d512, llama-batched-bench), on the Llama-3.1-8B shape and the Qwen3-8B shape
# (bench/cuda/peer_gguf.py, Q4_0, random weights). llama.cpp is built here in the background from
# carry/llamacpp-src.tar.xz (~5 min on 13 cores) while weft runs; carry/ as for side_by_side.sh (wefts.tar.xz or
# weft.xz, libs.tar.xz, tok128k.json.xz; a test_cuda_backend in wefts.tar.xz runs while llama.cpp builds). Run
# from the repository root: bash bench/cuda/streams_side_by_side.sh
# (session 12, bench/RESULTS.md). Logs: $OUT/sbs.log.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/sbs; export OUT=
S=$O/sbs.log; : > "$S"; T0=$SECONDS
R() { local n=$1 l=$2 s=$SECONDS; shift 2; timeout "$l" "$@" >/tmp/sbs/$n.log 2>&1; local rc=$?
  { echo "===== $n rc=$rc $((SECONDS - s))s"; cat /tmp/sbs/$n.log; } >> "$S"
  echo "== [$((SECONDS - T0))s] $n rc=$rc $((SECONDS - s))s: $(grep -E '^\| [mq]|^\|  *[0-9]|tg128|rror' /tmp/sbs/$n.log | tail -8 | tr '\n' '|' | cut -c1-1200)"; }
LC=/tmp/lcpp; mkdir -p $LC && tar -xJf ${CARRY:-carry}/llamacpp-src.tar.xz -C $LC && mkdir -p $LC/tools/ui && : > $LC/tools/ui/CMakeLists.txt
(cd $LC && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release &&
  nice -n 10 taskset -c 3-15 cmake --build build -j13 --target llama-bench llama-batched-bench && touch $LC/built) > /tmp/sbs/lcpp_build.log 2>&1 &
WEFT_SBS=none bash bench/cuda/side_by_side.sh > /tmp/sbs/setup.log 2>&1; tail -1 /tmp/sbs/setup.log
export LD_LIBRARY_PATH=/tmp/w/lib; M=/tmp/m8b.gguf; Q=/tmp/q8b.gguf
R make_q8b 120 python3 bench/cuda/peer_gguf.py $Q /tmp/tok128k.json qwen3-8b
W="taskset -c 0-2 /tmp/w/weft bench"; B="--backend cuda --prompt-len 512 --gen-len 128 --chunk 512"
R weft_m_s16 90 $W $M $B --repeat 2 --streams 16
R weft_m_s4 60 $W $M $B --repeat 2 --streams 4
R weft_m_s64 90 $W $M $B --repeat 1 --streams 64
R weft_q_s4 60 $W $Q $B --repeat 2 --streams 4
R weft_q_s16 90 $W $Q $B --repeat 2 --streams 16
R weft_q_s64 90 $W $Q $B --repeat 1 --streams 64
# while llama.cpp builds: test_cuda_backend (every fixture, the exactness checks, the 8B chunk cuts) if carried
[ -x /tmp/w/test_cuda_backend ] && R test 240 /tmp/w/test_cuda_backend $M
while [ ! -f $LC/built ] && [ $((SECONDS - T0)) -lt 420 ]; do sleep 5; done
echo "[$((SECONDS - T0))s] llama.cpp built: $([ -f $LC/built ] && echo yes || tail -3 /tmp/sbs/lcpp_build.log)"
export LD_LIBRARY_PATH=$LC/build/bin:$LD_LIBRARY_PATH; LB=$LC/build/bin
# most important first (the call may run out of its 10 minutes): streams, then batch-1 decode, then Qwen3
R lcpp_m_bb 100 $LB/llama-batched-bench -m $M -c 42000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,4,16,64 -fa on
R lcpp_m_tg 60 $LB/llama-bench -m $M -fa 1 -p 0 -n 128 -d 512 -r 3 -o md
R lcpp_q_bb 60 $LB/llama-batched-bench -m $Q -c 12000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,4,16 -fa on
R lcpp_q_tg 60 $LB/llama-bench -m $Q -fa 1 -p 0 -n 128 -d 512 -r 3 -o md

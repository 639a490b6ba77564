#!/usr/bin/env bash
# Builds weft with ASan+UBSan and runs the whole test suite: C unit tests (ctest), then the Python HTTP and
# reference suites (pytest) in a virtualenv this script makes (.venv), plus the style gates.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build-test -DWEFT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-test -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-test --output-on-failure -j"$JOBS"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install -q -r tests/requirements.txt
WEFT_BIN="$PWD/build-test/weft" .venv/bin/python -m pytest -q tests/py
tools/lint.sh
echo "all tests passed"

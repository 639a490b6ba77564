#!/usr/bin/env bash
# Style gates: clang-format clean and cppcheck without findings on every C source.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests -name '*.[ch]')
clang-format --dry-run --Werror $files
cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,portability --inline-suppr \
  --suppress=missingIncludeSystem -I include -I src $files

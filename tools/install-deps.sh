#!/usr/bin/env bash
# Installs weft's build and test dependencies from Debian/Ubuntu packages (uses sudo when not root).
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config ca-certificates \
  libmicrohttpd-dev libjansson-dev libpcre2-dev libutf8proc-dev libssl-dev \
  python3 python3-venv python3-pip clang-format cppcheck >/dev/null

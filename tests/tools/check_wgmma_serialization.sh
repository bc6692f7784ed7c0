#!/usr/bin/env bash
# Fails if ptxas serializes the warpgroup MMAs of any CUDA kernel file. ptxas says so only as an info
# line under -v ("Potential Performance Loss: wgmma.mma_async instructions are serialized ...", or
# a warpgroup.wait it injected), which builds do not print, and a serialized kernel runs its MMAs
# one group at a time (an FP8 GEMM lost 12%: docs/benchmarks.md, twenty-seventh session).
#
#     tests/tools/check_wgmma_serialization.sh NVCC SRC_DIR
set -euo pipefail
nvcc=$1 src=$2
here=$(cd "$(dirname "$0")" && pwd)
flags=(-DMLASERVE_WITH_CUDA=1 -I"$src" -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++17 -Xptxas -v)
pattern='wgmma.mma_async instructions are serialized|warpgroup.wait is injected'
serialized() { "$nvcc" "${flags[@]}" -cubin "$1" -o /dev/null 2>&1 | grep -E "$pattern" || true; }

if [ -z "$(serialized "$here/wgmma_serialized_example.cu")" ]; then
  echo "the check no longer sees ptxas's message on wgmma_serialized_example.cu: update its pattern" >&2
  exit 1
fi
status=0
for f in "$src"/kernels/cuda/*.cu; do
  found=$(serialized "$f")
  if [ -n "$found" ]; then
    echo "$f:" >&2
    echo "$found" >&2
    status=1
  fi
done
exit $status

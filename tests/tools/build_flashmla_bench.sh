#!/usr/bin/env bash
# Builds tests/tools/flashmla_bench.cu (with the repo's event_timer.cu) against a FlashMLA checkout
# (its csrc/, not vendored here) and CUTLASS's headers, for sm_90a. The binary runs on the GPU
# machine beside bench_kernels.
# Usage: tests/tools/build_flashmla_bench.sh FLASHMLA_DIR CUTLASS_DIR [OUT]
#   CUTLASS_DIR holds include/cute and tools/util/include (CUTLASS 4.x; the PyPI nvidia-cutlass
#   package's cutlass_library/source works).
set -euo pipefail
fm=${1:?FlashMLA checkout}; cutlass=${2:?CUTLASS source dir}; out=${3:-build/flashmla_bench}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
flags=(-O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -DFLASH_MLA_DISABLE_FP16 --expt-relaxed-constexpr
       --expt-extended-lambda --use_fast_math -gencode arch=compute_90a,code=sm_90a
       -I"$repo/src" -I"$fm/csrc" -I"$fm/csrc/kerutils/include" -I"$cutlass/include" -I"$cutlass/tools/util/include")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I"$repo/src" -c "$repo/src/kernels/cuda/event_timer.cu" \
  -o "$tmp/event_timer.o" &
pids=($!)  # as the repo builds it (C++17: its fmt headers)
for src in "$here/flashmla_bench.cu" "$fm/csrc/sm90/decode/dense/instantiations/bf16.cu" \
           "$fm/csrc/smxx/decode/combine/combine.cu" \
           "$fm/csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu"; do
  "$nvcc" "${flags[@]}" -c "$src" -o "$tmp/$(basename "$src").o" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done  # set -e: a failed compile stops here
mkdir -p "$(dirname "$out")"
"$nvcc" -gencode arch=compute_90a,code=sm_90a "$tmp"/*.o -o "$out" -lcuda -lfmt
echo "built $out"

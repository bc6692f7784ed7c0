#!/usr/bin/env bash
# On the GPU machine: build the CUDA backend, run every GPU test (and compute-sanitizer memcheck
# on them), and the kernel benchmark. Results go to $OUT (or ./gpu-out).
#   scripts/gpu_check.sh [--no-bench] [--no-memcheck] [--model-bench] [--serve] [--trace] [--filter GTEST_FILTER]
# The GPU image has PCRE2's runtime but no header, and no cpp-httplib: carried copies are used,
# made on a Debian machine that has them (.carry is git-ignored; pass it in the device's carry):
#   mkdir -p .carry/include .carry/lib .carry/tokenizer
#   cp /usr/include/pcre2.h /usr/include/httplib.h .carry/include/
#   cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11.* .carry/lib/libcpp-httplib.so.0.11
#   cp ../shared/tokenizers/deepseek-v3/* .carry/tokenizer/        # for --serve, and its model:
#   mkdir -p .carry/v3_4layers && python3 -c "import json; c = json.load(open('../shared/models/deepseek-v3.json'));
#     c.update(num_hidden_layers=4, first_k_dense_replace=1, num_nextn_predict_layers=0);
#     c.pop('quantization_config'); json.dump(c, open('.carry/v3_4layers/config.json', 'w'))"
# --serve: `serve --device cuda` with a V3-dims model cut to 4 layers (dummy weights), a few
# requests, and bench-serving at concurrency 1, 16 and 64.
# --trace: each kernel's share of a V2-Lite decode step at batch 1 and 8 (tests/tools/kernel_trace.cc,
# read by tests/tools/kernel_timeline.py).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
bench=1; memcheck=1; model_bench=0; serve=0; trace=0; filter='*'
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;; --no-memcheck) memcheck=0 ;; --model-bench) model_bench=1 ;; --serve) serve=1 ;;
    --trace) trace=1 ;;
    --filter) filter="$2"; shift ;;
  esac
  shift
done
extra=()
if ! pkg-config --exists libpcre2-8 2>/dev/null && [ -f .carry/include/pcre2.h ]; then
  lib=$(ls /usr/lib/x86_64-linux-gnu/libpcre2-8.so* 2>/dev/null | head -1)
  extra=(-DPCRE2_INCLUDE_DIR="$PWD/.carry/include" -DPCRE2_LIBRARY="$lib")
fi
if ! pkg-config --exists cpp-httplib 2>/dev/null && [ -f .carry/lib/libcpp-httplib.so.0.11 ]; then
  # Debian built it with OpenSSL, zlib and brotli; brotli only changes its internals (the image has
  # brotli's runtime, no headers).
  extra+=(-DHTTPLIB_INCLUDE_DIR="$PWD/.carry/include" -DHTTPLIB_LIBRARY="$PWD/.carry/lib/libcpp-httplib.so.0.11"
          "-DHTTPLIB_DEFINITIONS=CPPHTTPLIB_OPENSSL_SUPPORT;CPPHTTPLIB_ZLIB_SUPPORT" "-DHTTPLIB_LINK_LIBRARIES=ssl;crypto;z")
fi
export CPATH="$PWD/.carry/include${CPATH:+:$CPATH}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON "${extra[@]}" > "$out/cmake.log" 2>&1 \
  || { tail -30 "$out/cmake.log"; exit 1; }
targets=(gpu_tests bench_kernels mlaserve)
[ "$trace" = 1 ] && targets+=(kernel_trace)
ninja -C build-gpu -j16 "${targets[@]}" > "$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
status=0
build-gpu/gpu_tests --gtest_filter="$filter" --gtest_output=xml:"$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|seed" ; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ "$memcheck" = 1 ] && command -v compute-sanitizer > /dev/null; then
  timeout 420 compute-sanitizer --tool memcheck --leak-check no build-gpu/gpu_tests --gtest_filter="$filter" \
    > "$out/memcheck.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3
fi
if [ "$bench" = 1 ]; then build-gpu/bench_kernels --json "$out/bench_kernels.json" | tee "$out/bench_kernels.txt"; fi
if [ "$model_bench" = 1 ]; then
  # Whole-model decode and prefill with dummy weights made on the GPU: V2-Lite whole, V3 cut to 4
  # layers (the preset keeps its first 3 dense: 3 dense + 1 MoE, FP8 as the preset says), with CUDA
  # graphs, and V2-Lite eager beside them; with .carry/v3_4layers (1 dense + 3 MoE, BF16, made as
  # the header says) also that model in BF16 and with --quantization fp8.
  mb() { build-gpu/mlaserve --log-level warning bench-one-batch --device cuda --input-len 256 --output-len 32 \
           --result-filename "$out/one_batch.jsonl" "$@" 2>&1 | tee -a "$out/one_batch.txt"; }
  mb --model deepseek-v2-lite --batch-size 1 8 32 64 128
  mb --model deepseek-v2-lite --batch-size 1 8 --disable-cuda-graph
  mb --model deepseek-v3 --num-layers 4 --batch-size 1 8 32
  if [ -f .carry/v3_4layers/config.json ]; then
    mb --model .carry/v3_4layers --batch-size 1 32 128
    mb --model .carry/v3_4layers --quantization fp8 --batch-size 1 32 128
  fi
fi
if [ "$trace" = 1 ]; then
  for b in 1 8; do
    LD_PRELOAD="$PWD/build-gpu/libkernel_trace.so" MLASERVE_KERNEL_TRACE="$out/trace_b$b.csv" build-gpu/mlaserve \
      --log-level warning bench-one-batch --device cuda --model deepseek-v2-lite --load-format dummy --batch-size $b \
      --input-len 256 --output-len 16 > "$out/trace_b$b.log" 2>&1 || status=1
    python3 tests/tools/kernel_timeline.py "$out/trace_b$b.csv" | tee "$out/timeline_b$b.txt" || status=1
  done
fi
if [ "$serve" = 1 ]; then
  build-gpu/mlaserve serve --device cuda --model .carry/v3_4layers --load-format dummy \
    --tokenizer-path .carry/tokenizer --port 30000 > "$out/serve.log" 2>&1 &
  pid=$!
  for i in $(seq 1 120); do curl -sf localhost:30000/health > /dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  grep -E "memory plan|captured|KV pool|error" "$out/serve.log"
  curl -s localhost:30000/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt":"The capital of France is","max_tokens":8,"temperature":0}' || status=1
  echo
  for c in 1 16 64; do
    build-gpu/mlaserve bench-serving --port 30000 --num-prompts $((c < 16 ? 16 : c * 4)) --random-input-len 512 \
      --random-output-len 128 --random-range-ratio 0.5 --max-concurrency $c --output-file "$out/serving.jsonl" \
      2>&1 | grep -v "requests done" | tee -a "$out/serving.txt" || status=1
  done
  kill -TERM $pid; wait $pid || status=1
fi
exit $status

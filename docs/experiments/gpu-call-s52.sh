#!/usr/bin/env bash
# Prepared in the fiftieth and fifty-first sessions (never ran). Binaries, each main da4d2a3 plus patches from
# docs/experiments: s52 = fp8-gemm-block-n (block_n forms, store fix, descriptors by one add, split-templated K
# loop); s52u = block-n + the warpgroup index by a shuffle (fp8-gemm-uniform-wg: descriptors in uniform
# registers); s52s = block-n + uniform + fp8-gemm-ws-smem (weight scales by cp.async into the stage); s52h = block-n +
# uniform + fp8-gemm-halves; s52w = block-n + uniform + fp8-gemm-wave-trace + fp8-gemm-desync (probe only; run
# plain, then with MLASERVE_FP8_DESYNC=1: warpgroup 2 starts each tile a wave late). Compare K loops by the
# trace's cycles a tile (clock-free): the times of short alternating runs differ 10-16% between repeats.
# s52o = main d9121d9's bench_kernels (_m) and, with docs/experiments/uniform-wg-others.patch (the same shuffle in
# the MoE grouped GEMMs and MLA prefill), bench_kernels_o and gpu_tests_o.
# A copy of .carry/s52.sh (the workspace may not keep .carry). To rebuild the tarballs: a checkout at main,
# `git apply` the patches in the order above, `ninja -C build mlaserve gpu_tests fp8_gemm_probe bench_kernels`,
# copy the binaries with the suffixes below (gpu_tests_u, fp8_gemm_probe_u, ...; s52o's bench_kernels_m is
# main's), `strip`, and `tar cf - -C DIR . | xz -9 -T2 > .carry/s52X.tar.xz`. The libraries the GPU machine lacks:
#   mkdir -p .carry/lib; cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11.* .carry/lib/libcpp-httplib.so.0.11
#   cp /lib/x86_64-linux-gnu/{libfmt.so.9,libspdlog.so.1.10} .carry/lib
# Run: cp docs/experiments/gpu-call-s52.sh .carry/s52.sh; DEADLINE=540 bash .carry/s52.sh, carry [".carry"].
# Steps are capped by DEADLINE (seconds of the command); the H200 tune runs only on an H200 with time left.
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=/tmp/b; mkdir -p $B
for t in s52 s52u s52s s52h s52w s52o; do xz -dc .carry/$t.tar.xz | tar xf - -C $B; done
L=$OUT/log.txt
{ date; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv; } > $L
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*" >> $L; }
cap() {  # min($1, the seconds left before DEADLINE), at least 1
  local left=$(( ${DEADLINE:-575} - ($(date +%s) - T0) ))
  [ $left -lt 1 ] && left=1
  [ $left -lt $1 ] && echo $left || echo $1
}
el "tests: block-n + uniform (what would land), + ws-smem, + halves"
timeout $(cap 60) $B/gpu_tests_u --gtest_filter='Fp8Linear.WarpSpecialized*:Fp8Linear.TunedWgmma*:Fp8Linear.*Wgmma*' \
  > $OUT/tests.txt 2>&1
echo "rc=$?" >> $OUT/tests.txt; grep -E "OK \]|FAILED|rc=" $OUT/tests.txt | head -20 >> $L
for v in s h o; do
  f='Fp8Linear.WarpSpecialized*:Fp8Linear.*Wgmma*'; [ $v = o ] && f='Moe.*:MlaPrefill.*:CudaModel.*'
  timeout $(cap 60) $B/gpu_tests_$v --gtest_filter="$f" > /tmp/tests_$v.txt 2>&1
  echo "rc=$?" >> /tmp/tests_$v.txt; grep -E "OK \]|FAILED|rc=" /tmp/tests_$v.txt | head -20 >> $L
  { echo "=== gpu_tests_$v"; cat /tmp/tests_$v.txt; } >> $OUT/tests.txt
done
el "o at 4096, 128-row forms: block-n, + uniform, + ws-smem, + halves, block-n again; then the wave stamps"
probe_o() { echo "=== $1"; timeout $(cap 45) $B/$2 --trace --only o --block-n 128 4096; }
{ probe_o block-n fp8_gemm_probe; probe_o uniform fp8_gemm_probe_u; probe_o ws-smem fp8_gemm_probe_s
  probe_o halves fp8_gemm_probe_h; probe_o block-n fp8_gemm_probe; } > $OUT/probe_o.txt 2>&1
timeout $(cap 45) $B/fp8_gemm_probe_w --trace --only o --block-n 128 4096 > $OUT/probe_w.txt 2>&1
{ echo "=== MLASERVE_FP8_DESYNC=1"; MLASERVE_FP8_DESYNC=1 timeout $(cap 45) $B/fp8_gemm_probe_w --trace --only o \
    --block-n 128 4096; } >> $OUT/probe_w.txt 2>&1
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  el "H200: tune 9-16 (table with the block_n forms)"
  mkdir -p /tmp/tnew; cp configs/tuning/*.json /tmp/tnew/
  MLASERVE_TUNING_DIR=/tmp/tnew timeout $(cap 200) $B/mlaserve tune-fp8-gemm --model deepseek-v3 \
    --batch-size 9 10 12 16 > $OUT/tune.txt 2>&1; echo "rc=$?" >> $OUT/tune.txt
  cp /tmp/tnew/fp8_gemm_*H200*.json $OUT/ 2>/dev/null
fi
el "MoE grouped GEMMs and MLA prefill: main, the shuffle"
for g in moe_fp8 mla_prefill moe; do
  for v in m o; do
    { echo "=== $g $v"; timeout $(cap 40) $B/bench_kernels_$v --only $g; } >> $OUT/bench_o.txt 2>&1
  done
done
el "q_kv_a at 1024, 2048: all forms (uniform)"
timeout $(cap 60) $B/fp8_gemm_probe_u --trace --only q_kv_a 1024 2048 > $OUT/probe_more.txt 2>&1
el "o, dense_down at 1024: 112-row forms (uniform)"
for s in o dense_down; do
  timeout $(cap 25) $B/fp8_gemm_probe_u --trace --only $s --block-n 112 1024 >> $OUT/probe_more.txt 2>&1
done
el "kv_b, q_kv_a at 4096: all forms (uniform)"
timeout $(cap 60) $B/fp8_gemm_probe_u --trace --only kv_b 4096 >> $OUT/probe_more.txt 2>&1
timeout $(cap 60) $B/fp8_gemm_probe_u --trace --only q_kv_a 4096 >> $OUT/probe_more.txt 2>&1
el done

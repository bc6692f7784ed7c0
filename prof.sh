#!/usr/bin/env bash
set -uo pipefail
export CPATH=$PWD/.carry/include
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
lib=$(ls /usr/lib/x86_64-linux-gnu/libpcre2-8.so*|head -1)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_CUDA=ON -DPCRE2_INCLUDE_DIR=$PWD/.carry/include -DPCRE2_LIBRARY=$lib > $OUT/cmake.log 2>&1
ninja -C build-gpu -j16 gpu_tests bench_kernels mlaserve > $OUT/build.log 2>&1 || { grep -E "error" -A3 $OUT/build.log | head -30; exit 1; }
echo "built $(date +%T)"
timeout 200 ncu --clock-control none --graph-profiling node --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -k regex:"moe_grouped_gemm_fp8" -s 8 -c 2 build-gpu/bench_kernels --only moe_fp8 --shape "T=512 " > $OUT/prof.txt 2>&1
grep -E "moe_grouped|Duration|Throughput|Pipe|Issue|Stall|Warp Cycles|Achieved|Theoretical Occ|Registers|Eligible|Active Warps|L2 Hit|Mem Busy|Max Bandwidth|One or More|No Eligible|Executed Ipc" $OUT/prof.txt | head -80

#!/usr/bin/env python3
"""The critical path of one CUDA-graph replay in a kernel trace (tests/tools/kernel_trace.cc).

Takes the last replay of the graph with the most kernels (a decode step), then prints every kernel
in launch order: its start and end relative to the step, its run time, and its share of the chain
(end minus the previous kernel's end), which is what removing it would save. A summary adds the
shares up by kernel over the layers.

    python3 tests/tools/kernel_timeline.py trace.csv [--all]
"""
import argparse
import collections
import csv
import re
import shutil
import signal
import subprocess


def demangle(names):
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, out))


def short(name):
    """mlaserve::cuda::(anon)::skinny_gemm_kernel<1, false, true>(...) -> skinny_gemm_kernel<1, false, true>"""
    name = re.sub(r"mlaserve::cuda::|\(anonymous namespace\)::|mla::|^void ", "", name)
    name = re.sub(r"\(.*\)$", "", name)
    return name[:70]


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--all", action="store_true", help="print every kernel, not only the summary")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.trace)))
    for r in rows:
        r["start"], r["end"] = int(r["start_ns"]), int(r["end_ns"])
    graphs = {r["graph"] for r in rows if r["graph"] != "0"}
    if not graphs:
        raise SystemExit("no graph replays in the trace")
    # Kernels a replay: the graph with the most records per replay is the decode step's; count a
    # replay's kernels as the run between two of its first kernel.
    per_graph = {}
    for g in graphs:
        seq = sorted((r for r in rows if r["graph"] == g), key=lambda r: r["start"])
        first = seq[0]["name"]
        starts = [i for i, r in enumerate(seq) if r["name"] == first]
        n = starts[1] - starts[0] if len(starts) > 1 else len(seq)
        per_graph[g] = (n, seq)
    g = max(per_graph, key=lambda k: per_graph[k][0])
    n, seq = per_graph[g]
    step = seq[-n:]
    names = demangle(sorted({r["name"] for r in step}))
    t0 = step[0]["start"]
    total = step[-1]["end"] - t0
    print(f"graph {g}: {n} kernels a replay, last replay {total / 1e3:.1f} us")
    shares = collections.defaultdict(list)
    prev_end = t0
    for r in step:
        name = short(names[r["name"]])
        grid = f'{r["grid_x"]}x{r["grid_y"]}'
        share = r["end"] - prev_end
        shares[(name, grid)].append((share, r["end"] - r["start"], prev_end - r["start"]))
        if args.all:
            print(f'{(r["start"] - t0) / 1e3:9.2f} {(r["end"] - t0) / 1e3:9.2f} run {(r["end"] - r["start"]) / 1e3:6.2f}'
                  f' chain {share / 1e3:6.2f}  {grid:>9}  {name}')
        prev_end = r["end"]
    print(f"{'kernel':70} {'grid':>9} {'count':>5} {'chain us':>9} {'each':>6} {'run':>6} {'early':>6}")
    totals = {key: [sum(x) / 1e3 for x in zip(*v)] + [len(v)] for key, v in shares.items()}
    for (name, grid), (chain, run, early, c) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:70} {grid:>9} {c:5d} {chain:9.1f} {chain / c:6.2f} {run / c:6.2f} {early / c:6.2f}")
    print("chain: end minus the previous kernel's end; run: end minus start; early: how long it started "
          "before the previous kernel ended (PDL)")


if __name__ == "__main__":
    main()

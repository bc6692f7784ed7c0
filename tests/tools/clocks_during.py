#!/usr/bin/env python3
"""Mean SM clock and power in each soak window of fp8_gemm_probe --soak.

Usage: clocks_during.py SMI_LOG PROBE_LOG
SMI_LOG from `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,nounits -lms 100`
taken beside the probe; PROBE_LOG holds its "soak NAME from A to B" lines (host epoch ms). The first
and last 10% of each window are left out (the clock settles after a change of load). nvidia-smi's
timestamps are local time: run this where the log was taken (or under the same TZ).
"""
import csv
import re
import sys
from datetime import datetime


def samples(path):
    out = []
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 3 or not row[0].strip()[:1].isdigit():
                continue  # the header
            t = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp() * 1000
            out.append((t, float(row[1]), float(row[2])))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    smi = samples(sys.argv[1])
    soak = re.compile(r"soak (\S+) from (\d+) to (\d+): (\d+) products, ([\d.]+) ms each")
    shape = ""
    for line in open(sys.argv[2]):
        if not line.startswith(" "):
            shape = " ".join(line.split()[:2])
        m = soak.search(line)
        if not m:
            continue
        name, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        cut = (b - a) // 10
        inside = [(c, p) for t, c, p in smi if a + cut <= t <= b - cut]
        if not inside:
            print(f"{shape:<20} {name:<9} no samples in the window")
            continue
        clock = sum(c for c, _ in inside) / len(inside)
        power = sum(p for _, p in inside) / len(inside)
        print(f"{shape:<20} {name:<9} {float(m.group(5)):.4f} ms a product, SM {clock:.0f} MHz, "
              f"{power:.0f} W ({len(inside)} samples)")


if __name__ == "__main__":
    main()

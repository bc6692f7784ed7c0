#!/usr/bin/env python3
"""The hot loop of each kernel in a cubin's SASS, counted: what a K-block or a pair costs in instructions.

For each function of `cuobjdump -sass` output it finds the innermost loops (backward branches) that hold
warpgroup MMAs (GMMA) and prints each body's size and its mix: MMAs, FFMA, R2UR (a value moved into a
uniform register, e.g. an MMA descriptor built in vector registers), LDG / LDS, barriers.
With --waits it also lists, inside the loop, each instruction that waits on a scoreboard last set by a
long-latency producer (global or constant load, shuffle, special register), read from the control
bits of the instruction's second word (stall 4 bits, yield 1, write and read scoreboards 3 each, wait
mask 6, from bit 41 of that word): where a wait sits between a warpgroup's MMAs, a slow load holds
them. The producer is the last one in address order, so a loop-carried one shows as its previous
iteration's.

    cuobjdump -sass build.cubin > k.sass   # cuobjdump: PyPI nvidia-cuda-cuobjdump (bin/ of the wheel)
    tests/tools/sass_loop.py k.sass [--function SUBSTRING] [--waits] [--from HEX --to HEX]

--from / --to: count that address range instead of the found loop (e.g. one K-block of an unrolled loop).
"""
import argparse
import re
import sys
from collections import Counter

INSTR = re.compile(r'\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*/\* (0x[0-9a-f]+) \*/')
WORD = re.compile(r'/\* (0x[0-9a-f]+) \*/')
LONG_LATENCY = ('LDG', 'LDC', 'LD.', 'S2R', 'S2UR', 'SHFL', 'ATOM', 'RED')


class Ins:
    def __init__(self, addr, text, word):
        self.addr, self.text = addr, text.rstrip(';').strip()
        c = word >> 41
        self.wb, self.rb, self.wait = (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3F  # after stall (4) and yield (1)
        words = self.text.split()
        self.op = words[1] if words and words[0].startswith('@') and len(words) > 1 else (words[0] if words else '')


def functions(lines):
    """{name: [Ins]} from cuobjdump -sass text (each instruction's first line, then its second word)."""
    out, name, i = {}, None, 0
    while i < len(lines):
        if 'Function :' in lines[i]:
            name = lines[i].split('Function :', 1)[1].strip()
            out[name] = []
        m = INSTR.match(lines[i])
        if m and name and i + 1 < len(lines):
            w = WORD.search(lines[i + 1])
            if w:
                out[name].append(Ins(int(m.group(1), 16), m.group(2), int(w.group(1), 16)))
                i += 2
                continue
        i += 1
    return out


def inner_loops(code):
    """[(first, last)] of the innermost loops that hold warpgroup MMAs: backward branches that close a
    body with MMAs and no other such loop inside it (a K-block, a pair; one per warpgroup where each
    has a loop of its own). Branches after the function's last EXIT are left out: ptxas puts the
    retry of a barrier wait there, a jump back into the middle, not a loop."""
    exits = [x.addr for x in code if x.op == 'EXIT']
    loops = []
    for ins in code:
        m = re.search(r'\bBRA (0x[0-9a-f]+)', ins.text)
        if m and int(m.group(1), 16) < ins.addr and (not exits or ins.addr < max(exits)):
            lo = int(m.group(1), 16)
            if any('GMMA' in x.op for x in code if lo <= x.addr <= ins.addr):
                loops.append((lo, ins.addr))
    return [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]


def report(name, code, lo, hi, waits):
    body = [x for x in code if lo <= x.addr <= hi]
    ops = Counter(x.op.split('.')[0] for x in body)
    print(f'{name}\n  loop {lo:#x}-{hi:#x}: {len(body)} instructions; ' + ', '.join(
        f'{k} {ops[k]}' for k in ('HGMMA', 'QGMMA', 'FFMA', 'R2UR', 'LDG', 'LDS', 'LDC', 'STS', 'BAR', 'SYNCS')
        if ops[k]))
    if not waits:
        return
    last = {}  # scoreboard -> (instruction that set it last, whether for its result rather than its operands)
    for x in code:
        for sb in range(6):
            if x.wait >> sb & 1 and sb in last and lo <= x.addr <= hi:
                p, result = last[sb]
                if result and p.op.startswith(LONG_LATENCY):
                    print(f'    {x.addr:05x} waits on sb{sb} of {p.addr:05x} {p.op:<22} ({(x.addr - p.addr) // 16:5d} '
                          f'instructions later): {x.text[:70]}')
        if x.rb != 7:
            last[x.rb] = (x, False)  # the operands read: a short wait before they may be overwritten
        if x.wb != 7:
            last[x.wb] = (x, True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('sass')
    ap.add_argument('--function', default='')
    ap.add_argument('--waits', action='store_true')
    ap.add_argument('--from', dest='lo', type=lambda s: int(s, 16))
    ap.add_argument('--to', dest='hi', type=lambda s: int(s, 16))
    a = ap.parse_args()
    with open(a.sass) as f:
        funcs = functions(f.read().split('\n'))
    for name, code in funcs.items():
        if a.function not in name:
            continue
        spans = [(a.lo, a.hi)] if a.lo is not None and a.hi is not None else inner_loops(code)
        for lo, hi in spans:
            report(name, code, lo, hi, a.waits)
    return 0


if __name__ == '__main__':
    sys.exit(main())

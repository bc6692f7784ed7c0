#!/usr/bin/env python3
"""HF `tokenizers` encode throughput on a corpus, to set beside `mlaserve bench-tokenizer`.

    python3 tests/tools/bench_hf_tokenizer.py --tokenizer DIR --corpus FILE [--threads N]

The corpus is read as `mlaserve bench-tokenizer` reads it: one document a line, newline kept.
Reported in MB of UTF-8 text per second:
  encode_loop          tokenizer.encode(doc) for each document from Python (what a Python server does)
  encode_batch_1       tokenizer.encode_batch(docs) with one Rayon thread (no Python per document)
  encode_batch_fast_1  the same without offsets (encode_batch_fast, where this version has it)
  encode_batch_N, encode_batch_fast_N   the same on N threads
Each thread count runs in its own process, because Rayon fixes its pool size at first use.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def read_docs(path):
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line + "\n" for line in lines]


def timed(fn, total_bytes, seconds):
    """Repeats fn until `seconds` pass; returns MB/s."""
    done, start = 0, time.perf_counter()
    while True:
        fn()
        done += total_bytes
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / 1e6 / elapsed


def measure(args):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    docs = read_docs(args.corpus)
    total = sum(len(d.encode("utf-8")) for d in docs)
    tok.encode_batch(docs, add_special_tokens=False)  # warm the BPE cache, as the C++ bench does
    result = {}
    if args.loop:
        result["encode_loop"] = timed(lambda: [tok.encode(d, add_special_tokens=False) for d in docs], total, args.seconds)
    n = os.environ["RAYON_NUM_THREADS"]
    result[f"encode_batch_{n}"] = timed(lambda: tok.encode_batch(docs, add_special_tokens=False), total, args.seconds)
    if hasattr(tok, "encode_batch_fast"):
        result[f"encode_batch_fast_{n}"] = timed(lambda: tok.encode_batch_fast(docs, add_special_tokens=False),
                                                 total, args.seconds)
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(args)
        return

    import tokenizers

    docs = read_docs(args.corpus)
    result = {"tokenizers_version": tokenizers.__version__, "documents": len(docs),
              "megabytes": sum(len(d.encode("utf-8")) for d in docs) / 1e6}
    for threads, loop in ((1, True), (args.threads, False)):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
        command = [sys.executable, __file__, "--child", "--tokenizer", args.tokenizer, "--corpus", args.corpus,
                   "--seconds", str(args.seconds)] + (["--loop"] if loop else [])
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        result.update(json.loads(out.strip().splitlines()[-1]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

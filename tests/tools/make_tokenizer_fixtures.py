#!/usr/bin/env python3
"""Makes tests/fixtures/tokenizer/: what HF `tokenizers` and jinja2 produce for the DeepSeek-V3
tokenizer, which the C++ unit tests must reproduce exactly.

    pip install tokenizers jinja2
    python3 tests/tools/make_tokenizer_fixtures.py                 # write the fixtures
    python3 tests/tools/make_tokenizer_fixtures.py --check build/mlaserve --fuzz 100000
                                                                   # differential run, writes nothing

Files written:
  encode.json       strings -> ids without and with special tokens, and their decodes
  decode.json       id sequences (split characters, special and unknown ids) -> text
  variants.json     other tokenizer.json configurations (patches of V3's) -> ids
  chat.json         rendered prompts: DeepSeek-V3's template, r1_style.jinja, feature templates
  unicode_classes.json  HF's regex classes (\\p{L}, \\s, ...) as code point ranges
  corpus.txt        the fixture strings, each followed by a newline, for `mlaserve bench-tokenizer`

"With special tokens" follows transformers: tokenizer_config.json's add_bos_token/add_eos_token
replace tokenizer.json's post-processor (LlamaTokenizerFast does this), so the ids start with BOS.
Chat templates render in transformers' environment: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, json.dumps-based tojson and raise_exception.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import jinja2
import jinja2.ext
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer, processors

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chat_template_cases  # noqa: E402
import tokenizer_corpus  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TOKENIZER_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "tokenizers", "deepseek-v3"))
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "tokenizer")
SEED = 20261121


def load_tokenizers(folder):
    """The plain tokenizer and one whose post-processor adds BOS/EOS the way transformers does."""
    plain = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    config = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    with_special = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))

    def content(token):
        return token["content"] if isinstance(token, dict) else token

    bos, eos = content(config.get("bos_token")), content(config.get("eos_token"))
    single, specials = "$A:0", []
    if config.get("add_bos_token"):
        single = f"{bos}:0 " + single
        specials.append((bos, plain.token_to_id(bos)))
    if config.get("add_eos_token"):
        single = single + f" {eos}:0"
        specials.append((eos, plain.token_to_id(eos)))
    with_special.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    return plain, with_special, config


def encode_fixture(plain, with_special):
    strings = tokenizer_corpus.structured_strings(random.Random(SEED))
    ids = [e.ids for e in plain.encode_batch(strings, add_special_tokens=False)]
    ids_special = [e.ids for e in with_special.encode_batch(strings, add_special_tokens=True)]
    cases = []
    for text, a, b in zip(strings, ids, ids_special):
        cases.append({"text": text, "ids": a, "ids_with_special": b,
                      "decoded": plain.decode(a, skip_special_tokens=False),
                      "decoded_skip_special": plain.decode(b, skip_special_tokens=True)})
    return cases


def decode_fixture(plain):
    """Id sequences that stress decoding: characters split across byte tokens, lone continuation
    bytes, truncated characters, special and unknown ids."""
    rng = random.Random(SEED + 1)
    vocab = plain.get_vocab_size(with_added_tokens=True)
    byte_ids = [plain.token_to_id(c) for c in
                ("Ġ", "ð", "Ł", "ĺ", "Ģ", "ä", "½", "ł", "¤", "ç", "ķ", "Į", "ï", "¼", "Į")]
    sequences = [[], [0], [1], [0, 1, 2], byte_ids, byte_ids[1:4], byte_ids[2:], byte_ids[1:3] + [0],
                 [vocab, vocab + 5, 10], [128000, 128799, 128803, 128814], [2, 5, 2]]
    emoji_ids = plain.encode("👨‍👩‍👧‍👦🇯🇵中文", add_special_tokens=False).ids
    for cut in range(len(emoji_ids)):
        sequences.append(emoji_ids[:cut])
        sequences.append(emoji_ids[cut:])
    for _ in range(150):
        n = rng.randrange(1, 40)
        sequences.append([rng.randrange(0, vocab + 2) if rng.random() < 0.97 else rng.choice([0, 1, 128803])
                          for _ in range(n)])
    for _ in range(50):
        # Byte tokens only: anything from valid characters to garbage.
        sequences.append([rng.choice(byte_ids + list(range(3, 259))) for _ in range(rng.randrange(1, 16))])
    return [{"ids": s, "text": plain.decode(s, skip_special_tokens=False),
             "text_skip_special": plain.decode(s, skip_special_tokens=True)} for s in sequences]


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern}, "behavior": behavior,
            "invert": invert}


# Other tokenizer.json configurations, made by patching DeepSeek-V3's: each exercises options its
# own file does not use (GPT-2 and Llama-3 style regexes, prefix spaces, digits, every split
# behaviour, normalizers, added-token flags, a TemplateProcessing post-processor, ignore_merges).
VARIANTS = [
    ("gpt2_byte_level", {"pre_tokenizer": byte_level(use_regex=True)}),
    ("prefix_space", {"pre_tokenizer": byte_level(add_prefix_space=True, use_regex=True)}),
    ("llama3_style", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        split(LLAMA3_PATTERN, "Isolated"), byte_level()]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<｜begin▁of▁sentence｜>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<｜end▁of▁sentence｜>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<｜begin▁of▁sentence｜>": {"id": "<｜begin▁of▁sentence｜>", "ids": [0], "tokens": ["<｜begin▁of▁sentence｜>"]},
                                              "<｜end▁of▁sentence｜>": {"id": "<｜end▁of▁sentence｜>", "ids": [1], "tokens": ["<｜end▁of▁sentence｜>"]}}},
        "model.ignore_merges": True}),
    ("digits", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(use_regex=True)]}}),
    ("digits_contiguous", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False}, byte_level()]}}),
    ("split_behaviors", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        split(" ", "MergedWithPrevious", literal=True), split(r"\p{P}", "MergedWithNext"),
        split("[aeiou]", "Contiguous"), split("x", "Removed"), split(r"\s+", "Isolated", invert=True),
        split("$", "Isolated"), split(r"\w+", "MergedWithPrevious"), split("(?=b)", "Isolated"), byte_level()]}}),
    ("normalizers", {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"String": "  "}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": r"\d+"}, "content": "<num>"},
        {"type": "Prepend", "prepend": "^"}]}}),
    ("added_token_flags", {"added_tokens.flags": {
        "<｜User｜>": {"lstrip": True, "rstrip": True},
        "<｜Assistant｜>": {"single_word": True},
        "<｜tool▁sep｜>": {"lstrip": True, "normalized": True}},
        "added_tokens.new": [{"id": 128815, "content": "<tag>", "single_word": False, "lstrip": False,
                              "rstrip": True, "normalized": False, "special": True},
                             {"id": 33310, "content": "hello", "single_word": True, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": False}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "HELLO"}, "content": "hello"}]}}),
]


def apply_variant(tokenizer_json, patch):
    """The same patch that tests/unit/tokenizer_test.cc applies before loading."""
    t = json.loads(json.dumps(tokenizer_json))
    for key, value in patch.items():
        if key == "model.ignore_merges":
            t["model"]["ignore_merges"] = value
        elif key == "added_tokens.flags":
            for token in t["added_tokens"]:
                token.update(value.get(token["content"], {}))
        elif key == "added_tokens.new":
            t["added_tokens"].extend(value)
        else:
            t[key] = value
    return t


def variants_fixture(folder):
    base = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    strings = [s for s in tokenizer_corpus.structured_strings(random.Random(SEED)) if len(s) < 160][::2]
    strings += [" <｜User｜>  hi  <｜User｜>x", "a<｜Assistant｜>b <｜Assistant｜> c", "x <｜tool▁sep｜>y",
                "HELLO hello helloworld <tag>   after", "  lots   of   space  123 4567 ", "abxbab bb b.b"]
    out = []
    for name, patch in VARIANTS:
        tok = Tokenizer.from_str(json.dumps(apply_variant(base, patch)))
        cases = []
        for s in strings:
            case = {"text": s, "ids": tok.encode(s, add_special_tokens=False).ids}
            with_special = tok.encode(s, add_special_tokens=True).ids
            if with_special != case["ids"]:
                case["ids_with_special"] = with_special
            cases.append(case)
        out.append({"name": name, "patch": patch, "cases": cases})
    return out


def make_environment():
    """jinja2 configured as transformers' _compile_jinja_template configures it."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env, source, variables):
    # Variables go through JSON first: the C++ side sees exactly what this side renders.
    variables = json.loads(json.dumps(variables))
    try:
        return {"expected": env.from_string(source).render(**variables)}
    except Exception as e:  # noqa: BLE001 - any template failure is an expected error
        return {"error": f"{type(e).__name__}: {e}"}


def chat_fixture(config):
    env = make_environment()
    special = {k: (v["content"] if isinstance(v, dict) else v) for k, v in config.items()
               if k in ("bos_token", "eos_token", "unk_token", "pad_token") and v is not None}
    r1_source = open(os.path.join(OUT_DIR, "r1_style.jinja"), encoding="utf-8").read()
    templates = {"deepseek-v3": config["chat_template"], "r1-style": r1_source}
    cases = []
    for template_name, source in templates.items():
        conversations = chat_template_cases.conversations()
        if template_name == "r1-style":
            conversations += chat_template_cases.R1_EXTRA
        for name, messages, tools in conversations:
            for add_generation_prompt in (False, True):
                variables = dict(special, messages=messages, tools=tools, documents=None,
                                 add_generation_prompt=add_generation_prompt)
                case = {"name": f"{template_name}/{name}/agp={add_generation_prompt}", "template": template_name,
                        "messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt}
                case.update(render(env, source, variables))
                cases.append(case)
    features = []
    for name, source, variables in chat_template_cases.FEATURES:
        case = {"name": name, "source": source, "variables": variables}
        case.update(render(env, source, variables))
        features.append(case)
    return {"conversations": cases, "features": features}


def unicode_fixture():
    import make_unicode_supplement as mus  # slow import: builds a string of every code point

    classes = {}
    for name, pattern in [("L", r"\p{L}"), ("N", r"\p{N}"), ("P", r"\p{P}"), ("S", r"\p{S}"),
                          ("M", r"\p{M}"), ("Nd", r"\p{Nd}"), ("s", r"\s"), ("d", r"\d"), ("w", r"\w")]:
        classes[name] = {"pattern": pattern, "ranges": mus.to_ranges(mus.hf_members(pattern))}
    return classes


def write_json(name, value):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, REPO)} ({os.path.getsize(path) // 1024} KiB)")


def check(binary, folder, plain, count):
    """Differential run: fuzz strings and a sweep of every code point through `mlaserve tokenize`."""
    strings = (tokenizer_corpus.fuzz_strings(SEED + 2, count) + tokenizer_corpus.code_point_sweep()
               + tokenizer_corpus.structured_strings(random.Random(SEED)))
    payload = "".join(json.dumps(s) + "\n" for s in strings).encode()
    result = subprocess.run([binary, "tokenize", "--tokenizer", folder], input=payload,
                            capture_output=True, check=True)
    ours = result.stdout.decode().splitlines()
    expected = plain.encode_batch(strings, add_special_tokens=False)
    mismatches = 0
    for text, line, e in zip(strings, ours, expected):
        if json.loads(line) != e.ids:
            mismatches += 1
            if mismatches <= 10:
                print("MISMATCH", repr(text)[:300], "\n  ours", line[:300], "\n  hf  ", e.ids[:60])
    print(f"{len(strings)} strings, {mismatches} mismatches (tokenizers {tokenizers.__version__})")
    return 1 if mismatches or len(ours) != len(strings) else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=TOKENIZER_DIR)
    parser.add_argument("--check", metavar="MLASERVE", help="compare this binary with HF instead of writing")
    parser.add_argument("--fuzz", type=int, default=20000, help="fuzz strings for --check")
    args = parser.parse_args()
    plain, with_special, config = load_tokenizers(args.tokenizer)
    if args.check:
        sys.exit(check(args.check, args.tokenizer, plain, args.fuzz))

    os.makedirs(OUT_DIR, exist_ok=True)
    encode_cases = encode_fixture(plain, with_special)
    meta = {"tokenizers_version": tokenizers.__version__, "jinja2_version": jinja2.__version__,
            "tokenizer": "deepseek-v3"}
    write_json("encode.json", dict(meta, cases=encode_cases))
    write_json("decode.json", dict(meta, cases=decode_fixture(plain)))
    write_json("chat.json", dict(meta, **chat_fixture(config)))
    write_json("variants.json", dict(meta, variants=variants_fixture(args.tokenizer)))
    write_json("unicode_classes.json", dict(meta, classes=unicode_fixture()))
    with open(os.path.join(OUT_DIR, "corpus.txt"), "w", encoding="utf-8") as f:
        for case in encode_cases:
            f.write(case["text"] + "\n")
    print(f"{len(encode_cases)} strings")


if __name__ == "__main__":
    main()

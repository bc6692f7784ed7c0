#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_supplement.cc: the code points that HF `tokenizers` (whose regex
engine is Oniguruma, with newer Unicode tables) puts in a character class while the system PCRE2
does not. Pre-tokenizer regexes use \\p{L}, \\p{N}, \\s ...; without these extra ranges, characters
assigned after PCRE2's Unicode version (new emoji, CJK extensions) would split differently from HF.

The membership on both sides is measured, not read from Unicode data files: HF's by running its
Split pre-tokenizer over a string of every code point, PCRE2's by matching the same string through
the system libpcre2-8 (ctypes). Run it again when `tokenizers` or PCRE2 is upgraded:

    pip install tokenizers && python3 tests/tools/make_unicode_supplement.py
"""
import ctypes
import ctypes.util
import os
import sys

import tokenizers
from tokenizers import Regex, pre_tokenizers

# The general categories a pre-tokenizer regex may name. A supplement can only add code points, so
# a category where PCRE2 has members HF lacks (a character moved between categories in a later
# Unicode version) is left out and named in the generated file; the top-level ones must not be.
CATEGORIES = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
              "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
              "Z", "Zs", "Zl", "Zp"]

CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
TEXT = "".join(chr(c) for c in CODE_POINTS)
TEXT_BYTES = TEXT.encode("utf-8")
INDEX_OF_BYTE = {}
_offset = 0
for _i, _c in enumerate(CODE_POINTS):
    INDEX_OF_BYTE[_offset] = _i
    _offset += len(chr(_c).encode("utf-8"))


def hf_members(pattern):
    """Code points HF's regex engine matches with `pattern` (one character)."""
    # 'removed' drops the matches, so whatever no remaining piece covers was matched.
    pieces = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(TEXT)
    covered = bytearray(len(TEXT))
    for _, (start, end) in pieces:
        covered[start:end] = b"\x01" * (end - start)
    return {CODE_POINTS[i] for i in range(len(TEXT)) if not covered[i]}


def load_pcre2():
    lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or "libpcre2-8.so.0")
    lib.pcre2_compile_8.restype = ctypes.c_void_p
    lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                    ctypes.c_void_p]
    lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
    lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
    lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p,
                                  ctypes.c_void_p]
    lib.pcre2_get_ovector_pointer_8.restype = ctypes.POINTER(ctypes.c_size_t)
    lib.pcre2_get_ovector_pointer_8.argtypes = [ctypes.c_void_p]
    lib.pcre2_config_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
    return lib


def pcre2_members(lib, pattern):
    utf, ucp = 0x00080000, 0x00020000
    source = ("(?:%s)+" % pattern).encode()
    error, offset = ctypes.c_int(), ctypes.c_size_t()
    code = lib.pcre2_compile_8(source, len(source), utf | ucp, ctypes.byref(error),
                               ctypes.byref(offset), None)
    if not code:
        sys.exit("PCRE2 rejected %r" % pattern)
    match_data = lib.pcre2_match_data_create_8(1, None)
    members, position = set(), 0
    while lib.pcre2_match_8(code, TEXT_BYTES, len(TEXT_BYTES), position, 0, match_data, None) >= 0:
        ovector = lib.pcre2_get_ovector_pointer_8(match_data)
        start, end = ovector[0], ovector[1]
        members.update(CODE_POINTS[INDEX_OF_BYTE[start]:INDEX_OF_BYTE.get(end, len(CODE_POINTS))])
        position = end
    return members


def pcre2_unicode_version(lib):
    buffer = ctypes.create_string_buffer(64)
    lib.pcre2_config_8(10, buffer)  # PCRE2_CONFIG_UNICODE_VERSION
    return buffer.value.decode()


def to_ranges(points):
    ranges = []
    for c in sorted(points):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def format_table(name, ranges):
    lines = ["constexpr CodeRange %s[] = {" % name]
    row = ""
    for first, last in ranges:
        item = "{0x%X, 0x%X}," % (first, last)
        if len(row) + len(item) + 1 > 96:
            lines.append(row)
            row = ""
        row += ("  " if not row else " ") + item
    if row:
        lines.append(row)
    if not ranges:
        lines.append("  {0x0, 0x0},  // empty: PCRE2 already agrees")
    lines.append("};")
    return "\n".join(lines)


def main():
    lib = load_pcre2()
    tables, entries, skipped = [], [], []
    for category in CATEGORIES:
        hf = hf_members(r"\p{%s}" % category)
        pcre = pcre2_members(lib, r"\p{%s}" % category)
        if pcre - hf:
            if len(category) == 1:
                sys.exit("PCRE2 puts %d code points in \\p{%s} that HF does not (first U+%04X); "
                     "a supplement cannot remove them" % (len(pcre - hf), category,
                                                           min(pcre - hf)))
            skipped.append(category)
            print("\\p{%s}: skipped, PCRE2 has %d code points HF does not" % (category, len(pcre - hf)))
            continue
        extra = to_ranges(hf - pcre)
        tables.append(format_table("k" + category, extra))
        entries.append('    {"%s", %s},' % (category, "{k%s, %d}" % (category, len(extra))))
        print("\\p{%s}: %d extra code points in %d ranges" % (category, len(hf - pcre), len(extra)))
    # \s is small and PCRE2 disagrees in both directions (U+180E), so it is written out whole.
    whitespace = to_ranges(hf_members(r"\s"))
    tables.append(format_table("kWhitespace", whitespace))
    # Oniguruma's \w is its own mix (alphabetic, marks, decimal digits, connectors and a few
    # Latin-1 numbers) that no PCRE2 class matches, so it is spelled out whole too.
    tables.append(format_table("kWord", to_ranges(hf_members(r"\w"))))

    header = f"""// Generated by tests/tools/make_unicode_supplement.py; do not edit by hand.
// Code points that HF tokenizers {tokenizers.__version__} (Oniguruma) puts in each Unicode general
// category but PCRE2 (Unicode {pcre2_unicode_version(lib)}) does not: characters assigned in later Unicode
// versions. Pcre2Regex adds them to every \\p{{..}} so pre-tokenization splits exactly as HF's.
// Not supplemented (a character changed category, so PCRE2 keeps its own): {", ".join(skipped) or "none"}.
#include "tokenizer/unicode_supplement.h"

#include <array>
#include <utility>

namespace mlaserve {{
namespace {{

"""
    footer = """
struct Entry {
  std::string_view name;
  std::pair<const CodeRange*, size_t> ranges;
};

constexpr Entry kEntries[] = {
%s
};

}  // namespace

std::span<const CodeRange> unicode_category_supplement(std::string_view category) {
  for (const Entry& entry : kEntries) {
    if (entry.name == category) {
      // A table of one empty placeholder range means "nothing to add".
      if (entry.ranges.second == 0) return {};
      return {entry.ranges.first, entry.ranges.second};
    }
  }
  return {};
}

std::span<const CodeRange> hf_whitespace() { return {kWhitespace, std::size(kWhitespace)}; }

std::span<const CodeRange> hf_word_chars() { return {kWord, std::size(kWord)}; }

}  // namespace mlaserve
""" % "\n".join(entries)
    out = os.path.join(os.path.dirname(__file__), "..", "..", "src", "tokenizer",
                       "unicode_supplement.cc")
    with open(out, "w") as f:
        f.write(header + "\n\n".join(tables) + "\n" + footer)
    print("wrote", os.path.normpath(out))


if __name__ == "__main__":
    main()

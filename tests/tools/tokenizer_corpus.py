"""Test strings for the tokenizer: hand-written text in many scripts and generated strings aimed at
the places where an encoder can differ from HF (regex classes, whitespace runs, digit runs, added
tokens, new Unicode characters). Deterministic for a given seed. Used by make_tokenizer_fixtures.py
(the fixture strings) and by its --check mode (a large differential run against HF)."""
import random

SENTENCES = [
    # English and code-ish prose
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll agree: it's what they've done, isn't it? We'd've said so.",
    "DON'T SHOUT. Don't whisper. don't",
    "Multi-head Latent Attention compresses the KV cache to 576 values per token per layer.",
    "e-mail: someone@example.com, URL: https://github.com/deepseek-ai/DeepSeek-V3?tab=readme#L42",
    "Price: $1,234.56 (about 1.2k) — 50% off!!! Call +1-800-555-0199 before 2026-11-21T10:00:00Z.",
    "snake_case_name camelCaseName PascalCaseName kebab-case-name SCREAMING_CASE",
    "Markdown: **bold**, _italic_, `code`, [link](http://x.y), > quote\n- item\n- item 2\n1. first",
    "LaTeX: $\\frac{a}{b} + \\sum_{i=0}^{n} x_i^2 = \\int_0^1 f(x)\\,dx$",
    '{"role": "user", "content": "Hi", "n": [1, 2.5, -3e10], "ok": true, "none": null}',
    "<html><body><div class=\"a\">Text &amp; more &lt;tags&gt;</div></body></html>",
    # Chinese, Japanese, Korean
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "深度求索（DeepSeek）发布了DeepSeek-V3模型，参数量为6710亿。",
    "机器学习是人工智能的一个分支。它使用统计方法让计算机从数据中学习。",
    "こんにちは世界。今日はいい天気ですね。カタカナとひらがなと漢字を混ぜます。",
    "東京都渋谷区でラーメンを食べました！とても美味しかったです。ｶﾀｶﾅ半角もある。",
    "안녕하세요, 세계! 오늘 날씨가 정말 좋네요. 한국어 토큰화 테스트입니다.",
    "대한민국의 수도는 서울입니다. 인구는 약 950만 명입니다.",
    # Arabic, Hebrew, Persian (right to left), Hindi, Thai
    "مرحبا بالعالم! كيف حالك اليوم؟ هذا اختبار للترميز.",
    "اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ جِدًّا، ١٢٣٤٥٦٧٨٩٠",
    "שלום עולם! זהו מבחן של טוקניזציה בעברית.",
    "سلام دنیا! این یک آزمایش است. ۱۲۳۴۵",
    "नमस्ते दुनिया! यह हिंदी में एक परीक्षण वाक्य है। १२३४५",
    "สวัสดีชาวโลก นี่คือการทดสอบภาษาไทย",
    # Cyrillic, Greek, Vietnamese, European accents
    "Привет, мир! Это тест токенизации на русском языке.",
    "Γειά σου Κόσμε! Αυτό είναι ένα τεστ.",
    "Tiếng Việt có dấu: Xin chào thế giới, người Việt Nam.",
    "Größe, Straße, Übermäßig; français: où est la bibliothèque? ñandú, Ærøskøbing",
    # Emoji
    "I love it 😀😃😄😁 👍🏽👍🏿 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵🇨🇳 #️⃣ ❤️ ✔️",
    "New emoji: 🩷 🫨 🫎 🪼 🪿 🫚 🫛 🪭 🪮 🐦‍🔥 🍋‍🟩 🙂‍↔️ 🧑🏾‍🦯‍➡️",
    "Skin tones: 👋🏻👋🏼👋🏽👋🏾👋🏿 and ZWJ: 🧑‍🤝‍🧑 👩🏽‍❤️‍💋‍👨🏿",
    # Mixed
    "Mixed 中文 English 日本語 한국어 العربية 123 αβγ 😀 in one line.",
    "数字混排：2024年12月26日发布，共671B参数，激活37B。",
]

CODE = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"Hello, world!\\n\");\n\treturn 0;\n}\n",
    "class Foo:\n\tdef __init__(self, x: int) -> None:\n\t\tself.x = x  # trailing spaces   \n\n\n",
    "for (int i = 0; i < n; ++i) {\r\n    sum += a[i] * b[i];\r\n}\r\n",
    "    indented with four\n        and eight\n            and twelve spaces\n\t\tand tabs\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%smith%' ORDER BY id DESC;",
    "const f = async (x) => { await sleep(100); return x ?? null; };\n// comment\n/* block */",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "x=1;y=2;z=x+y;print(z)\n\n\n\n    \n\t\n",
    "    \n    \n  def  f ( a , b ) :  return  a+b  ",
    "if __name__ == '__main__':\n    main()\n",
    "diff --git a/x b/x\n@@ -1,3 +1,4 @@\n-old line\n+new line\n context\n",
]

SPECIAL_TOKENS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>", "<｜tool▁outputs▁end｜>", "<｜▁pad▁｜>", "<｜place▁holder▁no▁7｜>",
    "<think>", "</think>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
]

# Characters chosen for classes where regex engines disagree or pre-tokenizers branch.
SPACES = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\u00a0", "\u1680", "\u180e", "\u2000",
          "\u2007", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff",
          "\x85", "\x1c", "\x1f"]
DIGITS = list("0123456789") + ["٣", "۴", "५", "๖", "７", "²", "½", "Ⅻ", "①", "𝟗", "𑁧", "𞋱"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["，", "。", "、", "！", "？", "「", "」", "…",
                                                     "—", "«", "»", "¿", "¡", "†", "€", "£", "©",
                                                     "™", "→", "∑", "√", "≈", "♥", "♪"]
LETTERS = list("abcxyzABCXYZ") + ["é", "ß", "ø", "ж", "ω", "中", "文", "あ", "カ", "ｶ", "한", "ع",
                                  "ש", "क", "ก", "ặ", "ǅ", "ʰ", "ᛗ", "ꙮ", "𓀀", "𠀀", "𰀀", "𮯠"]
MARKS = ["\u0301", "\u0308", "\u064b", "\u093f", "\u0e31", "\u20dd", "\ufe0f", "\ufe0e",
         "\U000e0100", "\u1ab0", "\u0897"]
OTHERS = ["\x00", "\x01", "\x7f", "\x9f", "\u200c", "\u200d", "\u200e", "\u202e", "\u2060",
          "\ue000", "\U000f0000", "\U0010fffd", "\u0378", "\U0001fa77", "\U0001fae8", "\U0001f3fb",
          "\U0001f1fa", "\u1c89", "\U0002ebf0", "\U00031350", "\U00011b00", "\U0001cc00",
          "\U0010ffff", "\ufffd", "\ufffe"]
ALL_POOLS = [SPACES, DIGITS, PUNCT, LETTERS, MARKS, OTHERS, SPECIAL_TOKENS]


def random_code_point(rng):
    """Any scalar value, weighted towards the Basic Multilingual Plane."""
    while True:
        top = rng.choice([0x80, 0x800, 0x3400, 0x10000, 0x10000, 0x30000, 0x110000])
        c = rng.randrange(0, top)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def fuzz_string(rng, max_len=40):
    parts = []
    for _ in range(rng.randrange(1, max_len)):
        r = rng.random()
        if r < 0.12:
            parts.append(random_code_point(rng))
        elif r < 0.2:
            parts.append(rng.choice(SPECIAL_TOKENS) if rng.random() < 0.5 else
                         rng.choice(SPECIAL_TOKENS)[:rng.randrange(1, 6)])
        elif r < 0.3:
            parts.append(rng.choice(SPACES) * rng.randrange(1, 6))
        elif r < 0.4:
            parts.append("".join(rng.choice(DIGITS[:10]) for _ in range(rng.randrange(1, 9))))
        else:
            pool = rng.choice(ALL_POOLS[:6])
            parts.append(rng.choice(pool) * (1 if rng.random() < 0.8 else rng.randrange(2, 5)))
        if rng.random() < 0.3:
            parts.append(" ")
    return "".join(parts)


def word_salad(rng, words, n):
    return " ".join(rng.choice(words) for _ in range(n))


def structured_strings(rng):
    """The fixture's hand-made cases: every family the issue names, with variations."""
    out = ["", " ", "  ", "\n", "\t", "a", "0", "<", "<｜", "｜>"]
    out += SENTENCES + CODE
    out += [s.upper() for s in SENTENCES[:6]] + [" " + s for s in SENTENCES[:12]]
    out += [s + "\n" for s in SENTENCES[12:24]]
    # Whitespace runs of many lengths and kinds, alone and between words.
    for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 64, 100, 257]:
        out.append(" " * n)
        out.append("word" + " " * n + "word")
        out.append("\t" * (n % 17 + 1) + "x")
        out.append("a" + "\n" * (n % 9 + 1) + " " * (n % 5) + "b")
    for sp in SPACES:
        out.append("left" + sp + "right" + sp + sp + "end" + sp)
        out.append(sp * 3 + "中文" + sp + "123" + sp)
    # Digit runs: the pre-tokenizer cuts them into groups of three.
    for n in [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 20, 33, 64]:
        out.append("".join(str((i * 7 + n) % 10) for i in range(n)))
        out.append("v" + "9" * n + "x" + "1" * (n + 1))
    out += ["3.14159265358979", "1,000,000", "0x7fffffff", "1e-10", "+-*/=", "١٢٣٤٥٦٧", "１２３４５",
            "²³¹ ½¼ ⅧⅫ ①②③", "2024年1月1日", "12:30:45.678", "۱۲۳۴۵۶۷۸۹"]
    # Added tokens inside text, adjacent, repeated, split, with spaces around.
    for tok in SPECIAL_TOKENS:
        out.append("before" + tok + "after")
        out.append(" " + tok + " ")
        out.append(tok + tok + "x" + tok)
        out.append(tok[:-1] + " " + tok[1:])
    out.append("".join(SPECIAL_TOKENS))
    out.append("<｜User｜>Hello<｜Assistant｜>Hi there<｜end▁of▁sentence｜><｜User｜>再见")
    out.append("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
               "{\"city\": \"北京\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    # Each ASCII character, and each pool's characters alone and doubled.
    out += [chr(c) for c in range(1, 128)]
    for pool in ALL_POOLS[:6]:
        out += [c for c in pool]
        out.append("".join(pool))
        out.append(" ".join(pool))
    # Emoji sequences in and out of words.
    for e in ["👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "#️⃣", "🩷", "🐦‍🔥", "❤️"]:
        out += [e, "x" + e + "y", e * 3, " " + e + " " + e, "你好" + e + "123"]
    # Contractions and case.
    for w in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE"]:
        out += ["it" + w, "IT" + w + " go", w, " " + w]
    # Random mixes of the families above, short to medium.
    all_words = " ".join(SENTENCES).split()
    for i in range(120):
        out.append(fuzz_string(rng, 30 + i % 40))
    for n in [5, 20, 80]:
        for _ in range(5):
            out.append(word_salad(rng, all_words, n))
    # Long inputs.
    out.append(" ".join(SENTENCES) * 4)
    out.append("\n\n".join(CODE) * 6)
    out.append("a" * 5000)
    out.append("中" * 3000)
    out.append("1234567890" * 500)
    out.append(" " * 4000 + "x")
    out.append("😀" * 1000)
    out.append(word_salad(rng, all_words, 8000))
    return out


def fuzz_strings(seed, count):
    rng = random.Random(seed)
    return [fuzz_string(rng, rng.choice([5, 20, 60, 200])) for _ in range(count)]


def code_point_sweep(contexts=("", " ", "a", "1", "\n", "中")):
    """Every scalar value, 128 at a time, joined by each context: how each character meets its
    neighbours decides the regex splits, so this checks the Unicode tables against HF's."""
    out = []
    for start in range(0, 0x110000, 128):
        chars = [chr(c) for c in range(start, start + 128) if not 0xD800 <= c <= 0xDFFF]
        if not chars:
            continue
        for sep in contexts:
            out.append(sep.join(chars))
    return out

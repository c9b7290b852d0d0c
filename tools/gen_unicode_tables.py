#!/usr/bin/env python3
"""Writes src/genai/unicode_tables.inc: the Unicode character sets that Hugging Face tokenizers
uses, measured on the installed `tokenizers` package (.venv/bin/python tools/gen_unicode_tables.py).

Why measured: the reference takes its character data from several places, each of its own
Unicode version. Its regexes (Oniguruma) know Unicode 16.0; BERT's normalizer and
pre-tokenizer ask the unicode_categories crate (Unicode 8.0) what punctuation, controls and
non-spacing marks are; StripAccents asks unicode-normalization's is_combining_mark. PCRE2 and
utf8proc on Debian 12 know Unicode 14.0 and 15.0. Asking the reference itself, one code point
at a time, gives exactly its sets, so onyx answers as it does for every code point.

Tables written (ranges of code points, sorted):
  kRegexLetterExtra, kRegexNumberExtra  \\p{L} / \\p{N} members that this Python's unicodedata
                                        (the Unicode version of PCRE2 10.42: 14.0) lacks;
                                        onyx adds them to \\p{L} and \\p{N} in every regex
  kBertPunctuation                      BertPreTokenizer / Punctuation: what counts as punctuation
  kBertRemoved                          BertNormalizer(clean_text): what is dropped (controls, ...)
  kBertNonspacingMark                   BertNormalizer(strip_accents): marks dropped after NFD
  kCombiningMark                        StripAccents: marks dropped
  kWordChar                             Rust regex \\w (Whitespace pre-tokenizer, single_word tokens)
  kNormalizationBarrier                 code points whose NFC/NFD/NFKC/NFKD behaviour in the
                                        reference (older tables) differs from utf8proc's: onyx
                                        normalizes around them and keeps them as they are
  kLowercase                            code points whose lowercase differs from utf8proc's
"""
import ctypes
import sys
import unicodedata
from pathlib import Path

from tokenizers import Regex, normalizers, pre_tokenizers

OUT = Path(__file__).resolve().parents[1] / "src" / "genai" / "unicode_tables.inc"
ALL = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
CHUNK = 0x4000


def chunks():
    for i in range(0, len(ALL), CHUNK):
        yield ALL[i:i + CHUNK]


def removed_by_pre_tokenizer(pre):
    """Code points that a pre-tokenizer with behavior 'removed' drops."""
    out = set()
    for cps in chunks():
        s = "".join(map(chr, cps))
        kept = [False] * len(cps)
        for _, (b, e) in pre.pre_tokenize_str(s):
            for k in range(b, e):
                kept[k] = True
        out.update(c for c, k in zip(cps, kept) if not k)
    return out


def removed_by_normalizer(norm, only=None):
    """Code points that a normalizer drops, each tried between two 'a's."""
    out = set()
    for cps in chunks():
        cps = [c for c in cps if c != ord("a") and (only is None or only(c))]
        s = "a" + "a".join(map(chr, cps)) + "a"
        parts = norm.normalize_str(s).split("a")[1:-1]
        assert len(parts) == len(cps), "a normalizer output held an 'a' of its own"
        out.update(c for c, p in zip(cps, parts) if p == "")
    return out


def utf8proc():
    lib = ctypes.CDLL("libutf8proc.so.2")
    libc = ctypes.CDLL("libc.so.6")
    libc.free.argtypes = [ctypes.c_void_p]
    forms = {}
    for name in ("NFC", "NFD", "NFKC", "NFKD"):
        fn = getattr(lib, "utf8proc_" + name)
        fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_char_p]

        def run(text, fn=fn):
            ptr = fn(text.encode())
            out = ctypes.string_at(ptr).decode()
            libc.free(ptr)
            return out
        forms[name] = run
    lib.utf8proc_tolower.restype, lib.utf8proc_tolower.argtypes = ctypes.c_int32, [ctypes.c_int32]
    return forms, lib.utf8proc_tolower


def normalization_barriers(assigned, forms):
    """Code points that some probe shows the reference normalizing unlike utf8proc."""
    probes = [lambda c: c, lambda c: "a" + c, lambda c: c + "\u0301", lambda c: "a" + c + "\u0334",
              lambda c: "a\u0301" + c, lambda c: "a\u093c" + c, lambda c: "\u1100" + c, lambda c: c + "\u0345"]
    out = set()
    for name, ours in forms.items():
        ref = getattr(normalizers, name)()
        for probe in probes:
            for i in range(0, len(assigned), CHUNK):
                cps = assigned[i:i + CHUNK]
                text = "\x01".join(probe(chr(c)) for c in cps)  # U+0001: nothing maps to it or composes with it
                a, b = ref.normalize_str(text).split("\x01"), ours(text).split("\x01")
                assert len(a) == len(b) == len(cps)
                out.update(c for c, x, y in zip(cps, a, b) if x != y)
    return out


def lowercase_exceptions(tolower):
    ref = normalizers.Lowercase()
    cps = [c for c in ALL if c not in (0, ord("|"))]
    got = ref.normalize_str("|".join(map(chr, cps))).split("|")
    assert len(got) == len(cps)
    return {c: low for c, low in zip(cps, got) if low != chr(tolower(c))}


def word_chars():
    """Code points that Rust's regex \\w matches: after "a", the Whitespace pre-tokenizer
    (\\w+|[^\\w\\s]+) keeps them in the same piece."""
    pre = pre_tokenizers.Whitespace()
    out = set()
    for cps in chunks():
        for c in cps:
            pieces = pre.pre_tokenize_str("a" + chr(c))
            if len(pieces) == 1 and pieces[0][0] == "a" + chr(c):
                out.add(c)
    return out


def ranges(points):
    rs = []
    for c in sorted(points):
        if rs and c == rs[-1][1] + 1:
            rs[-1][1] = c
        else:
            rs.append([c, c])
    return rs


def main():
    letters = removed_by_pre_tokenizer(pre_tokenizers.Split(Regex(r"\p{L}"), behavior="removed"))
    numbers = removed_by_pre_tokenizer(pre_tokenizers.Split(Regex(r"\p{N}"), behavior="removed"))
    base_l = {c for c in ALL if unicodedata.category(chr(c)).startswith("L")}
    base_n = {c for c in ALL if unicodedata.category(chr(c)).startswith("N")}
    assert base_l <= letters and base_n <= numbers, "the reference's regex lost letters or numbers"
    nfd_stable = lambda c: unicodedata.normalize("NFD", chr(c)) == chr(c)  # noqa: E731
    tables = {
        "kRegexLetterExtra": letters - base_l,
        "kRegexNumberExtra": numbers - base_n,
        "kBertPunctuation": removed_by_pre_tokenizer(pre_tokenizers.Punctuation(behavior="removed")),
        "kBertRemoved": removed_by_normalizer(normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)),
        # Only characters that NFD leaves alone reach the mark filter.
        "kBertNonspacingMark": removed_by_normalizer(normalizers.BertNormalizer(
            clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False), only=nfd_stable),
        "kCombiningMark": removed_by_normalizer(normalizers.StripAccents()),
        "kWordChar": word_chars(),
    }
    forms, tolower = utf8proc()
    # Unassigned code points (to utf8proc and the reference alike) have no normalization.
    assigned = [c for c in ALL if c > 1 and forms["NFD"](chr(c)) and unicodedata.category(chr(c)) != "Cn"
                or 0x30000 <= c < 0x323B0 or 0x2EBF0 <= c < 0x2EE60 or 0x10D40 <= c < 0x10D90]
    tables["kNormalizationBarrier"] = normalization_barriers(assigned, forms)
    lower = lowercase_exceptions(tolower)
    import tokenizers
    with open(OUT, "w") as f:
        f.write(f"// Generated by tools/gen_unicode_tables.py from tokenizers {tokenizers.__version__} "
                f"(Python unicodedata {unicodedata.unidata_version}); do not edit.\n")
        for name, points in tables.items():
            rs = ranges(points)
            f.write(f"\nconstexpr CodeRange {name}[] = {{\n")
            for i in range(0, len(rs), 6):
                f.write("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 6]) + "\n")
            f.write("};\n")
            print(f"{name}: {len(points)} code points, {len(rs)} ranges", file=sys.stderr)
        f.write("\n// Lowercase where the reference (Rust's char::to_lowercase) and utf8proc disagree.\n")
        f.write("constexpr LowercaseException kLowercase[] = {\n")
        for c, low in sorted(lower.items()):
            f.write(f"    {{0x{c:X}, \"" + "".join(f"\\x{b:02X}" for b in low.encode()) + "\"},\n")
        f.write("};\n")
        print(f"kLowercase: {len(lower)} code points", file=sys.stderr)


if __name__ == "__main__":
    main()

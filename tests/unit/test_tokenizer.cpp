// The tokenizer's pieces: byte mapping, streaming decode, byte fallback, added tokens,
// WordPiece limits, and the errors a malformed tokenizer.json gets.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "genai/byte_level.h"
#include "genai/regex.h"
#include "genai/token_stream.h"
#include "genai/tokenizer.h"
#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai {
namespace {

using Ids = std::vector<int32_t>;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A byte-level BPE with the 256 byte characters as its vocabulary (ids 0..255 in byte
// order), plus the merges given.
std::string byte_level_json(const std::vector<std::pair<std::string, std::string>>& merges = {},
                            const std::string& added = "[]") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_to_char(static_cast<unsigned char>(b)));
    vocab += cat(b ? "," : "", json_string(ch), ":", b);
  }
  int next = 256;
  std::string merge_list;
  for (const auto& [a, b] : merges) {
    vocab += "," + json_string(a + b) + ":" + std::to_string(next++);
    merge_list += (merge_list.empty() ? "" : ",") + json_string(a + " " + b);
  }
  return R"({"added_tokens":)" + added +
         R"(,"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
           "post_processor":null,"decoder":{"type":"ByteLevel"},
           "model":{"type":"BPE","vocab":{)" + vocab + R"(},"merges":[)" + merge_list + "]}}";
}

// A SentencePiece-style BPE: <unk> <s> </s>, the 256 <0xNN> tokens (ids 3..258), ▁ a b ▁a ab.
std::string sentencepiece_json() {
  std::string vocab = R"("<unk>":0,"<s>":1,"</s>":2)";
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab += cat(",\"", name, "\":", 3 + b);
  }
  vocab += R"(,"▁":259,"a":260,"b":261,"▁a":262,"ab":263)";
  return R"({"added_tokens":[{"id":0,"content":"<unk>","special":true,"normalized":false},
             {"id":1,"content":"<s>","special":true,"normalized":false},
             {"id":2,"content":"</s>","special":true,"normalized":false}],
    "normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
                  {"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
    "pre_tokenizer":null,
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
        {"Sequence":{"id":"A","type_id":0}}],"pair":[],
        "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
    "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
        {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
    "model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":true,
             "vocab":{)" + vocab + R"(},"merges":[["▁","a"],["a","b"]]}})";
}

std::string stream_all(const Tokenizer& tok, const Ids& ids, std::vector<std::string>* chunks = nullptr) {
  TokenStream s = tok.stream();
  std::string out;
  for (int32_t id : ids) {
    std::string c = s.step(id);
    if (chunks) chunks->push_back(c);
    out += c;
  }
  return out + s.finish();
}

std::string error_of(const std::string& json) {
  try {
    Tokenizer::from_json(json, "bad/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ByteLevel, EveryByteRoundTrips) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    char32_t c = byte_to_char(static_cast<unsigned char>(b));
    EXPECT_TRUE(seen.insert(c).second) << "byte " << b << " shares its character";
    auto back = char_to_byte(c);
    ASSERT_TRUE(back) << "byte " << b;
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(byte_to_char(' '), char32_t(0x120));  // the familiar Ġ
  EXPECT_EQ(byte_to_char('\n'), char32_t(0x10A));  // Ċ
  EXPECT_FALSE(char_to_byte(0x144));               // one past the table
  std::mt19937 rng(7);
  std::string bytes;
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>(rng() & 0xFF));
  auto round = chars_to_bytes(bytes_to_chars(bytes));
  ASSERT_TRUE(round);
  EXPECT_EQ(*round, bytes);
}

TEST(Regex, WhitespaceClassIncludesNextLine) {
  Regex re(R"(\s+)");
  std::vector<Span> m;
  re.find_all("a\xC2\x85" "b\xE3\x80\x80" "c", m);  // U+0085, U+3000
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], Span(1, 3));
  Regex neg(R"([^\s\p{L}]+)");
  neg.find_all("x\xC2\x85y", m);
  EXPECT_TRUE(m.empty());
}

TEST(Unicode, AnswersAsTheReferenceTablesDo) {
  // The reference's regexes know Unicode 16.0: U+10D4A (Garay, new in 16.0) is a letter.
  Regex letters(R"(\p{L}+)");
  std::vector<Span> m;
  letters.find_all("a\xF0\x90\xB5\x8A" "b", m);
  EXPECT_EQ(m, (std::vector<Span>{{0, 6}}));
  // Its normalization tables predate U+1AC2, so NFC does not reorder it before U+073B.
  EXPECT_EQ(normalize_unicode("a\xDC\xBB\xE1\xAB\x82", NormalForm::kNFC), "a\xDC\xBB\xE1\xAB\x82");
  EXPECT_EQ(normalize_unicode("e\xCC\x81", NormalForm::kNFC), "\xC3\xA9");
  EXPECT_EQ(normalize_unicode("\xEF\xAC\x81", NormalForm::kNFKC), "fi");
  // Rust lowercases U+A7CB (new in 16.0) and U+0130 (to two code points); utf8proc 2.8 does neither.
  EXPECT_EQ(to_lower("\xEA\x9F\x8B"), "\xC9\xA4");
  EXPECT_EQ(to_lower("\xC4\xB0X"), "i\xCC\x87x");
  // BERT's Unicode 8.0 tables: U+166D was punctuation then (a symbol now), U+2E43 did not exist.
  EXPECT_TRUE(is_bert_punctuation(0x166D));
  EXPECT_FALSE(is_bert_punctuation(0x2E43));
  EXPECT_TRUE(is_bert_punctuation('$'));
  EXPECT_TRUE(is_bert_removed(0x200B));
  EXPECT_FALSE(is_bert_removed('\t'));
}

TEST(TokenStream, SplitFourByteEmojiIsHeldUntilComplete) {
  Tokenizer tok = Tokenizer::from_json(byte_level_json());
  std::string text = "a\xF0\x9F\x98\x80" "b";  // a😀b
  Ids ids = tok.encode(text);
  ASSERT_EQ(ids, (Ids{'a', 0xF0, 0x9F, 0x98, 0x80, 'b'}));
  std::vector<std::string> chunks;
  EXPECT_EQ(stream_all(tok, ids, &chunks), text);
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "b"}));
  EXPECT_EQ(tok.decode(ids), text);
  // Cut short, what is held comes out as decode shows it.
  TokenStream s = tok.stream();
  EXPECT_EQ(s.step(0xF0), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
}

TEST(Bpe, MergesApplyByRank) {
  // "ab" merges before "bc" (lower rank), so "abc" is [ab][c], never [a][bc].
  Tokenizer tok = Tokenizer::from_json(byte_level_json({{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  EXPECT_EQ(tok.encode("abc"), (Ids{258}));
  EXPECT_EQ(tok.encode("bc"), (Ids{257}));
  EXPECT_EQ(tok.encode("abbc"), (Ids{256, 257}));
  EXPECT_EQ(tok.decode(tok.encode(" hello world")), " hello world");
}

TEST(Bpe, ByteFallbackAndStreaming) {
  Tokenizer tok = Tokenizer::from_json(sentencepiece_json());
  // "a €": ▁a, ▁, then € (E2 82 AC) as byte tokens; <s> first.
  Ids ids = tok.encode("a \xE2\x82\xAC");
  EXPECT_EQ(ids, (Ids{1, 262, 259, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tok.decode(ids), "a \xE2\x82\xAC");
  EXPECT_EQ(tok.decode(ids, false), "<s> a \xE2\x82\xAC");  // Strip only takes a leading space
  std::vector<std::string> chunks;
  EXPECT_EQ(stream_all(tok, ids, &chunks), "a \xE2\x82\xAC");
  // A byte run is held until the token after it: one more byte could still spoil it.
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "a", " ", "", "", ""}));
  TokenStream s = tok.stream();
  for (int32_t id : ids) s.step(id);
  EXPECT_EQ(s.step(262), "\xE2\x82\xAC a");
  // "z" alone would be text, but <0x7A><0x90> is not UTF-8: the reference shows both as U+FFFD.
  Ids spoiled{262, 3 + 'z', 3 + 0x90};
  EXPECT_EQ(tok.decode(spoiled), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(stream_all(tok, spoiled), tok.decode(spoiled));
  // An invalid byte run decodes to one U+FFFD per byte.
  EXPECT_EQ(tok.decode(Ids{3 + 0xE2, 3 + 0x82, 260}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.encode("ab", false), (Ids{262, 261}));
}

TEST(AddedTokens, StripAndSingleWord) {
  std::string added = R"([{"id":300,"content":"<L>","lstrip":true,"special":true,"normalized":false},
                          {"id":301,"content":"<R>","rstrip":true,"special":false,"normalized":false},
                          {"id":302,"content":"cat","single_word":true,"normalized":false}])";
  Tokenizer tok = Tokenizer::from_json(byte_level_json({}, added));
  // The reference numbers added tokens from the vocabulary's size: 256, 257, 258.
  EXPECT_EQ(tok.token_to_id("<L>"), 256);
  EXPECT_EQ(tok.encode("x  <L>y"), (Ids{'x', 256, 'y'}));
  EXPECT_EQ(tok.encode("x<R>  y"), (Ids{'x', 257, 'y'}));
  EXPECT_EQ(tok.encode("a cat"), (Ids{'a', ' ', 258}));  // the vocabulary's ids are the byte values
  EXPECT_EQ(tok.encode("concat").size(), 6u);  // inside a word: not the added token
  EXPECT_TRUE(tok.is_special(256));
  EXPECT_FALSE(tok.is_special(257));
  EXPECT_EQ(tok.decode(tok.encode("x <L> y")), "x y");  // lstrip took the space before <L>
  EXPECT_EQ(tok.decode(tok.encode("x <L> y"), false), "x<L> y");
}

TEST(WordPiece, LongWordsAndUnknownRestsAreUnk) {
  std::string json = R"({"added_tokens":[{"id":2,"content":"[CLS]","special":true,"normalized":false},
      {"id":3,"content":"[SEP]","special":true,"normalized":false}],
    "normalizer":{"type":"BertNormalizer","lowercase":true},"pre_tokenizer":{"type":"BertPreTokenizer"},
    "decoder":{"type":"WordPiece","prefix":"##"},
    "post_processor":{"type":"BertProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]},
    "model":{"type":"WordPiece","unk_token":"[UNK]","max_input_chars_per_word":5,
      "vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"un":4,"##aff":5,"##able":6,"a":7,".":8}}})";
  Tokenizer tok = Tokenizer::from_json(json);
  EXPECT_EQ(tok.encode("Un.aff"), (Ids{2, 4, 8, 1, 3}));   // "aff" alone is no word start
  EXPECT_EQ(tok.encode("unaff", false), (Ids{4, 5}));
  EXPECT_EQ(tok.encode("unaffable", false), (Ids{1}));    // 9 characters > 5
  EXPECT_EQ(tok.encode("Ünäff", false), (Ids{4, 5}));       // accents stripped, lowercased
  EXPECT_EQ(tok.decode(Ids{2, 4, 5, 8, 7, 3}), "unaff. a");
}

TEST(Metaspace, FirstSchemePrependsOnlyWhereTheInputStarts) {
  // As in the reference: after <s>, or where a normalizer removed the first characters, the
  // piece does not start the input and gets no ▁.
  std::string json = R"({"added_tokens":[{"id":4,"content":"<s>","special":true,"normalized":false}],
    "normalizer":{"type":"Strip","strip_left":true,"strip_right":true},
    "pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},
    "model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"▁hello":1,"hello":2,"▁":3,"<s>":4}}})";
  Tokenizer tok = Tokenizer::from_json(json);
  EXPECT_EQ(tok.encode("hello"), (Ids{1}));
  EXPECT_EQ(tok.encode("  hello"), (Ids{2}));
  EXPECT_EQ(tok.encode("<s>hello"), (Ids{4, 2}));
  EXPECT_EQ(tok.encode("hello<s>hello"), (Ids{1, 4, 2}));
}

TEST(Tokenizer, SharedAcrossThreads) {
  Tokenizer tok = Tokenizer::from_json(byte_level_json({{"a", "b"}, {"ab", "c"}, {"Ġ", "a"}}));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(cat("abc ", i, " abab \xF0\x9F\x98\x80 ", std::string(i % 7, 'c')));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok.encode(texts[(i + k * 31) % texts.size()]) != expected[(i + k * 31) % texts.size()]) ++wrong[k];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, (std::vector<int>{0, 0, 0, 0}));
}

TEST(Tokenizer, FolderReadsSpecialTokenIdsFromItsConfig) {
  auto dir = std::filesystem::temp_directory_path() / "onyx_tokenizer_folder";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << sentencepiece_json();
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null})";
  Tokenizer tok = Tokenizer::from_file(dir.string());
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.pad_id());
  EXPECT_EQ(tok.vocab_size(), 264u);
  EXPECT_EQ(tok.id_to_token(262), "▁a");
  EXPECT_EQ(tok.token_to_id("<0x41>"), 3 + 0x41);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerErrors, NameTheFileAndTheJsonPath) {
  std::string e = error_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b", 7]}})");
  EXPECT_NE(e.find("bad/tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("/model/merges/1"), std::string::npos) << e;

  e = error_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}})");
  EXPECT_NE(e.find("merged token \"ab\" is not in the vocabulary"), std::string::npos) << e;

  e = error_of(R"({"normalizer":{"type":"Precompiled","precompiled_charsmap":""},"model":{"type":"BPE","vocab":{},"merges":[]}})");
  EXPECT_NE(e.find("/normalizer"), std::string::npos) << e;
  EXPECT_NE(e.find("Precompiled"), std::string::npos) << e;

  e = error_of(R"({"model":{"type":"Unigram","vocab":[]}})");
  EXPECT_NE(e.find("Unigram"), std::string::npos) << e;

  e = error_of(R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"},
                  "model":{"type":"WordLevel","vocab":{"a":0}}})");
  EXPECT_NE(e.find("/pre_tokenizer/pattern"), std::string::npos) << e;
  EXPECT_NE(e.find("does not compile"), std::string::npos) << e;

  e = error_of(R"({"model":{"type":"WordPiece","vocab":{"a":"zero"}}})");
  EXPECT_NE(e.find("/model/vocab/a: expected an integer"), std::string::npos) << e;

  EXPECT_NE(error_of(R"({"normalizer":null})").find("missing member \"model\""), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);

  auto path = std::filesystem::temp_directory_path() / "onyx_bad_tokenizer.json";
  std::ofstream(path) << R"({"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}})";
  try {
    Tokenizer::from_file(path.string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& err) {
    std::string what = err.what();
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
    EXPECT_NE(what.find("/model/vocab/a"), std::string::npos) << what;
  }
  std::filesystem::remove(path);
  EXPECT_THROW(Tokenizer::from_file("/no/such/tokenizer.json"), Error);
}

TEST(TokenizerErrors, InvalidUtf8TextIsAnError) {
  Tokenizer tok = Tokenizer::from_json(byte_level_json());
  EXPECT_THROW(tok.encode("ok \xC3"), Error);
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), Error);  // a surrogate
}

}  // namespace
}  // namespace onyx::genai

// Generation with OpenAI's presence and frequency penalties on the tiny Llama fixture
// (tests/fixtures/genai/llama-optimum, on the CPU): each greedy token is the argmax of the
// decoder's logits at that step (read back teacher forced, before any processing) less the
// penalties of the tokens generated before it, the prompt's not counted; a batch of prompts of
// different lengths gives each its tokens alone; a large frequency penalty ends the repeats a
// plain greedy generation has.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "genai/generator.h"
#include "genai/language_model.h"

namespace onyx::genai {
namespace {

std::string fixture() {
  return (std::filesystem::path(ONYX_SOURCE_DIR) / "tests/fixtures/genai/llama-optimum").string();
}

// The decoder's logits before each of `tokens` (teacher forced from `prompt`), [steps][vocab].
std::vector<std::vector<double>> logits_along(LanguageModel& lm, const std::vector<int64_t>& prompt,
                                              const std::vector<int64_t>& tokens) {
  Draw d;
  d.options = {draw_options(SearchOptions{})};
  d.seeds = {0};
  d.logits = true;
  std::vector<std::vector<double>> out;
  Next next = lm.start({prompt}, static_cast<int64_t>(prompt.size() + tokens.size()), d);
  for (size_t t = 0;; ++t) {
    out.emplace_back(next.logits.data<float>(), next.logits.data<float>() + next.logits.numel());
    if (t + 1 == tokens.size()) break;
    d.counter = static_cast<int64_t>(t + 1);
    next = lm.step({tokens[t]}, d);
  }
  return out;
}

// The argmax of `logits` less frequency * count + presence for each id counted in `seen`.
int64_t penalized_argmax(std::vector<double> logits, const std::vector<int64_t>& seen, double presence,
                         double frequency) {
  std::map<int64_t, int64_t> count;
  for (int64_t id : seen) ++count[id];
  for (auto [id, c] : count) logits[id] -= frequency * double(c) + presence;
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

SearchOptions greedy(int64_t new_tokens, double presence, double frequency) {
  SearchOptions s;
  s.max_new_tokens = new_tokens;
  s.presence_penalty = presence;
  s.frequency_penalty = frequency;
  return s;
}

TEST(GeneratePenalties, GreedyTokensAreTheArgmaxLessThePenaltiesOfGeneratedTokens) {
  ASSERT_TRUE(std::filesystem::exists(fixture())) << fixture();
  SessionOptions opt;
  LanguageModel lm(fixture(), opt);
  const double presence = 0.6, frequency = 0.9;
  int64_t prompt_mattered = 0;
  for (const char* text : {"the quick brown fox", "once upon a time there was", "1 2 3 4 5 6 7 8"}) {
    SCOPED_TRACE(text);
    std::vector<int32_t> ids = lm.tokenizer().encode(text);
    std::vector<int64_t> prompt(ids.begin(), ids.end());
    // Prompts that hold the tokens a plain greedy generation makes, so that counting the prompt
    // would change tokens.
    const std::vector<int64_t> plain = Generator(lm).generate({prompt}, greedy(12, 0, 0))[0].generated_ids;
    prompt.insert(prompt.end(), plain.begin(), plain.end());
    const std::vector<int64_t> got = Generator(lm).generate({prompt}, greedy(32, presence, frequency))[0].generated_ids;
    ASSERT_GE(got.size(), 4u);
    const std::vector<std::vector<double>> logits = logits_along(lm, prompt, got);
    for (size_t t = 0; t < got.size(); ++t) {
      const std::vector<int64_t> before(got.begin(), got.begin() + t);
      ASSERT_EQ(got[t], penalized_argmax(logits[t], before, presence, frequency)) << "step " << t;
      std::vector<int64_t> with_prompt = prompt;
      with_prompt.insert(with_prompt.end(), before.begin(), before.end());
      prompt_mattered += penalized_argmax(logits[t], with_prompt, presence, frequency) != got[t];
    }
  }
  EXPECT_GT(prompt_mattered, 0) << "no step where counting the prompt would choose another token: the test "
                                   "cannot tell the prompt from the generated tokens";
}

TEST(GeneratePenalties, BatchGivesEachPromptItsTokensAlone) {
  SessionOptions opt;
  LanguageModel lm(fixture(), opt);
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 17, 17, 40}, {1021, 300}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 300}};
  for (const SearchOptions& s : {greedy(20, 1.2, 0.4), greedy(20, 0, 1.5), [] {
         SearchOptions t = greedy(20, 0.5, 1.0);
         t.do_sample = true;
         t.temperature = 0.9;
         t.top_k = 30;
         t.repetition_penalty = 1.3;
         t.seed = 11;
         return t;
       }()}) {
    const std::vector<SequenceResult> batch = Generator(lm).generate(prompts, s);
    for (size_t b = 0; b < prompts.size(); ++b) {
      // A sequence's draws use the seed of its index in the batch: the prompt at that index of a
      // batch of copies of it (of one prompt length) draws the same numbers.
      const std::vector<SequenceResult> one =
          Generator(lm).generate(std::vector<std::vector<int64_t>>(b + 1, prompts[b]), s);
      EXPECT_EQ(batch[b].generated_ids, one[b].generated_ids) << "row " << b;
    }
  }
}

TEST(GeneratePenalties, LargeFrequencyPenaltyEndsRepeats) {
  SessionOptions opt;
  LanguageModel lm(fixture(), opt);
  std::vector<int32_t> ids = lm.tokenizer().encode("the quick brown fox");
  const std::vector<int64_t> prompt(ids.begin(), ids.end());
  auto repeats = [](const std::vector<int64_t>& g) { return g.size() - std::set<int64_t>(g.begin(), g.end()).size(); };
  const std::vector<int64_t> plain = Generator(lm).generate({prompt}, greedy(60, 0, 0))[0].generated_ids;
  EXPECT_GT(repeats(plain), 0u) << "the plain greedy generation repeats no token: the test shows nothing";
  const std::vector<int64_t> penalized = Generator(lm).generate({prompt}, greedy(60, 0, 2))[0].generated_ids;
  EXPECT_EQ(repeats(penalized), 0u);
  EXPECT_GT(penalized.size(), 20u);
}

}  // namespace
}  // namespace onyx::genai

// GPT-2's BPE from a tiktoken ranks file, against tiktoken itself: tests/data/bpe/cases.json holds
// texts (ASCII, accents, CJK, Greek, emoji, digits of other scripts, every kind of white space),
// the pieces Python's regex module splits them into with tiktoken's r50k pattern, and the ids
// tiktoken 0.14.0 encodes them to with the first 2,048 GPT-2 ranks (tests/data/bpe/README.md).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/data/bpe_tokenizer.h"
#include "core/data/token_source.h"
#include "tests/support/input_error.h"
#include "tests/support/temp_dir.h"

using namespace fullshard;
using fullshard::testing::input_error_of;

namespace {

const std::string kDir = std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/bpe/";

nlohmann::json cases() {
  std::ifstream in(kDir + "cases.json");
  return nlohmann::json::parse(in).at("cases");
}

}  // namespace

TEST(Gpt2PreTokenizer, SplitsAsTiktokensPattern) {
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    std::vector<std::string> got;
    for (auto p : split_gpt2(text, "t")) got.emplace_back(p);
    EXPECT_EQ(got, c.at("pieces").get<std::vector<std::string>>()) << nlohmann::json(text).dump();
  }
}

TEST(BpeTokenizer, EncodesAsTiktoken) {
  const BpeTokenizer t =
      BpeTokenizer::from_tiktoken_file(kDir + "gpt2-first2048.tiktoken", "--tokenizer");
  EXPECT_EQ(t.special("<|endoftext|>"), 2048u);
  EXPECT_EQ(t.vocab_size(), 2049);
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(t.encode(text, "t"), c.at("ids").get<std::vector<uint32_t>>())
        << nlohmann::json(text).dump().substr(0, 80);
  }
}

TEST(BpeTokenizer, JsonlDocumentsStartWithEndOfText) {
  fullshard::testing::TempDir d;
  std::ofstream(d.file("a.jsonl")) << "{\"text\": \"Hello\"}\n{\"text\": \"a\"}\n";
  const TextTokenizer tok = make_text_tokenizer(kDir + "gpt2-first2048.tiktoken", "--tokenizer");
  auto src = open_token_source(d.file("a.jsonl"), DataFormat::kAuto, "training.data", &tok);
  std::vector<int64_t> ids(static_cast<size_t>(src->size()));
  src->read(0, src->size(), ids.data());
  std::vector<uint32_t> want = {2048};
  for (uint32_t x : tok.encode("Hello", "t")) want.push_back(x);
  want.push_back(2048);
  want.push_back(64);  // "a": GPT-2's byte ranks start at '!' = 0
  EXPECT_EQ(std::vector<uint32_t>(ids.begin(), ids.end()), want);
}

TEST(BpeTokenizer, BadFilesAndTextAreOneLineErrors) {
  fullshard::testing::TempDir d;
  std::ofstream(d.file("bad.tiktoken")) << "IQ== 0\nnot-base64! 1\n";
  EXPECT_NE(input_error_of([&] {
              BpeTokenizer::from_tiktoken_file(d.file("bad.tiktoken"), "--tokenizer");
            }).find("bad.tiktoken' line 2 is not \"base64-token rank\""),
            std::string::npos);
  std::ofstream(d.file("few.tiktoken")) << "IQ== 0\n";
  EXPECT_NE(input_error_of([&] {
              BpeTokenizer::from_tiktoken_file(d.file("few.tiktoken"), "--tokenizer");
            }).find("has no token for byte 0"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              split_gpt2("ok \xff", "'x.txt'");
            }).find("'x.txt': is not UTF-8 at byte 3"),
            std::string::npos);
}

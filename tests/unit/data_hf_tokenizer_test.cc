// Hugging Face tokenizer.json and Llama 3's pre-tokenizer against tokenizers and tiktoken
// themselves: tests/data/bpe/hf_cases.json holds texts (several scripts, emoji with joiners and
// flags, digit runs, contractions in any case, line breaks, runs of white space, special tokens
// spelled in text), the pieces Python's regex module splits them into with Llama 3's pattern,
// and the ids tokenizers / tiktoken encode them to (make_hf_cases.py, tests/data/bpe/README.md).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/data/bpe_tokenizer.h"
#include "core/data/hf_tokenizer.h"
#include "core/data/token_source.h"
#include "tests/support/input_error.h"
#include "tests/support/temp_dir.h"

using namespace fullshard;
using fullshard::testing::input_error_of;

namespace {

const std::string kDir = std::string(FULLSHARD_SOURCE_DIR) + "/tests/data/bpe/";

nlohmann::json cases() {
  std::ifstream in(kDir + "hf_cases.json");
  return nlohmann::json::parse(in).at("cases");
}

std::string shown(const std::string& text) { return nlohmann::json(text).dump().substr(0, 80); }

nlohmann::json tiny_json() {
  std::ifstream in(kDir + "llama3-style-tiny.tokenizer.json");
  return nlohmann::json::parse(in);
}

// The InputError `bpe_from_tokenizer_json` gives for the tiny tokenizer.json edited by `edit`.
std::string error_for_edit(const std::function<void(nlohmann::json&)>& edit) {
  fullshard::testing::TempDir d;
  nlohmann::json j = tiny_json();
  edit(j);
  std::ofstream(d.file("t.json")) << j.dump();
  return input_error_of([&] { bpe_from_tokenizer_json(d.file("t.json"), "--tokenizer"); });
}

DocumentTokens docs(std::optional<std::string> bos, std::optional<std::string> eos = std::nullopt) {
  DocumentTokens d;
  d.bos = std::move(bos);
  d.eos = std::move(eos);
  return d;
}

}  // namespace

TEST(Llama3PreTokenizer, SplitsAsTheRegex) {
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    std::vector<std::string> got;
    for (auto p : split_llama3(text, "t")) got.emplace_back(p);
    EXPECT_EQ(got, c.at("llama3_pieces").get<std::vector<std::string>>()) << shown(text);
  }
}

TEST(Llama3PreTokenizer, TiktokenRanksWithLlama3PatternEncodeAsTiktoken) {
  const BpeTokenizer t = BpeTokenizer::from_tiktoken_file(kDir + "gpt2-first2048.tiktoken",
                                                          "--tokenizer", PreTokenizer::kLlama3);
  EXPECT_EQ(t.special("<|begin_of_text|>"), 2048u);
  EXPECT_EQ(t.special("<|eot_id|>"), 2057u);
  EXPECT_EQ(t.vocab_size(), 2048 + 256);  // Llama 3: 256 special ids after the ranks
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(t.encode(text, "t"), c.at("llama3_tiktoken_ids").get<std::vector<uint32_t>>())
        << shown(text);
  }
}

TEST(HfTokenizerJson, Gpt2LayoutEncodesAsTokenizers) {
  const BpeTokenizer t =
      bpe_from_tokenizer_json(kDir + "gpt2-first2048.tokenizer.json", "--tokenizer");
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kGpt2);
  EXPECT_EQ(t.vocab_size(), 2049);
  EXPECT_EQ(t.document_start(), "<|endoftext|>");
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(t.encode(text, "t"), c.at("gpt2_json_ids").get<std::vector<uint32_t>>())
        << shown(text);
  }
}

TEST(HfTokenizerJson, Llama3LayoutEncodesAsTokenizers) {
  const BpeTokenizer t =
      bpe_from_tokenizer_json(kDir + "llama3-style-tiny.tokenizer.json", "--tokenizer");
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kLlama3);
  EXPECT_EQ(t.vocab_size(), 702);
  EXPECT_EQ(t.document_start(), "<|begin_of_text|>");  // from the TemplateProcessing
  EXPECT_EQ(t.special("<|end_of_text|>"), 701u);
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(t.encode(text, "t"), c.at("llama3_tiny_json_ids").get<std::vector<uint32_t>>())
        << shown(text);
  }
}

TEST(HfTokenizerJson, MergesAsStringsOrPairsGiveTheSameIds) {
  fullshard::testing::TempDir d;
  nlohmann::json j = tiny_json();
  for (auto& m : j["model"]["merges"])
    if (m.is_array())
      m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    else
      m = nlohmann::json::array({m.get<std::string>().substr(0, m.get<std::string>().find(' ')),
                                 m.get<std::string>().substr(m.get<std::string>().find(' ') + 1)});
  std::ofstream(d.file("t.json")) << j.dump();
  const BpeTokenizer a = bpe_from_tokenizer_json(kDir + "llama3-style-tiny.tokenizer.json", "t");
  const BpeTokenizer b = bpe_from_tokenizer_json(d.file("t.json"), "t");
  const std::string text = cases().at(0).at("text");
  EXPECT_EQ(a.encode(text, "t"), b.encode(text, "t"));
}

TEST(HfTokenizerJson, JsonlDocumentsGetTheTokenizersDocumentTokens) {
  fullshard::testing::TempDir d;
  std::ofstream(d.file("a.jsonl")) << "{\"text\": \"Hello\"}\n{\"text\": \"a b\"}\n";
  auto ids_of = [&](const DocumentTokens& doc) {
    const TextTokenizer tok =
        make_text_tokenizer(kDir + "llama3-style-tiny.tokenizer.json", "--tokenizer", doc);
    auto src = open_token_source(d.file("a.jsonl"), DataFormat::kAuto, "training.data", &tok);
    std::vector<int64_t> ids(static_cast<size_t>(src->size()));
    src->read(0, src->size(), ids.data());
    return std::vector<uint32_t>(ids.begin(), ids.end());
  };
  const BpeTokenizer t = bpe_from_tokenizer_json(kDir + "llama3-style-tiny.tokenizer.json", "t");
  auto cat = [](std::initializer_list<std::vector<uint32_t>> parts) {
    std::vector<uint32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const auto hello = t.encode("Hello", "t"), ab = t.encode("a b", "t"), nl = t.encode("\n", "t");
  EXPECT_EQ(ids_of({}), cat({{700}, hello, {700}, ab}));  // <|begin_of_text|> before each (llm.c)
  EXPECT_EQ(ids_of(docs("<|begin_of_text|>", "<|end_of_text|>")),
            cat({{700}, hello, {701}, {700}, ab, {701}}));
  EXPECT_EQ(ids_of(docs("", "<|end_of_text|>")), cat({hello, {701}, ab, {701}}));
  EXPECT_EQ(ids_of(docs("", "")), cat({hello, nl, ab}));
  EXPECT_NE(input_error_of([&] {
              ids_of(docs("<|nope|>"));
            }).find("--bos: is '<|nope|>', not a special token of"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              make_text_tokenizer("byte", "--tokenizer", docs(std::nullopt, "<|end_of_text|>"));
            }).find("--eos"),
            std::string::npos);
}

TEST(HfTokenizerJson, TiktokenFileAndTokenizerJsonByExtension) {
  const TextTokenizer a =
      make_text_tokenizer(kDir + "gpt2-first2048.tokenizer.json", "--tokenizer");
  const TextTokenizer b = make_text_tokenizer(kDir + "gpt2-first2048.tiktoken", "--tokenizer");
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.bos, b.bos);
  for (const auto& c : cases()) {
    const std::string text = c.at("text");
    EXPECT_EQ(a.encode(text, "t"), b.encode(text, "t")) << shown(text);
  }
}

TEST(HfTokenizerJson, UnsupportedModelsAndPartsAreOneLineErrorsNamingTheField) {
  auto has = [](const std::string& err, const std::string& want) {
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  };
  has(error_for_edit([](auto& j) {
        j["model"] = {{"type", "WordPiece"}, {"vocab", nlohmann::json::object()}};
      }),
      "model.type is 'WordPiece'");
  has(error_for_edit([](auto& j) {
        j["model"] = {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}};
      }),
      "model.type is 'Unigram'");
  has(error_for_edit([](auto& j) { j["model"]["byte_fallback"] = true; }),
      "model.byte_fallback is true");
  has(error_for_edit([](auto& j) { j["model"]["dropout"] = 0.1; }), "model.dropout is 0.1");
  has(error_for_edit([](auto& j) {
        j["normalizer"] = {{"type", "NFC"}};
      }),
      "normalizer is {\"type\":\"NFC\"}");
  has(error_for_edit([](auto& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}};
      }),
      "pre_tokenizer is {\"type\":\"Metaspace\"}");
  has(error_for_edit(
          [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; }),
      "pre_tokenizer.pretokenizers[0].pattern is");
  has(error_for_edit(
          [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }),
      "pre_tokenizer.pretokenizers[1].add_prefix_space is true");
  has(error_for_edit([](auto& j) { j["added_tokens"][1]["special"] = false; }),
      "added_tokens[1].special is false");
  has(error_for_edit([](auto& j) { j["model"]["merges"][3] = "zz qq"; }),
      "model.merges[3] is \"zz qq\"");
  has(error_for_edit([](auto& j) { j["model"]["vocab"].erase("!"); }),
      "model.vocab has no token for byte 33");
  has(error_for_edit([](auto& j) { j.erase("model"); }), "model is missing");
}

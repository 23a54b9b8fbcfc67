// training.data in the scenario format (docs/scenario-format.md "data"): the string and object
// forms, paths relative to the scenario's folder, and one-line errors naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/scenario.h"

using namespace fullshard;
using nlohmann::json;

namespace {

json with_data(json data) {
  json j = json::parse(
      R"({"model": "tiny-llama", "training": {"seq_len": 64}, "hardware": {"profile": "cpu"}})");
  j["training"]["data"] = std::move(data);
  return j;
}

std::string error_of(const json& j) {
  try {
    parse_scenario(j, "/base");
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ScenarioData, AbsentIsTheGeneratedCorpus) {
  const Scenario s =
      parse_scenario(json::parse(R"({"model": "tiny-llama", "training": {"seq_len": 64},
                                                   "hardware": {"profile": "cpu"}})"),
                     "/base");
  EXPECT_FALSE(s.training.data.given());
}

TEST(ScenarioData, StringAndObjectFormsWithPathsFromTheScenariosFolder) {
  const Scenario a = parse_scenario(with_data("data/train.bin"), "/base");
  EXPECT_EQ(a.training.data.path, "/base/data/train.bin");
  EXPECT_EQ(a.training.data.format, "auto");
  EXPECT_EQ(a.training.data.sampling, "sequential");
  EXPECT_EQ(a.training.data.tokenizer, "byte");
  const Scenario b = parse_scenario(with_data({{"path", "/abs/shards/*.bin"},
                                               {"format", "uint16"},
                                               {"val_path", "v.bin"},
                                               {"sampling", "random"},
                                               {"tokenizer", "tok/gpt2.tiktoken"}}),
                                    "/base");
  EXPECT_EQ(b.training.data.path, "/abs/shards/*.bin");
  EXPECT_EQ(b.training.data.format, "uint16");
  EXPECT_EQ(b.training.data.val_path, "/base/v.bin");
  EXPECT_EQ(b.training.data.sampling, "random");
  EXPECT_EQ(b.training.data.tokenizer, "/base/tok/gpt2.tiktoken");
}

TEST(ScenarioData, BadFieldsAreOneLineErrorsNamingThePath) {
  EXPECT_NE(
      error_of(with_data({{"path", "a.bin"}, {"format", "u16"}})).find("training.data.format"),
      std::string::npos);
  EXPECT_NE(error_of(with_data({{"format", "uint16"}})).find("training.data"), std::string::npos);
  EXPECT_NE(error_of(with_data({{"path", "a.bin"}, {"shuffle", true}})).find("shuffle"),
            std::string::npos);
  EXPECT_NE(error_of(with_data("")).find("training.data: is empty"), std::string::npos);
  EXPECT_NE(error_of(with_data(3)).find("training.data"), std::string::npos);
  EXPECT_NE(error_of(with_data({{"path", "a.bin"}, {"sampling", "shuffled"}}))
                .find("training.data.sampling"),
            std::string::npos);
}

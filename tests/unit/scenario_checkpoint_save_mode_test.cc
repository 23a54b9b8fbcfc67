// The checkpoint save mode (core/scenario/checkpoint_save_mode.h): the names round-trip, a bad
// value is the one-line error naming the field, and the scenario's training.checkpoint.mode
// reads into it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/checkpoint_save_mode.h"
#include "core/scenario/scenario.h"

namespace fullshard {
namespace {

TEST(ScenarioCheckpointSaveMode, NamesRoundTrip) {
  for (CheckpointSaveMode m : {CheckpointSaveMode::kSync, CheckpointSaveMode::kAsync}) {
    EXPECT_EQ(checkpoint_save_mode_from_name(checkpoint_save_mode_name(m)), m);
    EXPECT_EQ(parse_checkpoint_save_mode(checkpoint_save_mode_name(m), "--checkpoint-mode"), m);
  }
  EXPECT_STREQ(checkpoint_save_mode_name(CheckpointSaveMode::kSync), "sync");
  EXPECT_STREQ(checkpoint_save_mode_name(CheckpointSaveMode::kAsync), "async");
  EXPECT_EQ(checkpoint_save_mode_names(), (std::vector<std::string>{"sync", "async"}));
  for (const char* bad : {"", "Sync", "ASYNC", "later", "async "})
    EXPECT_EQ(checkpoint_save_mode_from_name(bad), std::nullopt) << bad;
}

TEST(ScenarioCheckpointSaveMode, ABadValueIsOneLineNamingTheField) {
  try {
    parse_checkpoint_save_mode("later", "--checkpoint-mode");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--checkpoint-mode: is 'later'; use sync (the default) or async");
    EXPECT_EQ(e.where(), "--checkpoint-mode");
  }
}

TEST(ScenarioCheckpointSaveMode, TheScenarioReadsItsMode) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "model": "tiny-llama",
    "training": {"seq_len": 64, "checkpoint": {"every": 2}},
    "hardware": {"profile": "cpu"}
  })");
  EXPECT_EQ(parse_scenario(j).training.checkpoint.mode, CheckpointSaveMode::kSync);
  j["training"]["checkpoint"]["mode"] = "async";
  EXPECT_EQ(parse_scenario(j).training.checkpoint.mode, CheckpointSaveMode::kAsync);
  j["training"]["checkpoint"]["mode"] = "asnyc";
  try {
    parse_scenario(j);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "training.checkpoint.mode");
    EXPECT_NE(std::string(e.what()).find("did you mean \"async\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fullshard

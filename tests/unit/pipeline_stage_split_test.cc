// NOTE [Stage split as torchtitan's] (core/pipeline/stage_split.h): every split against
// torchtitan's own (tests/data/oracle/pipeline_stage_split.json, from
// tools/oracle/pipeline_stage_split.py).
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/pipeline/stage_split.h"

namespace fullshard {
namespace {

TEST(PipelineStageSplit, EverySplitIsTorchtitans) {
  std::ifstream in(std::string(FULLSHARD_SOURCE_DIR) +
                   "/tests/data/oracle/pipeline_stage_split.json");
  ASSERT_TRUE(in) << "missing tests/data/oracle/pipeline_stage_split.json";
  const auto doc = nlohmann::json::parse(in);
  int compared = 0, refused = 0;
  for (const auto& c : doc.at("cases")) {
    const int stages = c[0], layers = c[1], iw = c[2], ow = c[3];
    const std::string want = c[4];
    if (want.starts_with("!")) {
      EXPECT_THROW(split_decoder_into_stages(stages, layers, iw, ow), InputError) << c.dump();
      ++refused;
      continue;
    }
    const auto split = split_decoder_into_stages(stages, layers, iw, ow);
    EXPECT_EQ(format_stage_split(split), want) << c.dump();
    int total = 0;
    for (const auto& s : split) total += s.num_layers;
    EXPECT_EQ(total, layers) << c.dump();
    ++compared;
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(refused, 500);
}

TEST(PipelineStageSplit, StageCountsAsTorchtitanDerivesThem) {
  using K = PipelineScheduleKind;
  EXPECT_EQ(pipeline_num_stages(K::k1F1B, 4, 32, std::nullopt, 1, 1), 4);
  EXPECT_EQ(pipeline_num_stages(K::kInterleaved1F1B, 4, 32, std::nullopt, 1, 1), 8);
  EXPECT_EQ(pipeline_num_stages(K::kZBVZeroBubble, 4, 32, std::nullopt, 1, 1), 8);
  // ceil((32 + 1 + 1) / 3) = 12 stages: 3 per rank over pp 4.
  EXPECT_EQ(pipeline_num_stages(K::kInterleaved1F1B, 4, 32, 3, 1, 1), 12);
  auto where = [](auto&& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.where();
    }
    return std::string("accepted");
  };
  // 34 / 4 -> 9 stages: not a multiple of pp 4.
  EXPECT_EQ(where([] { pipeline_num_stages(K::kInterleaved1F1B, 4, 32, 4, 1, 1); }),
            "pipeline.layers_per_stage");
  // 1F1B needs one stage per rank: 34 / 5 -> 7 stages over pp 7 is fine, over pp 1 it is not.
  EXPECT_EQ(pipeline_num_stages(K::k1F1B, 7, 32, 5, 1, 1), 7);
  EXPECT_EQ(where([] { pipeline_num_stages(K::k1F1B, 1, 32, 5, 1, 1); }),
            "pipeline.layers_per_stage");
  // A multi-stage schedule needs 2 per rank: 34 / 9 -> 4 stages over pp 4 is 1 per rank.
  EXPECT_EQ(where([] { pipeline_num_stages(K::kLoopedBFS, 4, 32, 9, 1, 1); }),
            "pipeline.layers_per_stage");
  EXPECT_EQ(where([] { split_decoder_into_stages(8, 4, 1, 1); }), "pipeline.stages");
  EXPECT_EQ(where([] { split_decoder_into_stages(4, 4, 2, 1); }),
            "pipeline.first_stage_less_layers");
}

}  // namespace
}  // namespace fullshard

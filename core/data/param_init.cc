#include "core/data/param_init.h"

#include <cmath>
#include <vector>

#include "core/common/error.h"
#include "core/common/splitmix.h"
#include "core/model/module.h"

namespace fullshard {
namespace {

// Uniform in (0, 1) from the top 53 bits.
double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

float init_value(int64_t init, double std, uint64_t key, int64_t index) {
  switch (static_cast<ParamInit>(init)) {
    case ParamInit::kZeros: return 0.0f;
    case ParamInit::kOnes: return 1.0f;
    case ParamInit::kNormal: {
      // Box-Muller on two independent uniforms drawn from (key, index).
      const uint64_t a = splitmix64(key ^ splitmix64(static_cast<uint64_t>(index) * 2));
      const uint64_t b = splitmix64(key ^ splitmix64(static_cast<uint64_t>(index) * 2 + 1));
      const double r = std::sqrt(-2.0 * std::log(unit(a)));
      return static_cast<float>(std * r * std::cos(2.0 * M_PI * unit(b)));
    }
  }
  FULLSHARD_CHECK(false, "unknown ParamInit " + std::to_string(init));
  return 0.0f;
}

std::vector<float> init_param_values(const OpCall& op) {
  FULLSHARD_CHECK(op.outputs.size() == 1 && (op.iargs.size() == 5 || op.iargs.size() == 7 || op.iargs.size() == 8) && op.fargs.size() == 1,
                  "kInitParam " + op.name + ": bad arguments");
  const TensorRef& t = op.outputs[0];
  const int64_t row_offset = op.iargs[0], local_rows = op.iargs[1], row_numel = op.iargs[2];
  const int64_t init = op.iargs[3];
  const auto key = static_cast<uint64_t>(op.iargs[4]);
  const int64_t n = t.meta.numel();
  const int64_t real = local_rows * row_numel;
  FULLSHARD_CHECK(real <= n, "kInitParam " + op.name + ": shard larger than its storage");
  std::vector<float> values(static_cast<size_t>(n), 0.0f);  // padding rows stay 0
  if (op.iargs.size() == 7) {
    // Columns [col_offset, col_offset + row_numel) of rows of full_row elements (a tensor-
    // parallel Shard(1) block).
    const int64_t col_offset = op.iargs[5], full_row = op.iargs[6];
    FULLSHARD_CHECK(col_offset >= 0 && col_offset + row_numel <= full_row, "kInitParam " + op.name + ": bad columns");
    for (int64_t r = 0; r < local_rows; ++r)
      for (int64_t c = 0; c < row_numel; ++c)
        values[r * row_numel + c] = init_value(init, op.fargs[0], key, (row_offset + r) * full_row + col_offset + c);
    return values;
  }
  if (op.iargs.size() == 8) {
    // Rows of a tensor stacked from blocks each sharded over tp (GPT-2's fused c_attn): local
    // row l is row l % block of block l / block, i.e. global row
    // (l / block) * block * tp + tp_index * block + l % block.
    const int64_t block = op.iargs[5], tp_index = op.iargs[6], tp = op.iargs[7];
    FULLSHARD_CHECK(block > 0 && tp_index >= 0 && tp_index < tp, "kInitParam " + op.name + ": bad blocks");
    for (int64_t r = 0; r < local_rows; ++r) {
      const int64_t l = row_offset + r;
      const int64_t g = (l / block) * block * tp + tp_index * block + l % block;
      for (int64_t c = 0; c < row_numel; ++c)
        values[r * row_numel + c] = init_value(init, op.fargs[0], key, g * row_numel + c);
    }
    return values;
  }
  const int64_t first = row_offset * row_numel;
  for (int64_t i = 0; i < real; ++i) values[i] = init_value(init, op.fargs[0], key, first + i);
  return values;
}

}  // namespace fullshard

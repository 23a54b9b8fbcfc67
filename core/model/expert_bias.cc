#include "core/model/expert_bias.h"

#include "core/common/error.h"
#include "core/model/op_util.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/moe_args.h"

namespace fullshard {

void add_expert_bias_buffers(Module& moe, const MoeConfig& m) {
  if (m.load_balance != MoeLoadBalance::kExpertBias) return;
  const TensorMeta meta{DType::kFloat32, {m.num_experts}};
  moe.add_buffer("expert_bias", meta, true);
  moe.add_buffer("tokens_per_expert", meta, false);
}

void allocate_buffers(Backend& b, Module& root) {
  root.for_each_module([&b](Module& m) {
    for (ModuleBuffer& buf : m.buffers) {
      buf.tensor = empty_tensor(b, buf.meta, MemCategory::kUnshardedParam, ops::detail::kCompute,
                                buf.fqn);
      OpCall fill;
      fill.kind = OpKind::kFill;
      fill.name = buf.fqn + " zeros";
      fill.outputs = {buf.tensor.ref()};
      fill.bytes = static_cast<double>(buf.meta.nbytes());
      FillArgs{0.0}.encode(fill);
      b.launch(ops::detail::kCompute, fill);
    }
  });
}

void update_expert_bias(Backend& b, const std::vector<ExpertBiasLayer>& layers, double coeff,
                        const ProcessGroup& dp) {
  if (layers.empty()) return;
  const int64_t L = static_cast<int64_t>(layers.size());
  const int64_t E = layers[0].moe->buffer("tokens_per_expert").meta.numel();
  ExpertLoadArgs args;
  args.layers = L;
  args.experts = E;
  args.coeff = coeff;
  std::vector<TensorRef> counts, biases;
  for (const ExpertBiasLayer& l : layers) {
    counts.push_back(l.moe->buffer("tokens_per_expert").tensor.ref());
    biases.push_back(l.moe->buffer("expert_bias").tensor.ref());
    args.divisors.push_back(l.recomputed ? 2 : 1);  // torchtitan's // 2 under checkpointing
  }
  // tokens_per_expert_by_layer = torch.vstack(...): [L, E] fp32.
  Tensor loads = empty_tensor(b, {DType::kFloat32, {L, E}}, MemCategory::kTemporary,
                              ops::detail::kCompute, "expert bias tokens_per_expert_by_layer");
  OpCall stack = ops::detail::make_op(OpKind::kExpertLoadStack, "expert bias vstack", counts,
                                 {loads.ref()}, static_cast<double>(L * E), args);
  b.launch(ops::detail::kCompute, stack);
  if (dp.size() > 1) {  // one blocking all-reduce on the default stream
    CollectiveCall ar;
    ar.kind = CollectiveKind::kAllReduce;
    ar.op = ReduceOp::kSum;
    ar.name = "expert bias all_reduce";
    ar.input = loads.ref();
    ar.output = loads.ref();
    b.collective(ops::detail::kCompute, ar, dp);
  }
  std::vector<TensorRef> in{loads.ref()}, out;
  in.insert(in.end(), biases.begin(), biases.end());
  in.insert(in.end(), counts.begin(), counts.end());
  out.insert(out.end(), biases.begin(), biases.end());
  out.insert(out.end(), counts.begin(), counts.end());
  OpCall update = ops::detail::make_op(OpKind::kExpertBiasUpdate, "expert bias update", in, out,
                                  static_cast<double>(6 * L * E), args);
  b.launch(ops::detail::kCompute, update);
}

}  // namespace fullshard

// NOTE [Split backward] (core/model/autograd.h) on a recorded graph: x -> RMSNorm(w_n) ->
// Linear(W) -> y in the simulator's backend. The input backward (I) runs only the input kernels
// and keeps the whole graph with what it saved, plus each weight op's output gradient; the
// weight backward (W) runs only the weight kernels, in the parameters' order, and afterwards the
// rank holds exactly what a full backward leaves.
#include <gtest/gtest.h>

#include <vector>

#include "core/model/autograd.h"
#include "core/model/moe_ops.h"
#include "core/model/ops.h"
#include "simulator/sim_backend.h"

using namespace fullshard;

namespace {

// A parameter's unsharded tensor and .grad, as FSDPParam keeps them.
class Binding : public ParamBinding {
 public:
  explicit Binding(Tensor t) : t_(std::move(t)) {}
  Tensor unsharded() const override { return t_; }
  DType compute_dtype() const override { return t_.dtype(); }
  bool has_unsharded_grad() const override { return static_cast<bool>(grad_); }
  void accumulate_grad(Backend&, Tensor g) override { grad_ = std::move(g); }

 private:
  Tensor t_, grad_;
};

constexpr int64_t kRows = 8, kDim = 64, kOut = 32;  // fp32: multiples of 512 bytes
constexpr uint64_t kAct = kRows * kDim * 4, kOutAct = kRows * kOut * 4;
constexpr uint64_t kStat = 512;  // rstd, fp32 [8], in a 512-byte block

struct Backward {
  uint64_t before = 0, after_input = 0, after = 0;
  std::vector<OpKind> input_ops, weight_ops;  // kernels launched by I and by W (or the full B)
};

std::vector<OpKind> kernels_since(sim::SimBackend& b, size_t from) {
  std::vector<OpKind> out;
  for (size_t i = from; i < b.program().instrs.size(); ++i)
    if (b.program().instrs[i].type == sim::InstrType::kKernel)
      out.push_back(b.program().instrs[i].op);
  return out;
}

Backward run(bool split) {
  sim::GroupRegistry groups;
  sim::SimBackend b(0, 1, AllocatorOptions{}, groups);
  Module root;
  root.add_param("norm.weight", {kDim});
  root.add_param("out.weight", {kOut, kDim});
  Param &wn = root.params[0], &w = root.params[1];
  Binding bn(empty_tensor(b, {DType::kFloat32, {kDim}}, MemCategory::kUnshardedParam,
                           StreamRole::kDefault, "wn")),
      bw(empty_tensor(b, {DType::kFloat32, {kOut, kDim}}, MemCategory::kUnshardedParam,
                       StreamRole::kDefault, "w"));
  wn.binding = &bn;
  w.binding = &bw;
  Graph g;
  ExecContext c(b, &g, nullptr);
  Value x{empty_tensor(b, {DType::kFloat32, {kRows, kDim}}, MemCategory::kActivation,
                        StreamRole::kDefault, "x"),
          c.new_id()};
  const uint64_t root_id = [&] {
    Value y = ops::linear(c, ops::rms_norm(c, x, wn, 1e-5, "norm"), w, nullptr, "out");
    return y.id;  // y itself is dropped: nothing saves a linear's output
  }();
  Tensor seed = empty_tensor(b, {DType::kFloat32, {kRows, kOut}}, MemCategory::kTemporary,
                              StreamRole::kDefault, "seed");
  Backward r;
  r.before = b.memory().current().allocated_bytes;
  size_t mark = b.program().instrs.size();
  Tensor gx;
  if (split) {
    gx = g.backward_input(b, root_id, std::move(seed), x.id);
    r.after_input = b.memory().current().allocated_bytes;
    r.input_ops = kernels_since(b, mark);
    EXPECT_EQ(g.deferred_weight_grads(), 2u);
    mark = b.program().instrs.size();
    g.backward_weight(b, {&w, &wn});
    r.weight_ops = kernels_since(b, mark);
  } else {
    gx = g.backward(b, root_id, std::move(seed), x.id);
    r.input_ops = kernels_since(b, mark);
  }
  EXPECT_EQ(g.size(), 0u);
  EXPECT_TRUE(bn.has_unsharded_grad() && bw.has_unsharded_grad());
  r.after = b.memory().current().allocated_bytes;
  return r;
}

}  // namespace

TEST(SplitBackward, InputThenWeightHoldWhatPyTorchHolds) {
  const Backward full = run(false), split = run(true);
  EXPECT_EQ(full.input_ops, (std::vector<OpKind>{OpKind::kLinearBackwardInput,
                                                 OpKind::kLinearBackwardWeight,
                                                 OpKind::kRMSNormBackward}));
  EXPECT_EQ(split.input_ops, (std::vector<OpKind>{OpKind::kLinearBackwardInput,
                                                  OpKind::kRMSNormBackwardInput}));
  // W in the parameters' order given (the linear's weight first, then the norm's).
  EXPECT_EQ(split.weight_ops, (std::vector<OpKind>{OpKind::kLinearBackwardWeight,
                                                   OpKind::kRMSNormBackwardWeight}));
  // Between I and W the rank holds, beyond what it held before: the norm's output gradient
  // (captured for the norm's W; the seed, the linear's, was already counted) and x's gradient;
  // the norm's output and rstd stay saved (retain_graph=True).
  EXPECT_EQ(split.before, full.before);
  EXPECT_EQ(split.after_input, split.before + kAct + kAct);
  // Afterwards the same as a full backward: saved tensors and the seed gone, x's gradient and
  // the two weight gradients kept.
  EXPECT_EQ(split.after, full.after);
  const uint64_t norm_grad = 512;  // fp32 [64] in a 512-byte block
  EXPECT_EQ(full.after, full.before - kAct - kStat - kOutAct + kAct + norm_grad +
                            static_cast<uint64_t>(kOut * kDim * 4));
}

// The experts' grouped GEMM splits as torchtitan's _grouped_mm override does: I launches only its
// input gradient and keeps the weight part (with the output gradient, the input and the
// offsets, which nothing else holds); W launches only the weight gradient; afterwards the rank
// holds what a full backward leaves.
TEST(SplitBackward, GroupedGemmDefersItsWeightGradient) {
  constexpr int64_t kExperts = 4, kIn = 64, kN = 32, kP = 16;
  auto run_grouped = [&](bool split) {
    sim::GroupRegistry groups;
    sim::SimBackend b(0, 1, AllocatorOptions{}, groups);
    Module root;
    root.add_param("experts.w1", {kExperts, kN, kIn});
    Param& w = root.params[0];
    Binding bw(empty_tensor(b, {DType::kFloat32, {kExperts, kN, kIn}},
                             MemCategory::kUnshardedParam, StreamRole::kDefault, "w1"));
    w.binding = &bw;
    Graph g;
    ExecContext c(b, &g, nullptr);
    // x and the offsets are held only by what the graph saved (the test keeps no handle).
    uint64_t x_id = 0;
    const uint64_t root_id = [&] {
      Tensor offsets = empty_tensor(b, {DType::kInt64, {kExperts}}, MemCategory::kActivation,
                                     StreamRole::kDefault, "offsets");
      Value x{empty_tensor(b, {DType::kFloat32, {kP, kIn}}, MemCategory::kActivation,
                            StreamRole::kDefault, "x"),
              c.new_id()};
      x_id = x.id;
      return ops::moe::grouped_mm(c, x, w, offsets, kP, "experts.w1").id;
    }();
    Tensor seed = empty_tensor(b, {DType::kFloat32, {kP, kN}}, MemCategory::kTemporary,
                                StreamRole::kDefault, "seed");
    Backward r;
    r.before = b.memory().current().allocated_bytes;
    size_t mark = b.program().instrs.size();
    Tensor gx;
    if (split) {
      gx = g.backward_input(b, root_id, std::move(seed), x_id);
      r.after_input = b.memory().current().allocated_bytes;
      r.input_ops = kernels_since(b, mark);
      EXPECT_EQ(g.deferred_weight_grads(), 1u);
      EXPECT_FALSE(bw.has_unsharded_grad());
      mark = b.program().instrs.size();
      g.backward_weight(b, {&w});
      r.weight_ops = kernels_since(b, mark);
    } else {
      gx = g.backward(b, root_id, std::move(seed), x_id);
      r.input_ops = kernels_since(b, mark);
    }
    EXPECT_EQ(g.size(), 0u);
    EXPECT_TRUE(bw.has_unsharded_grad());
    EXPECT_EQ(gx.numel(), kP * kIn);
    r.after = b.memory().current().allocated_bytes;
    return r;
  };
  const Backward full = run_grouped(false), split = run_grouped(true);
  EXPECT_EQ(full.input_ops, (std::vector<OpKind>{OpKind::kGroupedMMBackwardInput,
                                                 OpKind::kGroupedMMBackwardWeight}));
  EXPECT_EQ(split.input_ops, (std::vector<OpKind>{OpKind::kGroupedMMBackwardInput}));
  EXPECT_EQ(split.weight_ops, (std::vector<OpKind>{OpKind::kGroupedMMBackwardWeight}));
  // Between I and W the weight part keeps the input, the offsets and the output gradient (all
  // counted before): I adds only x's gradient.
  constexpr uint64_t kX = kP * kIn * 4, kOffsets = 512, kSeed = kP * kN * 4;
  EXPECT_EQ(split.before, full.before);
  EXPECT_EQ(split.after_input, split.before + kX);
  // Afterwards both hold x's gradient and the weight's, and neither x, the offsets nor the seed.
  EXPECT_EQ(full.after, full.before - kX - kOffsets - kSeed + kX +
                            static_cast<uint64_t>(kExperts * kN * kIn * 4));
  EXPECT_EQ(split.after, full.after);
}

// NOTE [Split backward of a checkpointed block] (core/model/autograd.cc) on x -> checkpoint(
// RMSNorm(w_n) -> Linear(W)) -> y: I recomputes the block and keeps none of what it saved (only
// the captured output gradient); W recomputes it once per weight, in the parameters' order, and a
// copy the next weight still holds (the first recompute's rstd) stays until the norm's W.
TEST(SplitBackward, CheckpointedBlockRecomputesAtIAndAtEachW) {
  struct Run : Backward {
    uint64_t peak_w = 0;
  };
  auto run_checkpointed = [](bool split) {
    sim::GroupRegistry groups;
    sim::SimBackend b(0, 1, AllocatorOptions{}, groups);
    Module root;
    root.add_param("norm.weight", {kDim});
    root.add_param("out.weight", {kOut, kDim});
    Param &wn = root.params[0], &w = root.params[1];
    Binding bn(empty_tensor(b, {DType::kFloat32, {kDim}}, MemCategory::kUnshardedParam,
                            StreamRole::kDefault, "wn")),
        bw(empty_tensor(b, {DType::kFloat32, {kOut, kDim}}, MemCategory::kUnshardedParam,
                        StreamRole::kDefault, "w"));
    wn.binding = &bn;
    w.binding = &bw;
    Graph g;
    ExecContext c(b, &g, nullptr);
    Value x{empty_tensor(b, {DType::kFloat32, {kRows, kDim}}, MemCategory::kActivation,
                         StreamRole::kDefault, "x"),
            c.new_id()};
    auto body = [&wn, &w](ExecContext& bc, Value v) {
      return ops::linear(bc, ops::rms_norm(bc, std::move(v), wn, 1e-5, "norm"), w, nullptr, "out");
    };
    const size_t forward_mark = b.program().instrs.size();
    const uint64_t root_id = checkpoint(c, x, body, false, "block").id;
    EXPECT_EQ(kernels_since(b, forward_mark),
              (std::vector<OpKind>{OpKind::kRMSNorm, OpKind::kLinear}));
    EXPECT_EQ(g.size(), 1u);  // the checkpoint's node alone
    Tensor seed = empty_tensor(b, {DType::kFloat32, {kRows, kOut}}, MemCategory::kTemporary,
                               StreamRole::kDefault, "seed");
    Run r;
    r.before = b.memory().current().allocated_bytes;
    size_t mark = b.program().instrs.size();
    Tensor gx;
    if (split) {
      gx = g.backward_input(b, root_id, std::move(seed), x.id);
      r.after_input = b.memory().current().allocated_bytes;
      r.input_ops = kernels_since(b, mark);
      EXPECT_EQ(g.deferred_weight_grads(), 2u);
      EXPECT_FALSE(bn.has_unsharded_grad() || bw.has_unsharded_grad());
      b.memory().reset_peaks();
      mark = b.program().instrs.size();
      g.backward_weight(b, {&w, &wn});
      r.weight_ops = kernels_since(b, mark);
      r.peak_w = b.memory().at_peak_allocated().allocated_bytes;
    } else {
      gx = g.backward(b, root_id, std::move(seed), x.id);
      r.input_ops = kernels_since(b, mark);
    }
    EXPECT_TRUE(gx);
    EXPECT_EQ(g.size(), 0u);
    EXPECT_TRUE(bn.has_unsharded_grad() && bw.has_unsharded_grad());
    r.after = b.memory().current().allocated_bytes;
    return r;
  };
  const Run full = run_checkpointed(false), split = run_checkpointed(true);
  EXPECT_EQ(full.input_ops,
            (std::vector<OpKind>{OpKind::kRMSNorm, OpKind::kLinear, OpKind::kLinearBackwardInput,
                                 OpKind::kLinearBackwardWeight, OpKind::kRMSNormBackward}));
  EXPECT_EQ(split.input_ops,
            (std::vector<OpKind>{OpKind::kRMSNorm, OpKind::kLinear, OpKind::kLinearBackwardInput,
                                 OpKind::kRMSNormBackwardInput}));
  EXPECT_EQ(
      split.weight_ops,
      (std::vector<OpKind>{OpKind::kRMSNorm, OpKind::kLinear, OpKind::kLinearBackwardWeight,
                           OpKind::kRMSNorm, OpKind::kLinear, OpKind::kRMSNormBackwardWeight}));
  // After I: the linear's input gradient (captured for the norm's W; the seed, captured for the
  // linear's, was counted before) and x's gradient; the recomputed norm output and rstd went
  // with I (a graph without checkpointing keeps them until W).
  EXPECT_EQ(split.before, full.before);
  EXPECT_EQ(split.after_input, split.before + kAct + kAct);
  // W's peak: the norm's recompute (its output, the linear's transient output and a second
  // rstd) while the linear's weight gradient and the first recompute's rstd are held.
  const uint64_t out_grad = static_cast<uint64_t>(kOut * kDim * 4);
  EXPECT_EQ(split.peak_w, split.after_input + out_grad + kStat + kAct + kStat + kOutAct);
  EXPECT_EQ(split.after, full.after);
}

// The typed argument structs (core/runtime/*_args.h): what encode writes, decode reads back, and
// decode refuses a bad op with one message naming it (the message both backends' kernels throw).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>

#include "core/common/error.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/rope_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard {
namespace {

TensorRef ref(Shape shape, DType dt = DType::kFloat32) {
  TensorRef r;
  r.meta.shape = std::move(shape);
  r.meta.dtype = dt;
  return r;
}

OpCall op_of(OpKind k, std::vector<TensorRef> in, std::vector<TensorRef> out) {
  OpCall op;
  op.kind = k;
  op.name = "test";
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  return op;
}

RC_GTEST_PROP(OpArgs, InitParamRoundTrips, ()) {
  InitParamArgs a;
  a.row_offset = *rc::gen::inRange<int64_t>(0, 1000);
  a.local_rows = *rc::gen::inRange<int64_t>(0, 100);
  a.row_numel = *rc::gen::inRange<int64_t>(1, 100);
  a.init = *rc::gen::inRange<int64_t>(0, 3);
  a.key = *rc::gen::arbitrary<int64_t>();
  a.std = 0.02;
  a.layout = *rc::gen::element(InitParamArgs::Layout::kRows, InitParamArgs::Layout::kColumns,
                               InitParamArgs::Layout::kBlocks);
  if (a.layout == InitParamArgs::Layout::kColumns) {
    a.col_offset = *rc::gen::inRange<int64_t>(0, 50);
    a.full_row = a.col_offset + a.row_numel + *rc::gen::inRange<int64_t>(0, 50);
  } else if (a.layout == InitParamArgs::Layout::kBlocks) {
    a.tp = *rc::gen::inRange<int64_t>(1, 8);
    a.tp_index = *rc::gen::inRange<int64_t>(0, a.tp);
    a.block = *rc::gen::inRange<int64_t>(1, 16);
  }
  OpCall op = op_of(OpKind::kInitParam, {}, {ref({a.local_rows * a.row_numel})});
  a.encode(op);
  const InitParamArgs b = InitParamArgs::decode(op);
  RC_ASSERT(b.row_offset == a.row_offset && b.local_rows == a.local_rows &&
            b.row_numel == a.row_numel && b.init == a.init && b.key == a.key && b.std == a.std);
  RC_ASSERT(b.layout == a.layout);
  if (a.layout == InitParamArgs::Layout::kColumns)
    RC_ASSERT(b.col_offset == a.col_offset && b.full_row == a.full_row);
  if (a.layout == InitParamArgs::Layout::kBlocks)
    RC_ASSERT(b.block == a.block && b.tp_index == a.tp_index && b.tp == a.tp);
}

RC_GTEST_PROP(OpArgs, AttentionRoundTripsWithItsLayout, ()) {
  AttentionArgs a;
  a.batch = *rc::gen::inRange<int64_t>(1, 4);
  a.seq = *rc::gen::inRange<int64_t>(1, 64);
  a.kv_heads = *rc::gen::inRange<int64_t>(1, 4);
  a.packed = *rc::gen::arbitrary<bool>();
  a.heads = a.packed ? a.kv_heads : a.kv_heads * *rc::gen::inRange<int64_t>(1, 4);
  a.head_dim = 8 * *rc::gen::inRange<int64_t>(1, 16);
  a.lse_len = a.seq + *rc::gen::inRange<int64_t>(0, 32);
  OpCall op = op_of(OpKind::kAttention, {}, {});
  a.encode(op);
  const AttentionArgs b = AttentionArgs::decode(op);
  RC_ASSERT(b.batch == a.batch && b.seq == a.seq && b.heads == a.heads &&
            b.kv_heads == a.kv_heads && b.head_dim == a.head_dim && b.packed == a.packed &&
            b.lse_len == a.lse_len);
  RC_ASSERT(b.group == a.heads / a.kv_heads);
  RC_ASSERT(b.q_ld == (a.packed ? 3 : 1) * a.heads * a.head_dim);
  RC_ASSERT(b.v_off == (a.packed ? 2 * a.heads * a.head_dim : 0));
}

TEST(OpArgs, RopeRoundTripsAndDecodesTheTensorLayout) {
  RopeArgs a;
  a.head_dim = 8;
  a.rope = RopeParams(500000.0, RopeScaling{8, 1, 4, 8192});
  OpCall op = op_of(OpKind::kRoPE, {ref({2, 5, 16})}, {ref({2, 5, 16})});
  a.encode(op);
  const RopeArgs b = RopeArgs::decode(op);
  EXPECT_EQ(b.head_dim, 8);
  EXPECT_EQ(b.rope.theta, 500000.0);
  EXPECT_EQ(b.rope.scaling.factor, 8);
  EXPECT_EQ(b.seq, 5);
  EXPECT_EQ(b.width, 16);
  EXPECT_EQ(b.rows, 10);
}

// One message for each refusal, naming the op, whichever backend's kernel asked.
TEST(OpArgs, DecodeRefusesNamingTheOp) {
  auto message = [](const OpCall& op, auto decode) {
    try {
      decode(op);
    } catch (const InternalError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  OpCall odd = op_of(OpKind::kRoPEComplex, {ref({1, 3, 12})}, {ref({1, 3, 12})});
  odd.iargs = {5};
  odd.fargs = {1e4};
  std::string m = message(odd, RopeArgs::decode);
  EXPECT_NE(m.find("RoPEComplex 'test': head_dim must be even"), std::string::npos) << m;
  OpCall blocks = op_of(OpKind::kNarrowCopy, {ref({2, 6})}, {ref({2, 3})});
  blocks.iargs = {3, 6, -1, 3, 0};
  m = message(blocks, NarrowCopyArgs::decode);
  EXPECT_NE(m.find("NarrowCopy 'test': the blocks of in and out do not match"), std::string::npos)
      << m;
  OpCall cat = op_of(OpKind::kChunkCat, {ref({3, 2})}, {ref({7})});
  cat.iargs = {2};
  m = message(cat, ChunkCatArgs::decode);
  EXPECT_NE(m.find("ChunkCat 'test': output has 7 elements, expected W * padded row 8"),
            std::string::npos)
      << m;
  OpCall bad_lse = op_of(OpKind::kAttention, {}, {});
  bad_lse.iargs = {1, 8, 2, 2, 4, 0, 7};
  m = message(bad_lse, AttentionArgs::decode);
  EXPECT_NE(m.find("logsumexp rows (iargs[6] 7) shorter than the sequence 8"), std::string::npos)
      << m;
}

}  // namespace
}  // namespace fullshard

// rope=rotate_half: Hugging Face transformers' LlamaRotaryEmbedding and apply_rotary_pos_emb.
#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/rope_args.h"
#include "core/runtime/tensor_parallel_args.h"

// NOTE [Rotate-half RoPE]: Hugging Face transformers' Llama (modeling_llama.py): rotate_half(x) =
// cat(-x2, x1) of x's two halves and q_embed = q * cos + rotate_half(q) * sin (k likewise), with
// cos / sin [B, S, hd] from LlamaRotaryEmbedding once per forward after the embedding (fp32, then
// .to(x.dtype)). Recorded as one kernel writing fp32 cos and sin, then the two casts (none in
// fp32); the model-dtype cos / sin are shared by every layer and live until layer 0's backward
// (each `* cos` / `* sin` saves them). Per tensor, in Python's order: q * cos, -x2 (half width),
// cat, * sin, +, each freeing what it consumed; nothing per layer is saved. Backward, in the
// engine's order: grad * sin, neg's backward (half width), the two slice_backwards (zeros + copy,
// full width, the second accumulated into the first in place), grad * cos. The source and each
// allocation: docs/ops.md, "Rotate-half RoPE in full".

namespace fullshard::ops {
using namespace detail;  // NOLINT

namespace {

Tensor narrow_copy(Backend& b, const Tensor& src, const Tensor& dst, int64_t n, int64_t iw,
                   int64_t io, int64_t ow, int64_t oo, double scale, const std::string& name) {
  OpCall op = make_op(OpKind::kNarrowCopy, name, {src.ref()}, {dst.ref()}, 0,
                      NarrowCopyArgs{.n = n,
                                     .in_width = iw,
                                     .in_offset = io,
                                     .out_width = ow,
                                     .out_offset = oo,
                                     .scale = scale});
  op.bytes = 2.0 * static_cast<double>(dst.nbytes()) * n / ow;  // reads and writes n of every ow
  b.launch(kCompute, op);
  return dst;
}

TensorMeta half_meta(const Tensor& x) {
  const Shape& in = x.shape();
  Shape s(in.begin(), in.end() - 1);
  s.push_back(in.back() / 2);
  return {x.dtype(), s};
}

// x * table (table [B, S, hd] broadcast over the heads of x [B, S, H*hd]); saves the table.
Value mul_table(ExecContext& c, Value x, const Tensor& table, int64_t hd, const std::string& name) {
  Backend& b = c.backend();
  const int64_t D = x.t.shape().back();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kMulBroadcast, name, {x.t.ref(), table.ref()}, {y.ref()}, el(y),
                   MulBroadcastArgs{.mode = MulBroadcastArgs::kPerHead, .dim = D, .head_dim = hd}));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name, {x.id}, {out.id}, [&b, table, D, hd, name](std::vector<Tensor>& g) {
                    Tensor gx = grad_like(b, g[0], name + " grad_self");
                    b.launch(kCompute, make_op(OpKind::kMulBroadcast, name + " grad_self",
                                               {g[0].ref(), table.ref()}, {gx.ref()}, el(gx),
                                               MulBroadcastArgs{.mode = MulBroadcastArgs::kPerHead,
                                                                .dim = D,
                                                                .head_dim = hd}));
                    return std::vector<Tensor>{gx};
                  }});
  }
  return out;
}

Value rotate_half(ExecContext& c, Value x, int64_t hd, const std::string& name) {
  Backend& b = c.backend();
  const int64_t h = hd / 2;
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  {
    Tensor neg = c.empty(half_meta(x.t), MemCategory::kActivation, name + " neg");
    narrow_copy(b, x.t, neg, h, hd, h, h, 0, -1.0, name + " neg");
    c.launch(make_op(OpKind::kRotateHalfCat, name + " cat", {neg.ref(), x.t.ref()}, {y.ref()}, 0,
                     RotateHalfCatArgs{.head_dim = hd}));
  }
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{name, {x.id}, {out.id}, [&b, meta, hd, h, name](std::vector<Tensor>& g) {
                    Tensor gx2;
                    {
                      Tensor gneg = empty_tensor(b, half_meta(g[0]), MemCategory::kTemporary,
                                                  kCompute, name + " neg backward");
                      narrow_copy(b, g[0], gneg, h, hd, 0, h, 0, -1.0, name + " neg backward");
                      gx2 = empty_tensor(b, meta, MemCategory::kTemporary, kCompute,
                                          name + " slice_backward x2");
                      fill_zero(b, kCompute, gx2, name + " slice_backward x2 zeros");
                      narrow_copy(b, gneg, gx2, h, h, 0, hd, h, 1.0, name + " slice_backward x2");
                    }
                    {
                      Tensor gx1 = empty_tensor(b, meta, MemCategory::kTemporary, kCompute,
                                                 name + " slice_backward x1");
                      fill_zero(b, kCompute, gx1, name + " slice_backward x1 zeros");
                      narrow_copy(b, g[0], gx1, h, hd, h, hd, 0, 1.0, name + " slice_backward x1");
                      add_into(b, gx2, gx1, name + " accumulate");
                    }
                    return std::vector<Tensor>{gx2};
                  }});
  }
  return out;
}

Value apply_one(ExecContext& c, const Value& x, const RotaryTables& t, int64_t hd,
                const std::string& name) {
  Value t1 = mul_table(c, x, t.cos, hd, name + " mul_cos");
  Value rot = rotate_half(c, x, hd, name + " rotate_half");
  Value t2 = mul_table(c, std::move(rot), t.sin, hd, name + " mul_sin");
  return add(c, std::move(t1), std::move(t2), name + " add");
}

}  // namespace

RotaryTables rotary_cos_sin(ExecContext& c, int64_t batch, int64_t seq, int64_t head_dim,
                            const RopeParams& freqs, DType dt, const std::string& name) {
  FULLSHARD_CHECK(head_dim % 2 == 0, name + ": rope needs an even head_dim");
  TensorMeta m{DType::kFloat32, {batch, seq, head_dim}};
  Tensor cos = c.empty(m, MemCategory::kActivation, name + " cos");
  Tensor sin = c.empty(m, MemCategory::kActivation, name + " sin");
  OpCall op = make_op(OpKind::kRotaryCosSin, name, {}, {cos.ref(), sin.ref()}, 4 * el(cos),
                      RotaryCosSinArgs{.head_dim = head_dim, .rope = freqs});
  c.launch(op);
  if (dt == DType::kFloat32) return {cos, sin};
  Backend& b = c.backend();
  Tensor cd = cast(b, kCompute, cos, dt, MemCategory::kActivation, name + " cos.to");
  Tensor sd = cast(b, kCompute, sin, dt, MemCategory::kActivation, name + " sin.to");
  return {cd, sd};
}

std::pair<Value, Value> rope_rotate_half(ExecContext& c, Value q, Value k, const RotaryTables& t,
                                         int64_t head_dim, const std::string& q_name,
                                         const std::string& k_name) {
  Value qe = apply_one(c, q, t, head_dim, q_name);
  Value ke = apply_one(c, k, t, head_dim, k_name);
  return {qe, ke};
}

}  // namespace fullshard::ops

#include "core/model/ops.h"

#include "core/model/lora.h"

#include "core/common/error.h"
#include "core/model/float8_linear.h"
#include "core/model/lora.h"
#include "core/model/op_util.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/rope_args.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/norm_args.h"

// NOTE [Op costs]: FLOPs count 2 per multiply-add for matmuls and a small constant per
// element for pointwise ops; bytes are what the kernel reads and writes in device memory
// (each input and output once). These feed the simulator's cost model; docs/ops.md lists
// every op's saved tensors and temporaries.

namespace fullshard::ops {
using namespace detail;  // NOLINT: make_op, param_tensor, result, ... (op_util.h)
namespace detail {

// Op-level SAC (torchtitan _apply_op_sac): mm outputs are saved except every second mm;
// attention outputs are always saved. Returns the cached outputs in a recompute.
bool sac_saves(ExecContext& c, bool is_mm) {
  SacState* s = c.sac();
  if (!s) return false;
  if (!is_mm) return true;
  return (++s->mm_count % 2) == 1;
}
std::vector<Tensor>* sac_cached(ExecContext& c, bool saves) {
  SacState* s = c.sac();
  if (!s || !saves || s->mode != SacState::Mode::kRecompute) return nullptr;
  FULLSHARD_CHECK(s->next < s->cache.size(), "selective checkpoint cache underflow");
  return &s->cache[s->next++];
}
void sac_store(ExecContext& c, bool saves, std::vector<Tensor> outs) {
  SacState* s = c.sac();
  if (s && saves && s->mode == SacState::Mode::kForward) s->cache.push_back(std::move(outs));
}

}  // namespace detail

// ------------------------------------------------------------------ plain kernels
Tensor add_new(Backend& b, const Tensor& x, const Tensor& y, MemCategory cat,
               const std::string& name) {
  Tensor out = empty_tensor(b, x.meta(), cat, kCompute, name);
  b.launch(kCompute, make_op(OpKind::kAdd, name, {x.ref(), y.ref()}, {out.ref()}, el(x)));
  return out;
}

void add_into(Backend& b, Tensor& dst, const Tensor& src, const std::string& name, StreamRole s) {
  b.launch(s, make_op(OpKind::kAdd, name, {dst.ref(), src.ref()}, {dst.ref()}, el(dst)));
}

void copy_into(Backend& b, StreamRole s, const Tensor& dst, const Tensor& src,
               const std::string& name) {
  FULLSHARD_CHECK(dst.numel() == src.numel(), "copy of " + name + " between different sizes");
  b.launch(s, make_op(OpKind::kCopy, name, {src.ref()}, {dst.ref()}, 0));
}

Tensor cast(Backend& b, StreamRole s, const Tensor& src, DType to, MemCategory cat,
            const std::string& name) {
  Tensor out = empty_tensor(b, TensorMeta{to, src.shape()}, cat, s, name);
  copy_into(b, s, out, src, name);
  return out;
}

void fill_zero(Backend& b, StreamRole s, const Tensor& t, const std::string& name) {
  b.launch(s, make_op(OpKind::kFill, name, {}, {t.ref()}, 0));
}

void init_param(Backend& b, StreamRole s, const Tensor& t, const Param& p, int64_t row_offset,
                int64_t local_rows) {
  int64_t row_numel = 1;
  for (size_t i = 1; i < p.shape.size(); ++i) row_numel *= p.shape[i];
  // A tensor-parallel shard is a block of the full tensor: rows further down (Shard(0)) or
  // columns further right (Shard(1), with the full row length as two extra iargs).
  const bool blocks = p.tp_placement == TpPlacement::kShard0 && p.tp_blocks > 1;
  if (p.tp_placement == TpPlacement::kShard0 && !blocks)
    row_offset += static_cast<int64_t>(p.tp_index) * p.shape.at(0);
  if (p.ep_degree > 1) row_offset += static_cast<int64_t>(p.ep_index) * p.shape.at(0);
  OpCall op = make_op(OpKind::kInitParam, p.fqn + " init", {}, {t.ref()}, 0);
  InitParamArgs a;  // core/runtime/layer_args.h
  a.row_offset = row_offset;
  a.local_rows = local_rows;
  a.row_numel = row_numel;
  a.init = static_cast<int64_t>(p.init);
  a.key = static_cast<int64_t>(p.init_key);
  a.std = p.init == ParamInit::kUniform ? p.init_bound : p.init_std;
  if (blocks) {
    // Local rows stack this rank's rows of each block (NOTE [Fused qkv under tensor
    // parallelism]): local rows per block, tp index, tp degree.
    FULLSHARD_CHECK(p.shape.at(0) % p.tp_blocks == 0,
                    p.fqn + ": rows do not split into its blocks");
    a.layout = InitParamArgs::Layout::kBlocks;
    a.block = p.shape[0] / p.tp_blocks;
    a.tp_index = p.tp_index;
    a.tp = p.tp_degree;
  }
  if (p.tp_placement == TpPlacement::kShard1) {
    FULLSHARD_CHECK(p.shape.size() == 2, p.fqn + ": a Shard(1) parameter must be 2-D");
    a.layout = InitParamArgs::Layout::kColumns;
    a.col_offset = static_cast<int64_t>(p.tp_index) * p.shape[1];
    a.full_row = p.shape[1] * p.tp_degree;
  }
  a.encode(op);
  b.launch(s, op);
}

void init_param_dim1_shard(Backend& b, StreamRole s, const Tensor& t, const Param& p, int world,
                           int rank) {
  FULLSHARD_CHECK(p.shape.size() >= 2 && p.shape[1] % world == 0 &&
                      p.tp_placement == TpPlacement::kReplicate,
                  p.fqn + ": a Shard(1) FSDP shard needs an even split of dim 1 and no tp");
  const int64_t d0 = p.shape[0];
  const int64_t full_row = fullshard::numel(p.shape) / d0;
  OpCall op = make_op(OpKind::kInitParam, p.fqn + " init", {}, {t.ref()}, 0);
  InitParamArgs a;  // core/runtime/layer_args.h
  a.row_offset = p.ep_degree > 1 ? static_cast<int64_t>(p.ep_index) * d0 : 0;
  a.local_rows = d0;
  a.row_numel = full_row / world;
  a.init = static_cast<int64_t>(p.init);
  a.key = static_cast<int64_t>(p.init_key);
  a.std = p.init_std;
  a.layout = InitParamArgs::Layout::kColumns;
  a.col_offset = static_cast<int64_t>(rank) * a.row_numel;
  a.full_row = full_row;
  a.encode(op);
  b.launch(s, op);
}

void scale_inplace(Backend& b, StreamRole s, const Tensor& t, double factor,
                   const std::string& name) {
  b.launch(s, make_op(OpKind::kScale, name, {t.ref()}, {t.ref()}, el(t), ScalarArgs{factor}));
}

// ------------------------------------------------------------------ embedding
Value embedding(ExecContext& c, const Tensor& ids, const Param& weight, const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight);
  Shape s = ids.shape();
  s.push_back(weight.shape[1]);
  Tensor y = c.empty({w.dtype(), s}, MemCategory::kActivation, name);
  // A vocab-parallel shard (NOTE [Tensor-parallel plan] in tensor_parallel.cc) holds rows
  // [vocab_start, vocab_start + V/tp): other ids give zero rows and no gradient.
  EmbeddingArgs vocab_range;
  if (weight.tp_degree > 1 && weight.tp_placement == TpPlacement::kShard0)
    vocab_range.vocab_start = static_cast<int64_t>(weight.tp_index) * weight.shape.at(0);
  OpCall op = make_op(OpKind::kEmbedding, name, {ids.ref(), w.ref()}, {y.ref()}, 0, vocab_range);
  op.bytes = static_cast<double>(ids.nbytes() + 2 * y.nbytes());  // gathers only used rows
  c.launch(op);
  // A frozen table (NOTE [Frozen parameters] in lora.cc): no grad, no node, nothing saved.
  Value out = result(c, y, weight.requires_grad);
  if (out.requires_grad()) {
    const Param* pw = &weight;
    c.record(Node{name, {}, {out.id}, [&b, pw, ids, name, vocab_range](std::vector<Tensor>& g) {
                    weight_gradients(pw, {g[0]}, [&b, pw, ids, name, vocab_range](
                                                     const std::vector<Tensor>& go) {
                      Tensor gw = new_param_grad(b, *pw);
                      b.launch(kCompute, make_op(OpKind::kEmbeddingBackward, name + " backward",
                                                 {go[0].ref(), ids.ref()}, {gw.ref()}, el(go[0]),
                                                 vocab_range));
                      pw->binding->accumulate_grad(b, std::move(gw));
                    });
                    return std::vector<Tensor>{};
                  }});
  }
  return out;
}

Value position_embedding(ExecContext& c, Value x, const Param& wpe, const std::string& name,
                         int64_t first_position) {
  Backend& b = c.backend();
  Tensor w = param_tensor(wpe);
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  // A sequence shard adds the rows of its own positions (from first_position on).
  const PositionEmbeddingArgs first{.first_position = first_position};
  c.launch(
      make_op(OpKind::kPositionEmbedding, name, {x.t.ref(), w.ref()}, {y.ref()}, el(y), first));
  Value out = result(c, y, x.requires_grad() || wpe.requires_grad);
  if (out.requires_grad()) {
    const Param* pw = &wpe;
    c.record(Node{name, {x.id}, {out.id}, [&b, pw, name, first](std::vector<Tensor>& g) {
                    if (pw->requires_grad) {
                      Tensor gw = new_param_grad(b, *pw);
                      b.launch(kCompute,
                               make_op(OpKind::kPositionEmbeddingBackward, name + " backward",
                                       {g[0].ref()}, {gw.ref()}, el(g[0]), first));
                      pw->binding->accumulate_grad(b, std::move(gw));
                    }
                    return std::vector<Tensor>{g[0]};  // d(x + pos)/dx = identity: same tensor
                  }});
  }
  return out;
}

// ------------------------------------------------------------------ norms
namespace {
// RMSNorm's backward as I and W (NOTE [Split backward] in autograd.h): the input gradient now,
// the weight gradient later from the output gradient, x and rstd, each its own kernel
// (_fused_rms_norm_backward with output_mask [1, 0], then [0, 1]).
std::vector<Tensor> rms_norm_backward_split(Backend& b, const Param& weight, const Tensor& xs,
                                            const Tensor& rstd, const Tensor& g,
                                            const std::string& name, bool need) {
  const Param* pw = &weight;
  Tensor gx;
  if (need && input_gradients_wanted()) {
    gx = grad_like(b, xs, name + " grad_input");
    b.launch(kCompute, make_op(OpKind::kRMSNormBackwardInput, name + " backward_input",
                               {g.ref(), xs.ref(), rstd.ref(), pw->binding->unsharded().ref()},
                               {gx.ref()}, 6 * el(xs)));
  }
  if (pw->requires_grad)
    weight_gradients(pw, {g}, [&b, pw, xs, rstd, name](const std::vector<Tensor>& go) {
      Tensor gw = new_param_grad(b, *pw);
      b.launch(kCompute, make_op(OpKind::kRMSNormBackwardWeight, name + " backward_weight",
                                 {go[0].ref(), xs.ref(), rstd.ref()}, {gw.ref()}, 3 * el(xs)));
      pw->binding->accumulate_grad(b, std::move(gw));
    });
  return {need ? gx : Tensor()};
}
}  // namespace

Value rms_norm(ExecContext& c, Value x, const Param& weight, double eps, const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight);
  int64_t rows = x.t.numel() / x.t.shape().back();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  Tensor rstd = c.empty({DType::kFloat32, {rows}}, MemCategory::kActivation, name + " rstd");
  c.launch(make_op(OpKind::kRMSNorm, name, {x.t.ref(), w.ref()}, {y.ref(), rstd.ref()}, 4 * el(x.t),
                   NormArgs{.eps = eps}));
  Value out = result(c, y, x.requires_grad() || weight.requires_grad);
  if (out.requires_grad()) {
    const Param* pw = &weight;
    Tensor xs = x.t;
    c.record(Node{name,
                  {x.id},
                  {out.id},
                  [&b, pw, xs, rstd, name, need = x.requires_grad()](std::vector<Tensor>& g) {
                    if (weight_gradients_deferred())
                      return rms_norm_backward_split(b, *pw, xs, rstd, g[0], name, need);
                    Tensor gx = grad_like(b, xs, name + " grad_input");
                    // A frozen weight's gradient is computed into a temporary and dropped
                    // (NOTE [Frozen norm weights] in lora.cc).
                    Tensor gw = frozen_or_param_grad(b, *pw);
                    b.launch(kCompute, make_op(OpKind::kRMSNormBackward, name + " backward",
                                               {g[0].ref(), xs.ref(), rstd.ref(),
                                                pw->binding->unsharded().ref()},
                                               {gx.ref(), gw.ref()}, 8 * el(xs)));
                    if (pw->requires_grad) pw->binding->accumulate_grad(b, std::move(gw));
                    return std::vector<Tensor>{need ? gx : Tensor()};
                  }});
  }
  return out;
}

Value layer_norm(ExecContext& c, Value x, const Param& weight, const Param& bias, double eps,
                 const std::string& name) {
  Backend& b = c.backend();
  Tensor w = param_tensor(weight), bb = param_tensor(bias);
  int64_t rows = x.t.numel() / x.t.shape().back();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  Tensor mean = c.empty({DType::kFloat32, {rows}}, MemCategory::kActivation, name + " mean");
  Tensor rstd = c.empty({DType::kFloat32, {rows}}, MemCategory::kActivation, name + " rstd");
  OpCall op = make_op(OpKind::kLayerNorm, name, {x.t.ref(), w.ref(), bb.ref()},
                      {y.ref(), mean.ref(), rstd.ref()}, 5 * el(x.t), NormArgs{.eps = eps});
  c.launch(op);
  Value out = result(c, y, x.requires_grad() || weight.requires_grad || bias.requires_grad);
  if (out.requires_grad()) {
    const Param *pw = &weight, *pb = &bias;
    Tensor xs = x.t;
    c.record(
        Node{name,
             {x.id},
             {out.id},
             [&b, pw, pb, xs, mean, rstd, name, need = x.requires_grad()](std::vector<Tensor>& g) {
               Tensor gx = grad_like(b, xs, name + " grad_input");
               Tensor gw = frozen_or_param_grad(b, *pw);  // NOTE [Frozen norm weights]
               Tensor gb = frozen_or_param_grad(b, *pb);
               b.launch(kCompute, make_op(OpKind::kLayerNormBackward, name + " backward",
                                          {g[0].ref(), xs.ref(), mean.ref(), rstd.ref(),
                                           pw->binding->unsharded().ref()},
                                          {gx.ref(), gw.ref(), gb.ref()}, 10 * el(xs)));
               if (pw->requires_grad) pw->binding->accumulate_grad(b, std::move(gw));
               if (pb->requires_grad) pb->binding->accumulate_grad(b, std::move(gb));
               return std::vector<Tensor>{need ? gx : Tensor()};
             }});
  }
  return out;
}

// ------------------------------------------------------------------ linear
Value linear(ExecContext& c, Value x, const Param& weight, const Param* bias,
             const std::string& name) {
  if (weight.float8 != Float8Recipe::kNone) {  // torchao Float8Linear (float8_linear.h)
    FULLSHARD_CHECK(bias == nullptr && c.sac() == nullptr,
                    name +
                        ": a float8 linear with a bias or under op-level SAC (refused by "
                        "check_float8)");
    return float8_linear(c, std::move(x), weight, name);
  }
  if (weight.nf4()) return nf4_linear(c, std::move(x), weight, bias, name);  // lora.h
  Tensor w = param_tensor(weight);
  const int64_t K = weight.shape[1], N = weight.shape[0];
  FULLSHARD_CHECK(x.t.shape().back() == K, name + ": input features do not match the weight");
  const int64_t M = x.t.numel() / K;
  Shape s = x.t.shape();
  s.back() = N;
  // torchtitan's op-level SAC counts and saves aten.mm only; a linear with a bias is addmm.
  bool saves = bias == nullptr && sac_saves(c, true);
  Tensor y;
  if (auto* cached = sac_cached(c, saves)) {
    y = (*cached)[0];
  } else {
    y = c.empty({w.dtype(), s}, MemCategory::kActivation, name);
    std::vector<TensorRef> in = {x.t.ref(), w.ref()};
    if (bias) in.push_back(param_tensor(*bias).ref());
    c.launch(make_op(OpKind::kLinear, name, in, {y.ref()}, 2.0 * M * K * N, LinearArgs{M, K, N}));
    sac_store(c, saves, {y});
  }
  Value out =
      result(c, y, x.requires_grad() || weight.requires_grad || (bias && bias->requires_grad));
  if (out.requires_grad()) detail::record_linear(c, x, weight, bias, out, name);
  return out;
}

void detail::record_linear(ExecContext& c, const Value& x, const Param& weight, const Param* bias,
                           const Value& out, const std::string& name) {
  if (!c.recording()) return;
  Backend& b = c.backend();
  const int64_t K = weight.shape[1], N = weight.shape[0], M = x.t.numel() / K;
  const Param* pw = &weight;
  // mm's backward saves the input only for the weight's gradient: a frozen linear keeps
  // nothing of x (NOTE [Frozen parameters] in lora.cc).
  Tensor xs = weight.requires_grad ? x.t : Tensor();
  const TensorMeta xmeta = x.t.meta();
  c.record(Node{
      name,
      {x.id},
      {out.id},
      [&b, pw, bias, xs, xmeta, M, K, N, name, need = x.requires_grad()](std::vector<Tensor>& g) {
        Tensor gx;
        if (need && input_gradients_wanted()) {
          gx = empty_tensor(b, xmeta, MemCategory::kTemporary, kCompute, name + " grad_input");
          b.launch(kCompute, make_op(OpKind::kLinearBackwardInput, name + " backward_input",
                                     {g[0].ref(), pw->binding->unsharded().ref()}, {gx.ref()},
                                     2.0 * M * K * N, LinearArgs{M, K, N}));
        }
        if (!pw->requires_grad && !(bias && bias->requires_grad)) return std::vector<Tensor>{gx};
        // The weight part: deferred to W under a zero-bubble schedule (NOTE [Split backward]).
        weight_gradients(
            pw->requires_grad ? pw : bias, {g[0]},
            [&b, pw, bias, xs, M, K, N, name](const std::vector<Tensor>& go) {
              if (pw->requires_grad) {
                Tensor gw = new_param_grad(b, *pw);
                b.launch(kCompute,
                         make_op(OpKind::kLinearBackwardWeight, name + " backward_weight",
                                 {go[0].ref(), xs.ref()}, {gw.ref()}, 2.0 * M * K * N,
                                 LinearArgs{M, K, N}));
                pw->binding->accumulate_grad(b, std::move(gw));
              }
              if (bias && bias->requires_grad) {
                Tensor gb = new_param_grad(b, *bias);
                b.launch(kCompute,
                         make_op(OpKind::kLinearBackwardBias, name + " backward_bias",
                                 {go[0].ref()}, {gb.ref()}, static_cast<double>(M * N),
                                 LinearBiasArgs{M, N}));
                bias->binding->accumulate_grad(b, std::move(gb));
              }
            });
        return std::vector<Tensor>{gx};
      }});
}

// ------------------------------------------------------------------ rope
Value detail::rotary(ExecContext& c, Value x, OpKind forward, OpKind backward,
                     double flops_per_element, int64_t head_dim, const RopeParams& freqs,
                     const std::string& name, const std::string& grad_suffix) {
  Backend& b = c.backend();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  RopeArgs args;  // core/runtime/rope_args.h
  args.head_dim = head_dim;
  args.rope = freqs;
  OpCall op = make_op(forward, name, {x.t.ref()}, {y.ref()}, flops_per_element * el(x.t));
  args.encode(op);
  c.launch(op);
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{
        name,
        {x.id},
        {out.id},
        [&b, meta, backward, flops_per_element, args, name, grad_suffix](std::vector<Tensor>& g) {
          Tensor gx = empty_tensor(b, meta, MemCategory::kTemporary, kCompute, name + grad_suffix);
          OpCall bop = make_op(backward, name + " backward", {g[0].ref()}, {gx.ref()},
                               flops_per_element * el(gx));
          args.encode(bop);
          b.launch(kCompute, bop);
          return std::vector<Tensor>{gx};
        }});
  }
  return out;
}

Value rope(ExecContext& c, Value x, int64_t head_dim, const RopeParams& freqs,
           const std::string& name) {
  return detail::rotary(c, std::move(x), OpKind::kRoPE, OpKind::kRoPEBackward, 6, head_dim, freqs,
                        name, " grad_input");
}

// ------------------------------------------------------------------ attention
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// NOTE [Flash attention backward temporaries]: PyTorch's flash backward (mha_bwd) allocates
// softmax_d [B, H, round128(S)] fp32 and dq_accum [B, round128(S), H, round32(hd)] fp32,
// and with GQA dk/dv at the query head count before summing them down to the kv heads.
struct FlashBwdTemps {
  Tensor softmax_d, dq_accum, dk_expanded, dv_expanded;
};
FlashBwdTemps flash_bwd_temps(Backend& b, const AttentionShape& s, DType dt,
                              const std::string& name) {
  FlashBwdTemps t;
  int64_t sr = round_up(s.seq, 128);
  t.softmax_d = empty_tensor(b, {DType::kFloat32, {s.batch, s.heads, sr}}, MemCategory::kTemporary,
                              kCompute, name + " softmax_d");
  t.dq_accum = empty_tensor(b, {DType::kFloat32, {s.batch, sr, s.heads, round_up(s.head_dim, 32)}},
                             MemCategory::kTemporary, kCompute, name + " dq_accum");
  if (s.kv_heads != s.heads) {
    TensorMeta m{dt, {s.batch, s.seq, s.heads, s.head_dim}};
    t.dk_expanded = empty_tensor(b, m, MemCategory::kTemporary, kCompute, name + " dk_expanded");
    t.dv_expanded = empty_tensor(b, m, MemCategory::kTemporary, kCompute, name + " dv_expanded");
  }
  return t;
}

// The temporaries are the backward's scratch (a CUDA kernel's only scratch): they follow dq, dk,
// dv in the op's outputs, expanded dk / dv only when present. op.bytes keeps counting dq, dk
// and dv alone (make_op ran before), so the cost model sees the same op as without them.
void append_flash_temps(OpCall& op, const FlashBwdTemps& t) {
  op.outputs.push_back(t.softmax_d.ref());
  op.outputs.push_back(t.dq_accum.ref());
  if (t.dk_expanded) {
    op.outputs.push_back(t.dk_expanded.ref());
    op.outputs.push_back(t.dv_expanded.ref());
  }
}

double attn_flops(const AttentionShape& s) {  // causal: half of the S x S scores
  return 2.0 * s.batch * s.heads * static_cast<double>(s.seq) * s.seq * s.head_dim;
}
AttentionArgs attn_args(const AttentionShape& s, int64_t packed) {
  AttentionArgs a;
  a.batch = s.batch, a.seq = s.seq, a.heads = s.heads, a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim, a.packed = packed != 0, a.lse_len = s.seq;
  a.softmax_scale = s.scale;
  return a;
}

std::vector<Tensor> attention_outputs(ExecContext& c, const AttentionShape& s, DType dt,
                                      std::vector<TensorRef> in, int64_t packed,
                                      const std::string& name) {
  // PyTorch's flash kernel takes one head size for q, k and v (check_head_dim_size_flash):
  // MLA's differing v goes to the efficient kernel (core/model/mla_attention.cc).
  FULLSHARD_CHECK(s.vd() == s.head_dim, name + ": flash attention needs v's head size to be q's");
  bool saves = sac_saves(c, false);
  if (auto* cached = sac_cached(c, saves)) return *cached;
  Tensor o = c.empty({dt, {s.batch, s.seq, s.heads, s.head_dim}}, MemCategory::kActivation, name);
  Tensor lse = c.empty({DType::kFloat32, {s.batch, s.heads, s.seq}}, MemCategory::kActivation,
                       name + " logsumexp");
  c.launch(make_op(OpKind::kAttention, name, std::move(in), {o.ref(), lse.ref()}, attn_flops(s),
                   attn_args(s, packed)));
  sac_store(c, saves, {o, lse});
  return {o, lse};
}

}  // namespace

Value attention(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                const std::string& name) {
  Backend& b = c.backend();
  auto outs = attention_outputs(c, s, q.t.dtype(), {q.t.ref(), k.t.ref(), v.t.ref()}, 0, name);
  bool rg = q.requires_grad() || k.requires_grad() || v.requires_grad();
  Value out = result(c, outs[0], rg);
  if (c.recording() && rg) {
    Tensor qs = q.t, ks = k.t, vs = v.t, o = outs[0], lse = outs[1];
    c.record(Node{name,
                  {q.id, k.id, v.id},
                  {out.id},
                  [&b, qs, ks, vs, o, lse, s, name](std::vector<Tensor>& g) {
                    Tensor dq = grad_like(b, qs, name + " grad_q");
                    Tensor dk = grad_like(b, ks, name + " grad_k");
                    Tensor dv = grad_like(b, vs, name + " grad_v");
                    FlashBwdTemps t = flash_bwd_temps(b, s, qs.dtype(), name);
                    OpCall op = make_op(
                        OpKind::kAttentionBackward, name + " backward",
                        {g[0].ref(), qs.ref(), ks.ref(), vs.ref(), o.ref(), lse.ref()},
                        {dq.ref(), dk.ref(), dv.ref()}, 2.5 * attn_flops(s), attn_args(s, 0));
                    append_flash_temps(op, t);
                    b.launch(kCompute, op);
                    return std::vector<Tensor>{dq, dk, dv};
                  }});
  }
  return out;
}

Value attention_packed(ExecContext& c, Value qkv, const AttentionShape& s,
                       const std::string& name) {
  Backend& b = c.backend();
  auto outs = attention_outputs(c, s, qkv.t.dtype(), {qkv.t.ref()}, 1, name);
  Value out = result(c, outs[0], qkv.requires_grad());
  if (c.recording() && qkv.requires_grad()) {
    Tensor qs = qkv.t, o = outs[0], lse = outs[1];
    c.record(Node{
        name, {qkv.id}, {out.id}, [&b, qs, o, lse, s, name](std::vector<Tensor>& g) {
          // q, k, v are views of one split: flash allocates dq, dk, dv contiguous, then
          // SplitWithSizesBackward concatenates them into a new [B, S, 3D] gradient.
          TensorMeta part{qs.dtype(), {s.batch, s.seq, s.heads * s.head_dim}};
          Tensor dqkv;
          {
            Tensor dq = empty_tensor(b, part, MemCategory::kTemporary, kCompute, name + " grad_q");
            Tensor dk = empty_tensor(b, part, MemCategory::kTemporary, kCompute, name + " grad_k");
            Tensor dv = empty_tensor(b, part, MemCategory::kTemporary, kCompute, name + " grad_v");
            {
              FlashBwdTemps t = flash_bwd_temps(b, s, qs.dtype(), name);
              OpCall op =
                  make_op(OpKind::kAttentionBackward, name + " backward",
                          {g[0].ref(), qs.ref(), o.ref(), lse.ref()},
                          {dq.ref(), dk.ref(), dv.ref()}, 2.5 * attn_flops(s), attn_args(s, 1));
              append_flash_temps(op, t);
              b.launch(kCompute, op);
            }
            dqkv = grad_like(b, qs, name + " grad_qkv");
            OpCall cat = make_op(OpKind::kCopy, name + " split backward (cat)",
                                 {dq.ref(), dk.ref(), dv.ref()}, {dqkv.ref()}, 0,
                                 CopyArgs{.rows = s.batch * s.seq});
            b.launch(kCompute, cat);
          }
          return std::vector<Tensor>{dqkv};
        }});
  }
  return out;
}

// NOTE [SDPA output layout]: the flash / efficient / cuDNN SDPA kernels write O as a
// [B, S, H, hd] tensor and return its transpose(1, 2) view, so torchtitan's
// O.transpose(1, 2).contiguous().view(B, S, D) copies nothing, and its backward is views too.
Value transpose_heads(ExecContext& c, Value o, const AttentionShape& s, const std::string& name) {
  Tensor y = o.t.view({o.t.dtype(), {s.batch, s.seq, s.heads * s.vd()}});
  Value out = result(c, y, o.requires_grad());
  if (c.recording() && o.requires_grad()) {
    TensorMeta meta = o.t.meta();
    c.record(Node{name, {o.id}, {out.id}, [meta](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{g[0].view(meta)};
                  }});
  }
  return out;
}

// ------------------------------------------------------------------ pointwise
namespace {
Value unary_saving_input(ExecContext& c, Value x, OpKind fwd, OpKind bwd, double flops_per_el,
                         const std::string& name) {
  Backend& b = c.backend();
  Tensor y = c.empty(x.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(fwd, name, {x.t.ref()}, {y.ref()}, flops_per_el * el(x.t)));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    Tensor xs = x.t;
    c.record(
        Node{name, {x.id}, {out.id}, [&b, xs, bwd, flops_per_el, name](std::vector<Tensor>& g) {
               Tensor gx = grad_like(b, xs, name + " grad_input");
               b.launch(kCompute, make_op(bwd, name + " backward", {g[0].ref(), xs.ref()},
                                          {gx.ref()}, 2 * flops_per_el * el(xs)));
               return std::vector<Tensor>{gx};
             }});
  }
  return out;
}
}  // namespace

Value silu(ExecContext& c, Value x, const std::string& name) {
  return unary_saving_input(c, std::move(x), OpKind::kSiLU, OpKind::kSiLUBackward, 4, name);
}

Value gelu(ExecContext& c, Value x, const std::string& name) {
  return unary_saving_input(c, std::move(x), OpKind::kGELU, OpKind::kGELUBackward, 8, name);
}

Value mul(ExecContext& c, Value a, Value bv, const std::string& name) {
  Backend& b = c.backend();
  Tensor y = c.empty(a.t.meta(), MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kMul, name, {a.t.ref(), bv.t.ref()}, {y.ref()}, el(y)));
  bool rg = a.requires_grad() || bv.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg) {
    bool need_a = a.requires_grad(), need_b = bv.requires_grad();
    // MulBackward0 saves `other` for self's gradient and `self` for other's: an input that
    // needs no grad (behind a frozen linear) keeps the other one unsaved.
    Tensor as = need_b ? a.t : Tensor(), bs = need_a ? bv.t : Tensor();
    const TensorMeta am = a.t.meta(), bm = bv.t.meta();
    c.record(Node{name,
                  {a.id, bv.id},
                  {out.id},
                  [&b, as, bs, am, bm, need_a, need_b, name](std::vector<Tensor>& g) {
                    Tensor ga, gb;
                    if (need_a) {
                      ga =
                          empty_tensor(b, am, MemCategory::kTemporary, kCompute, name + " grad_a");
                      b.launch(kCompute, make_op(OpKind::kMul, name + " backward_a",
                                                 {g[0].ref(), bs.ref()}, {ga.ref()}, el(ga)));
                    }
                    if (need_b) {
                      gb =
                          empty_tensor(b, bm, MemCategory::kTemporary, kCompute, name + " grad_b");
                      b.launch(kCompute, make_op(OpKind::kMul, name + " backward_b",
                                                 {g[0].ref(), as.ref()}, {gb.ref()}, el(gb)));
                    }
                    return std::vector<Tensor>{ga, gb};
                  }});
  }
  return out;
}

Value add(ExecContext& c, Value a, Value bv, const std::string& name) {
  Tensor y = add_new(c.backend(), a.t, bv.t, MemCategory::kActivation, name);
  bool rg = a.requires_grad() || bv.requires_grad();
  Value out = result(c, y, rg);
  if (c.recording() && rg) {
    // AddBackward passes the incoming gradient to both inputs without copying it.
    c.record(Node{name, {a.id, bv.id}, {out.id}, [](std::vector<Tensor>& g) {
                    return std::vector<Tensor>{g[0], g[0]};
                  }});
  }
  return out;
}

// ------------------------------------------------------------------ loss
Value to_float(ExecContext& c, Value x, const std::string& name) {
  if (x.t.dtype() == DType::kFloat32) return x;
  Backend& b = c.backend();
  Tensor xf = cast(b, kCompute, x.t, DType::kFloat32, MemCategory::kActivation, name + " float");
  Value y = result(c, xf, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{name + " float", {x.id}, {y.id}, [&b, meta, name](std::vector<Tensor>& g) {
                    Tensor gx = empty_tensor(b, meta, MemCategory::kTemporary, kCompute,
                                              name + " grad_logits");
                    copy_into(b, kCompute, gx, g[0], name + " float backward");
                    return std::vector<Tensor>{gx};
                  }});
  }
  return y;
}

Value cross_entropy(ExecContext& c, Value logits, const Tensor& labels, const std::string& name,
                    bool upcast) {
  Backend& b = c.backend();
  const int64_t vocab = logits.t.shape().back();
  const int64_t rows = logits.t.numel() / vocab;
  // .float(): a no-op (same tensor) for fp32 logits, otherwise a copy. Without it
  // (loss=bf16_logits) log_softmax, nll_loss and their gradients stay in the logits' dtype.
  const DType dt = upcast ? DType::kFloat32 : logits.t.dtype();
  // The caller's reference to the logits is the only one left after the copy.
  Value x = upcast ? to_float(c, std::move(logits), name) : std::move(logits);
  // log_softmax saves its output.
  Tensor lp = c.empty({dt, {rows, vocab}}, MemCategory::kActivation, name + " log_softmax");
  c.launch(
      make_op(OpKind::kLogSoftmax, name + " log_softmax", {x.t.ref()}, {lp.ref()}, 4 * el(lp)));
  Value lpv = result(c, lp, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    c.record(Node{name + " log_softmax", {x.id}, {lpv.id}, [&b, lp, name](std::vector<Tensor>& g) {
                    Tensor gx = grad_like(b, lp, name + " log_softmax grad_input");
                    b.launch(kCompute,
                             make_op(OpKind::kLogSoftmaxBackward, name + " log_softmax backward",
                                     {g[0].ref(), lp.ref()}, {gx.ref()}, 4 * el(lp)));
                    return std::vector<Tensor>{gx};
                  }});
  }
  x = Value{};
  // nll_loss (mean): saves the target and the total weight (a scalar).
  Tensor loss = c.empty({dt, {}}, MemCategory::kActivation, name + " loss");
  Tensor total_weight = c.empty({dt, {}}, MemCategory::kActivation, name + " total_weight");
  c.launch(make_op(OpKind::kNllLoss, name + " nll_loss", {lpv.t.ref(), labels.ref()},
                   {loss.ref(), total_weight.ref()}, static_cast<double>(rows)));
  Value out = result(c, loss, lpv.requires_grad());
  if (c.recording() && lpv.requires_grad()) {
    TensorMeta meta = lpv.t.meta();
    c.record(Node{name + " nll_loss",
                  {lpv.id},
                  {out.id},
                  [&b, meta, labels, total_weight, name](std::vector<Tensor>& g) {
                    Tensor gl = empty_tensor(b, meta, MemCategory::kTemporary, kCompute,
                                              name + " nll_loss grad_input");
                    b.launch(kCompute,
                             make_op(OpKind::kNllLossBackward, name + " nll_loss backward",
                                     {g[0].ref(), labels.ref(), total_weight.ref()}, {gl.ref()},
                                     static_cast<double>(meta.numel())));
                    return std::vector<Tensor>{gl};
                  }});
  }
  return out;
}

}  // namespace fullshard::ops

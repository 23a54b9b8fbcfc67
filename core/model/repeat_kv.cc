// gqa=repeat_kv: torchtitan's (2024) repeat_kv before SDPA.
#include "core/model/op_util.h"
#include "core/model/ops.h"
#include "core/runtime/repeat_kv_args.h"

// NOTE [repeat_kv]: torchtitan/models/llama/model.py @ 3f20451:
//   x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
//    .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
// reshape of the expanded view copies (a new [B, S, H, hd] tensor); the unsqueeze / expand /
// clone save nothing, and ExpandBackward sums the gradient over the n_rep copies (sum_to_size:
// a new [B, S, Hkv, hd] tensor). SDPA then runs with n_heads k / v and saves those, not the
// originals. Attention.forward's `keys` / `values` locals hold the copies; the rope'd xk and
// xv are dropped when `xk = keys.transpose(1, 2)` / `xv = values.transpose(1, 2)` rebind them.

namespace fullshard::ops {
using namespace detail;  // NOLINT

Value repeat_kv(ExecContext& c, Value x, int64_t kv_heads, int64_t n_rep, int64_t head_dim,
                const std::string& name) {
  if (n_rep == 1) return x;  // torchtitan: `if n_rep == 1: return x`
  Backend& b = c.backend();
  const Shape& in = x.t.shape();
  Shape s(in.begin(), in.end() - 1);
  s.push_back(in.back() * n_rep);
  Tensor y = c.empty({x.t.dtype(), s}, MemCategory::kActivation, name);
  c.launch(make_op(OpKind::kRepeatKV, name, {x.t.ref()}, {y.ref()}, 0,
                   RepeatKvArgs{.kv_heads = kv_heads, .n_rep = n_rep, .head_dim = head_dim}));
  Value out = result(c, y, x.requires_grad());
  if (c.recording() && x.requires_grad()) {
    TensorMeta meta = x.t.meta();
    c.record(Node{
        name,
        {x.id},
        {out.id},
        [&b, meta, kv_heads, n_rep, head_dim, name](std::vector<Tensor>& g) {
          Tensor gx = empty_tensor(b, meta, MemCategory::kTemporary, kCompute, name + " backward");
          b.launch(
              kCompute,
              make_op(OpKind::kRepeatKVBackward, name + " backward", {g[0].ref()}, {gx.ref()},
                      el(g[0]),
                      RepeatKvArgs{.kv_heads = kv_heads, .n_rep = n_rep, .head_dim = head_dim}));
          return std::vector<Tensor>{gx};
        }});
  }
  return out;
}

}  // namespace fullshard::ops

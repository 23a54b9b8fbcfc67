// rope=complex: torchtitan's (2024) apply_rotary_emb.
#include "core/model/op_util.h"
#include "core/model/ops.h"

// NOTE [Complex RoPE]: torchtitan/models/llama/model.py @ pytorch/torchtitan 3f20451 (the same
// code as Meta's llama reference model.py):
//   xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
//   xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
//   freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
//   xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
//   xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
//   return xq_out.type_as(xq), xk_out.type_as(xk)
// Element pairs are ADJACENT (x[2i], x[2i+1]) rotated by pos * theta^(-2i/hd). Kernels in
// order: cast q, cast k (none in fp32), complex mul q, k (fp32 outputs), type_as q, k (none in
// fp32). Every intermediate is a Python local of apply_rotary_emb, alive until it returns, and
// the caller's xq / xk are reassigned only when it returns. Saved (derivatives.yaml mul.Tensor:
// self is saved only if other requires grad, other only if self does): freqs_cis, a buffer
// (its slice is a view), so nothing is allocated for backward; _to_copy and the view ops save
// nothing. Backward per tensor: cast to fp32 (type_as), grad * freqs_cis.conj() (a new fp32
// tensor; conj() is a lazy view), cast back (.float()).
// The freqs_cis buffer itself is not modelled (nor is it for rope=fused): angles are computed
// on the fly.

namespace fullshard::ops {
using namespace detail;  // NOLINT

namespace {

Value complex_mul(ExecContext& c, Value x, int64_t head_dim, const RopeParams& freqs,
                  const std::string& name) {
  return rotary(c, std::move(x), OpKind::kRoPEComplex, OpKind::kRoPEComplexBackward, 3, head_dim,
                freqs, name, " backward");
}

}  // namespace

std::pair<Value, Value> rope_complex(ExecContext& c, Value q, Value k, int64_t head_dim,
                                     const RopeParams& freqs, const std::string& q_name,
                                     const std::string& k_name) {
  FULLSHARD_CHECK(head_dim % 2 == 0, q_name + ": rope needs an even head_dim");
  Value qf = to_dtype(c, q, DType::kFloat32, q_name + " float");
  Value kf = to_dtype(c, k, DType::kFloat32, k_name + " float");
  Value qo = complex_mul(c, qf, head_dim, freqs, q_name + " mul_freqs_cis");
  Value ko = complex_mul(c, kf, head_dim, freqs, k_name + " mul_freqs_cis");
  Value qr = to_dtype(c, qo, q.t.dtype(), q_name + " type_as");
  Value kr = to_dtype(c, ko, k.t.dtype(), k_name + " type_as");
  return {qr, kr};
}

}  // namespace fullshard::ops

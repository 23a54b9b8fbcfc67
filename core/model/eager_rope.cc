// rope=complex: torchtitan's (2024) apply_rotary_emb.
#include "core/model/op_util.h"
#include "core/model/ops.h"

// NOTE [Complex RoPE]: torchtitan's apply_rotary_emb (torchtitan/models/llama/model.py @
// pytorch/torchtitan 3f20451, the same code as Meta's llama model.py): view_as_complex(x.float()) *
// freqs_cis, view_as_real, flatten, type_as, for q and k. Element pairs are ADJACENT (x[2i],
// x[2i+1]) rotated by pos * theta^(-2i/hd). Kernels in order: cast q, cast k (none in fp32),
// complex mul q, k (fp32 outputs), type_as q, k (none in fp32); every intermediate lives until
// apply_rotary_emb returns, and the caller's xq / xk until then too. Saved: only freqs_cis, a
// buffer, so nothing is allocated for backward. Backward per tensor: cast to fp32, grad *
// freqs_cis.conj() (a new fp32 tensor), cast back. The freqs_cis buffer itself is not modelled (nor
// for rope=fused): angles are computed on the fly. The source lines and derivatives.yaml's rules:
// docs/ops.md, "Complex RoPE in full".

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

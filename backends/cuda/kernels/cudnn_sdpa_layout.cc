// The host side of cuDNN attention (cudnn_sdpa.h): the graph's tensor layouts, the env switch and
// the checks made before cuDNN is asked. Plain C++, built with or without cuDNN.
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/cudnn_sdpa.h"
#include "core/common/error.h"

namespace fullshard::cuda::cudnn_sdpa {

// cuDNN names dims [B, heads, S, D] and takes any strides with D's stride 1: the model's
// [B, S, heads, hd] rows (q_ld / kv_ld elements apart, packed qkv at its column offsets) are that
// graph with the heads and sequence strides swapped, as PyTorch's q.transpose(1, 2) hands them
// to cuDNN (aten/src/ATen/native/cudnn/MHA.cpp). Offsets: see attn_*_index (index_math.h).
GraphLayout graph_layout(const AttnLayout& l) {
  auto rows = [&](int64_t heads, int64_t ld, int64_t off) {
    return TensorLayout{{l.B, heads, l.S, l.hd}, {l.S * ld, l.hd, ld, 1}, off};
  };
  GraphLayout g;
  g.q = rows(l.H, l.q_ld, l.q_off);
  g.k = rows(l.Hkv, l.kv_ld, l.k_off);
  g.v = rows(l.Hkv, l.kv_ld, l.v_off);
  g.o = rows(l.H, l.H * l.hd, 0);
  g.dq = g.o;
  g.dkv = rows(l.Hkv, l.Hkv * l.hd, 0);
  g.stats = TensorLayout{{l.B, l.H, l.S, 1}, {l.H * l.lse_ld, l.lse_ld, 1, 1}, 0};
  return g;
}

bool enabled_by_env(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return true;
  if (v == "off") return false;
  throw InputError("FULLSHARD_CUDNN_ATTENTION", "unknown value '" + v + "'",
                   "set it to 'off' (fullshard's own attention kernels for attention = cudnn) or "
                   "'auto', or unset it");
}

std::string precheck(const AttnLayout& l, std::initializer_list<DType> dtypes,
                     std::initializer_list<const void*> bases) {
  const DType first = *dtypes.begin();
  if (first != DType::kBFloat16 && first != DType::kFloat16)
    return "cuDNN's fused attention takes bf16 or fp16, not " + std::string(dtype_name(first));
  for (DType d : dtypes)
    if (d != first)
      return "q, k, v and the outputs must share one dtype (" + std::string(dtype_name(first)) +
             " and " + std::string(dtype_name(d)) + ")";
  if (l.hd % 8 != 0 || l.hd > 256)
    return "head_dim " + std::to_string(l.hd) + " is not a multiple of 8 up to 256";
  for (const void* b : bases)
    if (reinterpret_cast<uintptr_t>(b) % 16 != 0) return "an operand is not 16-byte aligned";
  return "";
}

}  // namespace fullshard::cuda::cudnn_sdpa

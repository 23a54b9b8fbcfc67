// QLoRA's NF4 kinds on the CPU (NOTE [NF4] in core/tensor/nf4.cc): to_nf4 of a whole bf16
// weight keeping one rank's chunk of each part, and the dequantisation of a whole weight, with
// the core's one implementation (bit for bit torchao's algorithm on bf16).
#include <cstring>

#include "backends/cpu/kernels/kernel_impl.h"
#include "core/runtime/nf4_args.h"
#include "core/tensor/nf4.h"

namespace fullshard::cpu::detail {

void nf4_quantize(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Nf4Args a = Nf4Args::decode(op);
  const Nf4Layout l = a.layout();
  const Nf4Quantized q = fullshard::nf4_quantize(static_cast<const uint16_t*>(in[0]), l);
  // Chunk `index` of `world` of each part (aten.split of the NF4Tensor's inner tensors).
  auto chunk = [&](const void* whole, uint64_t bytes, void* dst) {
    const uint64_t c = bytes / static_cast<uint64_t>(a.world);
    std::memcpy(dst, static_cast<const uint8_t*>(whole) + c * static_cast<uint64_t>(a.index), c);
  };
  chunk(q.data.data(), l.data_bytes(), out[0]);
  chunk(q.scalers.data(), l.scalers_bytes(), out[1]);
  chunk(q.factors.data(), l.factors_bytes(), out[2]);
  std::memcpy(out[3], &q.scaler_mean, 2);
  std::memcpy(out[4], nf4_table_bf16().data(), 32);
}

void nf4_dequantize(const OpCall& op, const Ptrs& in, const Ptrs& out) {
  const Nf4Args a = Nf4Args::decode(op);
  uint16_t mean = 0;
  std::memcpy(&mean, in[3], 2);
  fullshard::nf4_dequantize(static_cast<const uint8_t*>(in[0]), static_cast<const int8_t*>(in[1]),
                            static_cast<const uint16_t*>(in[2]), mean,
                            static_cast<const uint16_t*>(in[4]), a.layout(),
                            static_cast<uint16_t*>(out[0]));
}

}  // namespace fullshard::cpu::detail

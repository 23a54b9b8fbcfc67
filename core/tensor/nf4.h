#pragma once
// QLoRA's NF4 (4-bit NormalFloat) as torchao's NF4Tensor stores it (NOTE [NF4] in nf4.cc): the
// sizes of its parts, and quantisation / dequantisation bit for bit as torchao runs them on a
// bf16 weight. Pure functions: the CPU backend's kernels and the tests call them.
#include <array>
#include <cstdint>
#include <vector>

namespace fullshard {

// The layout of one NF4 tensor of `numel` elements: block_size elements share an absmax scaler,
// scaler_block_size scalers share a quantisation factor (torchao's to_nf4 defaults: 64, 256).
struct Nf4Layout {
  int64_t numel = 0;
  int64_t block_size = 64;
  int64_t scaler_block_size = 256;

  int64_t n_blocks() const { return numel / block_size; }
  int64_t n_scaler_blocks() const { return n_blocks() / scaler_block_size; }
  // Bytes of each inner tensor (torchao's names): quantized_data (two 4-bit codes per byte),
  // quantized_scalers (int8, one per block), quantization_factor (bf16, one per scaler block).
  uint64_t data_bytes() const { return static_cast<uint64_t>(numel / 2); }
  uint64_t scalers_bytes() const { return static_cast<uint64_t>(n_blocks()); }
  uint64_t factors_bytes() const { return static_cast<uint64_t>(n_scaler_blocks()) * 2; }
  // Whether torchao quantises it: the element count splits into whole scaler blocks of whole
  // (even) blocks.
  bool valid() const {
    return numel > 0 && block_size > 0 && block_size % 2 == 0 && scaler_block_size > 0 &&
           numel % (block_size * scaler_block_size) == 0;
  }
};

// The 16 NF4 levels in bf16 (torch.tensor([-1.0, -0.6962, ..., 1.0], dtype=torch.bfloat16)).
const std::array<uint16_t, 16>& nf4_table_bf16();

// torchao's NF4Tensor.from_tensor of a bf16 tensor: every part of the whole tensor.
struct Nf4Quantized {
  std::vector<uint8_t> data;      // [numel / 2], element 2i in the high nibble, 2i+1 in the low
  std::vector<int8_t> scalers;    // [n_blocks]
  std::vector<uint16_t> factors;  // [n_scaler_blocks], bf16
  uint16_t scaler_mean = 0;       // bf16
};
Nf4Quantized nf4_quantize(const uint16_t* x_bf16, const Nf4Layout& layout);

// NF4Tensor.get_original_weight for blocks [0, layout.n_blocks()) of the parts given (the whole
// tensor, or any run of whole scaler blocks): bf16 out[numel].
void nf4_dequantize(const uint8_t* data, const int8_t* scalers, const uint16_t* factors,
                    uint16_t scaler_mean, const uint16_t* table_bf16, const Nf4Layout& layout,
                    uint16_t* out_bf16);

}  // namespace fullshard

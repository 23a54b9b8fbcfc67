#pragma once
// How the model is coded: the choices of a PyTorch training script that change which eager
// ops run, what autograd saves, the temporaries and the FLOPs and bytes, for the same
// architecture (scenario field model.implementation; docs/ops.md, docs/scenario-format.md).
#include <optional>
#include <string>
#include <vector>

namespace fullshard {

// The loss on the root's logits (computed outside the root module, NOTE [Loss outside the
// root] in transformer.cc).
enum class LossImpl : uint8_t {
  kFp32Logits,  // F.cross_entropy(logits.float(), labels): an fp32 copy of the logits
  kBf16Logits,  // F.cross_entropy(logits, labels): log_softmax in the logits' dtype
  kFp32Output,  // the model returns self.output(h).float() (torchtitan until mid-2024): the fp32
                // copy is made inside the root's forward and is the tensor the loop holds
  kChunked,     // torchtitan's ChunkedLossWrapper: the model skips the output projection; the
                // output, an fp32 cross-entropy and its backward run per token chunk
                // (core/train/chunked_loss.h)
};

enum class NormImpl : uint8_t {
  kFused,  // torch._fused_rms_norm (nn.RMSNorm / F.rms_norm on PyTorch >= 2.8)
  kEager,  // x.float(), pow(2).mean(-1), rsqrt, mul, type_as, * weight (torchtitan 2024, HF)
};

enum class RopeImpl : uint8_t {
  kFused,       // one fused rotary kernel, rotate-half pairing, fp32 math, saves nothing
  kComplex,     // view_as_complex(x.float()) * freqs_cis, type_as: adjacent pairs (torchtitan)
  kRotateHalf,  // q * cos + rotate_half(q) * sin in the model dtype (HF transformers)
};

enum class GqaImpl : uint8_t {
  kNative,    // SDPA with the kv heads as they are (flash-attn GQA / enable_gqa=True)
  kRepeatKV,  // repeat_kv materialises k and v at the query head count before SDPA
};

// What the loss is divided by (NOTE [Global valid tokens] in core/train/training_program.cc).
enum class LossNormalization : uint8_t {
  kMean,               // F.cross_entropy's mean over this rank's micro-batch (and / k under
                       // gradient accumulation); FSDP2 averages the gradients over ranks
  kGlobalValidTokens,  // torchtitan: the sum over this rank's tokens / the step's valid tokens
                       // over every data-parallel rank, with FSDP2's gradient division off
                       // (set_gradient_divide_factor(1.0): the reductions sum)
};

enum class AttentionImpl : uint8_t {
  kFlash,      // SDPBackend.FLASH_ATTENTION
  kCudnn,      // SDPBackend.CUDNN_ATTENTION (core/model/attention_variants.h)
  kEfficient,  // SDPBackend.EFFICIENT_ATTENTION: no GQA (k / v need the query heads)
};

struct ModelImplementation {
  std::string preset = "fullshard";  // the preset the fields started from
  LossImpl loss = LossImpl::kFp32Logits;
  int loss_chunks = 8;  // loss = chunked: ChunkedLossWrapper.Config.num_chunks
  // The logits stay referenced until backward ends (HF: the model's output holds them).
  bool keep_logits = false;
  NormImpl rms_norm = NormImpl::kFused;
  RopeImpl rope = RopeImpl::kFused;
  GqaImpl gqa = GqaImpl::kNative;
  AttentionImpl attention = AttentionImpl::kFlash;
  // torch.compile(block, fullgraph=True) of each Llama block (torchtitan apply_compile):
  // fused pointwise regions, the partitioner's saved tensors (core/model/compiled_block.h)
  bool compile = false;
  LossNormalization loss_normalization = LossNormalization::kMean;
};

// The named presets, in documentation order ("fullshard" first: the default).
const std::vector<std::string>& implementation_presets();
// nullopt when `name` is not a preset. A preset may use variants that are not built yet:
// unbuilt_variants() names them.
std::optional<ModelImplementation> find_implementation_preset(const std::string& name);
// "loss=chunked", "attention=cudnn", ... for every chosen variant fullshard does not model yet.
std::vector<std::string> unbuilt_variants(const ModelImplementation& m);

// Field names and the spellings of their values, as the scenario format writes them.
const std::vector<std::string>& implementation_fields();  // without "preset"
// The spellings of one enum field ("loss", "rms_norm", "rope", "gqa", "attention").
const std::vector<std::string>& implementation_values(const std::string& field);
// Sets enum `field` to `value`; false when `value` is not one of implementation_values(field).
bool set_implementation_value(ModelImplementation& m, const std::string& field,
                              const std::string& value);

const char* loss_impl_name(LossImpl v);
const char* norm_impl_name(NormImpl v);
const char* rope_impl_name(RopeImpl v);
const char* gqa_impl_name(GqaImpl v);
const char* attention_impl_name(AttentionImpl v);
const char* loss_normalization_name(LossNormalization v);

}  // namespace fullshard

#pragma once
// The module tree: named modules owning named parameters, as nn.Module. fully_shard is
// applied over it bottom-up; the model's forward calls child modules through
// ExecContext::call_module so that FSDP's hooks run, as nn.Module.__call__ runs them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/model/float8_config.h"
#include "core/runtime/backend_storage.h"

namespace fullshard {

// How a parameter is reached at run time. FSDP binds every parameter to an FSDPParam; the
// binding hands out the unsharded tensor while the module is unsharded and receives the
// gradient (PyTorch's AccumulateGrad on the unsharded nn.Parameter).
class ParamBinding {
 public:
  virtual ~ParamBinding() = default;
  virtual Tensor unsharded() const = 0;
  virtual DType compute_dtype() const = 0;
  // True when .grad already exists (the new gradient is then added into it).
  virtual bool has_unsharded_grad() const = 0;
  virtual void accumulate_grad(Backend& backend, Tensor grad) = 0;
  // The scale of a float8 unsharded weight (FSDP2's float8 all-gather: the metadata
  // fsdp_pre_all_gather returned), an fp32 [1] tensor; empty when unsharded() is not float8.
  virtual Tensor float8_scale() const { return Tensor(); }
  // An NF4 weight's unsharded parts (NOTE [NF4] in core/tensor/nf4.cc), in kNF4Dequantize's
  // input order: quantized_data, quantized_scalers, quantization_factor, scaler_mean, table.
  virtual std::vector<Tensor> nf4_weight() const { return {}; }
};

// How a parameter's initial values are drawn (the model's init_weights()).
enum class ParamInit : uint8_t { kNormal, kOnes, kZeros, kUniform };

// How tensor parallelism placed a parameter over the tp mesh dim (its DTensor placement
// there): replicated, or sharded along dim 0 (ColwiseParallel's weight, a vocab-parallel
// embedding) or dim 1 (RowwiseParallel's weight). NOTE [Tensor-parallel plan] in
// core/model/tensor_parallel.cc.
enum class TpPlacement : uint8_t { kReplicate, kShard0, kShard1 };

struct Param {
  std::string fqn;  // "layers.0.attention.wq.weight"
  Shape shape;      // the local shape: this rank's tensor-parallel shard (FSDP shards it)
  TpPlacement tp_placement = TpPlacement::kReplicate;
  int tp_degree = 1;  // size of the tp mesh dim (1: no tensor parallelism)
  int tp_index = 0;   // this rank's coordinate along it
  // A Shard(0) parameter made of tp_blocks stacked blocks, each sharded over tp on its own
  // (GPT-2's fused c_attn: q, k and v): the local tensor stacks this rank's rows of every
  // block. NOTE [Fused qkv under tensor parallelism] in core/model/tensor_parallel.cc.
  int tp_blocks = 1;
  // A replicated parameter whose gradient already comes out Replicate (RowwiseParallel's
  // bias): FSDP does not all-reduce it over tp, as it does a norm weight's Partial gradient.
  bool tp_grad_replicated = false;
  // Expert parallelism (torchtitan's ExpertParallel: distribute_tensor(param, ep_mesh,
  // [Shard(0)])): a routed expert weight holds experts [ep_index * E / ep, (ep_index + 1) * E /
  // ep) of the ep_degree-way split of its dim 0. ep_degree 1: not an expert-parallel parameter.
  int ep_degree = 1;
  int ep_index = 0;
  // The full shape (before tensor and expert parallelism).
  Shape global_shape() const;
  ParamBinding* binding = nullptr;
  // A converted linear's weight (torchao Float8Linear, core/model/float8_linear.h): its recipe,
  // and whether FSDP2 all-gathers it in float8 (WeightWithDynamicFloat8CastTensor).
  // float8_compiled: inside a torch.compile'd block, whose casts fuse (NOTE [Float8 casts]).
  Float8Recipe float8 = Float8Recipe::kNone;
  bool float8_all_gather = false;
  bool float8_compiled = false;
  // requires_grad=False (training.frozen, or every base parameter under model.lora): no
  // gradient, no reduce-scatter, no optimizer state (NOTE [Frozen parameters] in
  // core/model/lora.cc). `dtype` is what its sharded storage holds (the original dtype FSDP2
  // sees): fp32, or training.frozen_dtype for a frozen parameter.
  bool requires_grad = true;
  DType dtype = DType::kFloat32;
  // QLoRA's NF4 base weight (training.frozen_dtype "nf4"; NOTE [NF4] in core/tensor/nf4.cc): a
  // frozen linear's weight stored as torchao's NF4Tensor of these block sizes (0: not NF4);
  // `dtype` is then bf16, its dequantised dtype.
  int64_t nf4_block_size = 0;
  int64_t nf4_scaler_block_size = 0;
  bool nf4() const { return nf4_block_size > 0; }
  ParamInit init = ParamInit::kNormal;
  double init_std = 0.02;  // kNormal: N(0, init_std^2)
  // kUniform: U(-init_bound, init_bound) (a LoRA A matrix: PEFT's kaiming_uniform_(a=sqrt(5))).
  double init_bound = 0;
  // NOTE [Sharding-independent init]: element i of the full parameter is drawn from a
  // counter-based generator keyed by (init_key, i), so every rank initialises exactly its
  // rows of the same tensor an unsharded run would, whatever the mesh. Set from the fqn and
  // the training seed (set_init_seed).
  uint64_t init_key = 0;
};

// A registered buffer (nn.Module.register_buffer): module state that is no parameter, so
// FSDP2 neither shards nor all-gathers it and every rank holds it whole (MoE's expert_bias and
// tokens_per_expert: NOTE [Expert bias] in core/model/expert_bias.h). `tensor` is its device
// storage once allocated (allocate_buffers); `persistent` buffers belong in a state dict.
struct ModuleBuffer {
  std::string fqn;  // "layers.1.moe.expert_bias"
  TensorMeta meta;
  bool persistent = true;
  Tensor tensor;
};

struct Module {
  std::string fqn;            // "" for the root, "layers.3", "layers.3.attention", ...
  std::string kind;           // "Transformer", "TransformerBlock", "Attention", ...
  std::vector<Param> params;  // directly owned parameters
  std::vector<ModuleBuffer> buffers;  // directly owned buffers
  std::vector<std::unique_ptr<Module>> children;

  Module* add_child(std::string name, std::string kind_name);
  Param& add_param(std::string name, Shape shape);
  Param& param(const std::string& name);   // directly owned, by short name
  ModuleBuffer& add_buffer(std::string name, TensorMeta meta, bool persistent);
  ModuleBuffer& buffer(const std::string& name);  // directly owned, by short name
  Module& child(const std::string& name);  // by short name
  // Every parameter in this subtree, pre-order (this module's own first).
  void for_each_param(const std::function<void(Param&)>& fn);
  void for_each_module(const std::function<void(Module&)>& fn);
  // Every persistent buffer in this subtree (the state_dict's buffers), pre-order.
  void for_each_persistent_buffer(const std::function<void(ModuleBuffer&)>& fn);
};

// Keys every parameter's init generator by its fqn and `seed` (NOTE [Sharding-independent init]).
void set_init_seed(Module& root, uint64_t seed);

}  // namespace fullshard

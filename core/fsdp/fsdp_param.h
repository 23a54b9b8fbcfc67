#pragma once
// One sharded parameter (FSDP2's FSDPParam, _fsdp_param.py): its padded sharded storage,
// its unsharded storage while unsharded, its post-forward shard (int reshard_after_forward)
// and its gradients. It is the ParamBinding the model reads the parameter through.
#include "core/fsdp/shard_layout.h"
#include "core/model/module.h"
#include "core/model/optimizer_param.h"

namespace fullshard {

enum class ShardedState : uint8_t { kSharded, kShardedPostForward, kUnsharded };

class FSDPParam : public ParamBinding, public OptimizerParam {
 public:
  // Allocates the padded sharded storage (on the host with CPU offload). `shard_dim`: the
  // placement shard_placement_fn gave (NOTE [Shard(i) placement] in fsdp_param.cc). `full`: the
  // parameter's full tensor on the device (training.init "device"), which this rank's rows are
  // copied from; null: they are initialised in place.
  FSDPParam(Backend& backend, Param& param, int shard_world, int shard_rank, DType orig_dtype,
            DType param_dtype, bool offload, int shard_dim = 0, const Tensor* full = nullptr);

  // ---- ParamBinding ----
  Tensor unsharded() const override;
  DType compute_dtype() const override { return param_dtype_; }
  bool has_unsharded_grad() const override { return static_cast<bool>(unsharded_grad_); }
  void accumulate_grad(Backend& backend, Tensor grad) override;
  Tensor float8_scale() const override { return float8_scale_; }

  // ---- OptimizerParam ----
  const Param& param() const override { return *param_; }
  Tensor local_tensor() const override { return sharded_local(); }
  Tensor& local_grad() override { return sharded_grad_; }
  const Tensor& local_grad() const override { return sharded_grad_; }

  const Shape& shape() const { return param_->shape; }
  // FSDP2's float8 all-gather (torchao WeightWithDynamicFloat8CastTensor, NOTE [Float8
  // all-gather] in float8_all_gather.cc): the all-gather input and the unsharded weight are
  // float8 e4m3 data with an fp32 [1] scale instead of param_dtype.
  bool float8_all_gather() const { return param_->float8_all_gather; }
  DType all_gather_dtype() const {
    if (nf4()) return DType::kUInt8;
    return float8_all_gather() ? DType::kFloat8E4M3FN : param_dtype_;
  }
  // QLoRA's NF4 base weight (torchao NF4Tensor, NOTE [NF4 all-gather] in fsdp_param.cc): its
  // shard is three tensors, fsdp_pre_all_gather's outputs in torchao's order (quantized_scalers,
  // quantization_factor, quantized_data), all-gathered as bytes into three unsharded tensors;
  // scaler_mean and the level table are metadata every rank keeps whole.
  bool nf4() const { return param_->nf4(); }
  const std::vector<Tensor>& nf4_sharded_parts() const { return nf4_sharded_; }
  std::vector<Tensor> nf4_weight() const override;
  // The scale of the unsharded float8 weight, allocated from the copy-in stream's pool and read
  // by compute: when the weight reshards (or a new all-gather replaces it) it is retired, and
  // released by the next root pre-forward, after the all-gather streams wait for the current
  // stream (NOTE [Float8 all-gather]).
  void set_float8_scale(Tensor scale) {
    retire_float8_scale();
    float8_scale_ = std::move(scale);
  }
  void release_retired_float8_scales() { retired_scales_.clear(); }
  // precompute_float8_dynamic_scale_for_fsdp's scale (a view of the stacked scales), or empty.
  const Tensor& precomputed_float8_scale() const { return precomputed_scale_; }
  void set_precomputed_float8_scale(Tensor scale) { precomputed_scale_ = std::move(scale); }
  DType orig_dtype() const { return orig_dtype_; }
  DType param_dtype() const { return param_dtype_; }
  bool offload() const { return offload_; }
  // CPUOffloadPolicy.pin_memory: false makes the gradient's D2H copy blocking (NOTE [Pageable
  // offload] in collectives.cc).
  bool pin_memory() const { return pin_memory_; }
  void set_pin_memory(bool pin) { pin_memory_ = pin; }
  int64_t padded_sharded_numel() const { return padded_numel_; }
  int64_t unsharded_storage_numel() const { return padded_numel_ * world_; }
  const Shape& sharded_shape() const { return sharded_shape_; }  // unpadded local shard
  ShardedState state() const { return state_; }
  int shard_dim() const { return shard_dim_; }
  int shard_world() const { return world_; }
  int shard_rank() const { return rank_; }  // this rank's index in its shard group

  const Tensor& sharded_data() const { return sharded_data_; }  // padded, 1-D
  // Local (unpadded) view of the sharded data: the optimizer's parameter.
  Tensor sharded_local() const;

  // Unshard / reshard (storage resize_ in FSDP2).
  void alloc_unsharded(Backend& b);  // alloc_storage, default stream
  void free_unsharded() {
    unsharded_storage_ = Tensor();
    nf4_unsharded_.clear();
    retire_float8_scale();
  }
  // The unsharded tensors the all-gather copies out into: one, or an NF4 weight's three.
  std::vector<Tensor> all_gather_outputs() const {
    return nf4() ? nf4_unsharded_ : std::vector<Tensor>{unsharded_storage_};
  }
  const Tensor& unsharded_storage() const { return unsharded_storage_; }
  void set_state(ShardedState s) { state_ = s; }

  // Post-forward shard: a clone of this rank's 1/N slice of the unsharded storage.
  Tensor& post_forward_shard() { return post_forward_shard_; }

  // Gradients.
  Tensor take_unsharded_grad() { return std::move(unsharded_grad_); }
  Tensor& unsharded_accumulated_grad() { return accumulated_grad_; }
  Tensor& sharded_grad() { return sharded_grad_; }
  const Tensor& sharded_grad() const { return sharded_grad_; }

 private:
  Param* param_;
  int world_;
  int rank_;
  int shard_dim_;
  DType orig_dtype_;
  DType param_dtype_;
  bool offload_;
  bool pin_memory_ = true;
  int64_t padded_numel_;
  Shape sharded_shape_;
  ShardedState state_ = ShardedState::kSharded;
  Tensor sharded_data_;
  Tensor unsharded_storage_;
  Tensor post_forward_shard_;
  Tensor unsharded_grad_;
  Tensor accumulated_grad_;
  Tensor sharded_grad_;
  void retire_float8_scale() {
    if (float8_scale_) retired_scales_.push_back(std::move(float8_scale_));
    float8_scale_ = Tensor();
  }
  Tensor float8_scale_;
  std::vector<Tensor> retired_scales_;
  std::vector<Tensor> nf4_sharded_;    // scalers, factors, data (this rank's chunk)
  std::vector<Tensor> nf4_unsharded_;  // the same three, whole
  Tensor nf4_mean_;                    // scaler_mean, bf16 [1]
  Tensor nf4_table_;                   // the 16 levels, bf16 [16]
  void init_nf4(Backend& b);
  Tensor precomputed_scale_;
};

}  // namespace fullshard

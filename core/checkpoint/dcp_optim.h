#pragma once
// AdamW's state in DCP's own format: the keys and values torch.distributed.checkpoint.state_dict
// .get_optimizer_state_dict gives an FSDP2 model's torch.optim.AdamW, as dcp.save flattens them
// (docs/checkpoints.md, "Optimizer state").
//
// NOTE [AdamW state in DCP]: get_optimizer_state_dict keys the state by parameter FQN (the
// model state dict's names) and dcp.save's DefaultSavePlanner flattens nested dicts and lists
// with '.': `state.<fqn>.exp_avg` and `state.<fqn>.exp_avg_sq` are DTensors with their
// parameter's placements (FSDP2's Shard(0): the same chunks as the parameter), and
// `state.<fqn>.step` is a plain 0-d float32 tensor (torch.optim's _get_scalar_dtype(), not
// capturable, not fused), the same on every rank, so DCP's dedup keeps one copy: one chunk
// with no offsets. The param group's Python values are BytesStorageMetadata entries, each
// torch.save of the value: `param_groups.0.<key>` (lr, betas, ..., and `params`, the FQNs) in
// the default layout, `param_groups.<fqn>.<key>` per parameter with
// StateDictOptions(flatten_optimizer_state_dict=True) (torchtitan's). dcp.load reads only
// the keys the loading state dict has, so both layouts are written and either loads. torch's
// Optimizer.load_state_dict takes every hyperparameter from the checkpoint, so the group is
// written as torch.optim.AdamW's own with fullshard's values (foreach and fused None: PyTorch
// picks its default implementation). Reading checks, before any worker starts, that a folder
// with optimizer state holds exactly AdamW's three entries for every trainable parameter.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/checkpoint_metadata.h"
#include "core/checkpoint/dcp.h"
#include "core/checkpoint/pickle.h"

namespace fullshard {

// "state.<fqn>.<what>" (what: exp_avg, exp_avg_sq, step).
std::string dcp_optim_state_key(const std::string& fqn, const std::string& what);
// planner_data's path of that key: ('state', fqn, what).
PyPtr dcp_optim_state_path(const std::string& fqn, const std::string& what);

// The values of one torch.optim.AdamW param group, without "params", in the order
// torch.optim.AdamW's defaults list them.
std::vector<std::pair<std::string, PyPtr>> adamw_param_group(const CheckpointAdamW& a);

// A param group's BytesStorageMetadata entries: key, torch.save archive, planner path. Both
// layouts of NOTE [AdamW state in DCP] for the parameters `fqns` (in model order).
struct DcpBytesEntry {
  std::string fqn;
  std::string archive;
  PyPtr path;
};
std::vector<DcpBytesEntry> adamw_param_group_entries(const CheckpointAdamW& a,
                                                     const std::vector<std::string>& fqns);

// The 0-d float32 step tensor's torch.save archive.
std::string dcp_step_archive(int64_t step);

// Whether `m` holds optimizer state: any key starting with "state.".
bool dcp_has_optimizer_state(const DcpMetadata& m);

// Checks that `m` holds AdamW's state for exactly the parameters `params` (name in the folder,
// expected global shape): `state.<name>.exp_avg` and `.exp_avg_sq` of that shape in F32,
// `state.<name>.step` a 0-d or 1-element F32 / F64 tensor, and no other `state.<name>.` key
// (another optimizer's, such as SGD's momentum_buffer or amsgrad's max_exp_avg_sq); state of a
// name that is none of `params` is ignored, as the weights of tensors the model does not use
// are. Throws InputError naming `source` and the key.
void check_dcp_adamw_state(const DcpMetadata& m,
                           const std::vector<std::pair<std::string, Shape>>& params,
                           const std::string& source);

// AdamW's step count: every `state.<name>.step` of `names`, which must be the same integer
// >= 0. Throws InputError naming the key.
int64_t read_dcp_adamw_step(DcpReader& r, const std::vector<std::string>& names);

}  // namespace fullshard

#include "core/checkpoint/dcp_optim.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/checkpoint/torch_save.h"
#include "core/common/error.h"

namespace fullshard {
namespace {

constexpr const char* kState = "state.";
constexpr const char* kAdamWStates[] = {"exp_avg", "exp_avg_sq", "step"};
constexpr const char* kFix =
    "give a DCP checkpoint of torch.optim.AdamW's state for this model "
    "(get_optimizer_state_dict of the same model), or one without optimizer state";

}  // namespace

std::string dcp_optim_state_key(const std::string& fqn, const std::string& what) {
  return kState + fqn + "." + what;
}

PyPtr dcp_optim_state_path(const std::string& fqn, const std::string& what) {
  return py_tuple({py_str("state"), py_str(fqn), py_str(what)});
}

std::vector<std::pair<std::string, PyPtr>> adamw_param_group(const CheckpointAdamW& a) {
  return {{"lr", py_float(a.lr)},
          {"betas", py_tuple({py_float(a.beta1), py_float(a.beta2)})},
          {"eps", py_float(a.eps)},
          {"weight_decay", py_float(a.weight_decay)},
          {"amsgrad", py_bool(false)},
          {"foreach", py_none()},
          {"maximize", py_bool(false)},
          {"capturable", py_bool(false)},
          {"differentiable", py_bool(false)},
          {"fused", py_none()},
          {"decoupled_weight_decay", py_bool(true)}};
}

std::vector<DcpBytesEntry> adamw_param_group_entries(const CheckpointAdamW& a,
                                                     const std::vector<std::string>& fqns) {
  std::vector<DcpBytesEntry> out;
  const auto group = adamw_param_group(a);
  // get_optimizer_state_dict's default: param_groups is a list of dicts whose "params" are FQNs.
  for (const auto& [k, v] : group)
    out.push_back({"param_groups.0." + k, torch_save_object(*v),
                   py_tuple({py_str("param_groups"), py_int(0), py_str(k)})});
  std::vector<PyPtr> names;
  for (const auto& f : fqns) names.push_back(py_str(f));
  out.push_back({"param_groups.0.params", torch_save_object(*py_list(std::move(names))),
                 py_tuple({py_str("param_groups"), py_int(0), py_str("params")})});
  // flatten_optimizer_state_dict=True: one copy of the group's values per parameter.
  for (const auto& f : fqns)
    for (const auto& [k, v] : group) {
      const std::string key = "param_groups." + f + "." + k;
      out.push_back({key, torch_save_object(*v), py_tuple({py_str(key)})});
    }
  return out;
}

std::string dcp_step_archive(int64_t step) {
  const float v = static_cast<float>(step);
  return torch_save_archive("F32", {}, std::string_view(reinterpret_cast<const char*>(&v), 4),
                            "--dcp");
}

bool dcp_has_optimizer_state(const DcpMetadata& m) {
  for (const auto& t : m.tensors)
    if (t.fqn.rfind(kState, 0) == 0) return true;
  for (const auto& k : m.non_tensors)
    if (k.rfind(kState, 0) == 0) return true;
  return false;
}

void check_dcp_adamw_state(const DcpMetadata& m,
                           const std::vector<std::pair<std::string, Shape>>& params,
                           const std::string& source) {
  std::map<std::string, const Shape*> want;  // key -> the shape it must have (null: the step)
  for (const auto& [name, shape] : params)
    for (const char* s : kAdamWStates)
      want[dcp_optim_state_key(name, s)] = std::strcmp(s, "step") == 0 ? nullptr : &shape;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw InputError(source + ": '" + key + "'", what, kFix);
  };
  for (const auto& k : m.non_tensors)
    if (k.rfind(kState, 0) == 0) fail(k, "is a Python value, not AdamW's tensor state");
  std::set<std::string> seen;
  for (const auto& t : m.tensors) {
    if (t.fqn.rfind(kState, 0) != 0) continue;
    const auto it = want.find(t.fqn);
    if (it == want.end()) {
      std::string owner;  // the longest parameter name the key starts with
      for (const auto& [name, shape] : params)
        if (t.fqn.rfind(kState + name + ".", 0) == 0 && name.size() > owner.size()) owner = name;
      if (owner.empty()) continue;  // a tensor the model does not use: ignored, as its weight is
      fail(t.fqn, "is '" + t.fqn.substr(std::strlen(kState) + owner.size() + 1) +
                      "', not AdamW's state (exp_avg, exp_avg_sq, step): another optimizer's "
                      "(SGD's momentum_buffer, amsgrad's max_exp_avg_sq)");
    }
    seen.insert(t.fqn);
    if (!it->second) {  // the step: 0-d (torch.optim) or one element
      if (t.shape.size() > 1 || (t.shape.size() == 1 && t.shape[0] != 1) ||
          (t.dtype != "F32" && t.dtype != "F64"))
        fail(t.fqn, "is " + t.dtype + " " + shape_str(t.shape) +
                        ", not the 0-d float32 or float64 step torch.optim stores");
      continue;
    }
    if (t.dtype != "F32")
      fail(t.fqn, "is " + t.dtype + ", not F32 (fullshard's AdamW state is fp32)");
    if (t.shape != *it->second)
      fail(t.fqn, "is " + shape_str(t.shape) + " but its parameter is " + shape_str(*it->second));
  }
  for (const auto& [key, shape] : want)
    if (!seen.count(key))
      fail(key, "is missing: the checkpoint holds optimizer state, but not this");
}

int64_t read_dcp_adamw_step(DcpReader& r, const std::vector<std::string>& names) {
  int64_t step = -1;
  std::string first;
  for (const auto& name : names) {
    const std::string key = dcp_optim_state_key(name, "step");
    const DcpTensor* t = r.metadata().find(key);
    FULLSHARD_CHECK(t, "read_dcp_adamw_step: checked before: " + key);
    double v = 0;
    const ChunkBox box{Shape(t->shape.size(), 0), t->shape};
    if (t->dtype == "F32") {
      float f = 0;
      r.read_box(key, box, &f, 4);
      v = f;
    } else {
      r.read_box(key, box, &v, 8);
    }
    if (!(v >= 0) || v != std::floor(v) || v > 1e15)
      throw InputError(r.folder() + ": '" + key + "'",
                       "is " + std::to_string(v) + ", not a step count", kFix);
    const auto s = static_cast<int64_t>(v);
    if (step >= 0 && s != step)
      throw InputError(
          r.folder() + ": '" + key + "'",
          "is step " + std::to_string(s) + " but '" + first + "' is step " + std::to_string(step),
          "fullshard's AdamW has one step count: give a checkpoint whose parameters "
          "all stepped together");
    if (step < 0) first = key;
    step = s;
  }
  return std::max<int64_t>(step, 0);
}

}  // namespace fullshard

#include "core/model/module.h"

#include "core/common/error.h"

namespace fullshard {

static std::string join(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "." + b;
}

Module* Module::add_child(std::string name, std::string kind_name) {
  auto m = std::make_unique<Module>();
  m->fqn = join(fqn, name);
  m->kind = std::move(kind_name);
  children.push_back(std::move(m));
  return children.back().get();
}

Param& Module::add_param(std::string name, Shape shape) {
  Param p;
  p.fqn = join(fqn, name);
  p.shape = std::move(shape);
  params.push_back(std::move(p));
  return params.back();
}

Shape Param::global_shape() const {
  Shape g = shape;
  if (tp_placement == TpPlacement::kShard0) g.at(0) *= tp_degree;
  if (tp_placement == TpPlacement::kShard1) g.at(1) *= tp_degree;
  if (ep_degree > 1) g.at(0) *= ep_degree;
  return g;
}

Param& Module::param(const std::string& name) {
  std::string full = join(fqn, name);
  for (auto& p : params)
    if (p.fqn == full) return p;
  check_failed("parameter exists", __FILE__, __LINE__, "no parameter " + full);
}

ModuleBuffer& Module::add_buffer(std::string name, TensorMeta meta, bool persistent) {
  ModuleBuffer b;
  b.fqn = join(fqn, name);
  b.meta = std::move(meta);
  b.persistent = persistent;
  buffers.push_back(std::move(b));
  return buffers.back();
}

ModuleBuffer& Module::buffer(const std::string& name) {
  std::string full = join(fqn, name);
  for (auto& b : buffers)
    if (b.fqn == full) return b;
  check_failed("buffer exists", __FILE__, __LINE__, "no buffer " + full);
}

Module& Module::child(const std::string& name) {
  std::string full = join(fqn, name);
  for (auto& c : children)
    if (c->fqn == full) return *c;
  check_failed("module exists", __FILE__, __LINE__, "no module " + full);
}

void Module::for_each_param(const std::function<void(Param&)>& fn) {
  for (auto& p : params) fn(p);
  for (auto& c : children) c->for_each_param(fn);
}

void Module::for_each_module(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& c : children) c->for_each_module(fn);
}

void Module::for_each_persistent_buffer(const std::function<void(ModuleBuffer&)>& fn) {
  for (auto& b : buffers)
    if (b.persistent) fn(b);
  for (auto& c : children) c->for_each_persistent_buffer(fn);
}

void set_init_seed(Module& root, uint64_t seed) {
  root.for_each_param([seed](Param& p) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fqn
    for (unsigned char ch : p.fqn) h = (h ^ ch) * 1099511628211ull;
    p.init_key = h ^ (seed * 0x9e3779b97f4a7c15ull);
  });
}

}  // namespace fullshard

// cuDNN's fused attention for `attention = cudnn` (cudnn_sdpa.h).
//
// NOTE [cuDNN attention on the CUDA backend]: `attention = cudnn` is PyTorch's
// _scaled_dot_product_cudnn_attention, first in torchtitan's SDPA priority (the torchtitan
// preset, core/model/implementation.cc). Where fullshard is built with cuDNN and its C++ frontend
// (tools/deps.sh), the CUDA backend runs the same thing: the graph PyTorch builds in
// aten/src/ATen/native/cudnn/MHA.cpp (build_graph / build_graph_backward: io bf16 or fp16, fp32
// intermediates and compute, causal mask, attention scale 1 / sqrt(hd), stats generated in
// training, q / k / v / o in their [B, S, heads, hd] memory seen as [B, heads, S, hd]; GQA native,
// dk / dv at the kv heads), its plan picked by NOTE [cuDNN plan choice] (cudnn_sdpa_choice.cc: the
// heuristics' first plan that fits the workspace block the model gives the op), built once per
// shape and thread and cached: cuDNN's execution plans are not guaranteed thread-safe, so PyTorch
// keeps these caches thread_local, as here, with one cuDNN handle per thread and device (PyTorch's
// handle pool). Memory stays the model's (NOTE [cuDNN SDPA workspace],
// core/runtime/cudnn_sdpa_workspace.cc): the outputs are the op's, and the plan runs in the op's
// workspace temporary (the backward's; the forward's is 0 bytes). A shape or dtype cuDNN does not
// take, no plan within the block, or a cuDNN that fails to load or build, declines the call: one
// line on stderr per shape and reason, counted (NOTE [Attention path counter]), then the flash
// kernels (NOTE [SDPA variants on the CUDA backend], plan.cc) write the same outputs into the same
// memory, so predicted == measured holds either way and the line says what to model. The backward
// accumulates dq with atomics in its dQ_accum, so its dq is not bit-reproducible run to run, as
// PyTorch's is not. FULLSHARD_CUDNN_ATTENTION=off runs the flash kernels for every call (gpu-check
// compares both).
#include "backends/cuda/kernels/cudnn_sdpa.h"

#include "backends/cuda/kernels/cudnn_sdpa_choice.h"
#include "core/runtime/cudnn_sdpa_workspace.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <vector>

#include "core/common/error.h"

#if FULLSHARD_HAVE_CUDNN
#include <cudnn.h>

#include <cudnn_frontend.h>

#include <array>
#include <map>
#include <memory>
#include <unordered_map>
#endif

namespace fullshard::cuda::cudnn_sdpa {
namespace {

std::atomic<int64_t> n_forward{0}, n_backward{0}, n_declined{0};

PathCounts& path_counts_of_process() {
  static PathCounts* c = new PathCounts;  // leaked: read while the process exits
  return *c;
}

std::string shape_text(const AttnLayout& l) {
  return "B " + std::to_string(l.B) + ", S " + std::to_string(l.S) + ", heads " +
         std::to_string(l.H) + "/" + std::to_string(l.Hkv) + ", head_dim " + std::to_string(l.hd);
}

// Counts the call as declined; says why on stderr the first time for this shape (quiet: the env
// switch, which the user set).
bool decline(const char* direction, const AttnLayout& l, const std::string& why,
             bool quiet = false) {
  ++n_declined;
  const std::string shape = shape_text(l);
  path_counts_of_process().declined(std::string(direction) == "backward", shape, why);
  static std::mutex m;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(m);
  if (!quiet && said.insert(std::string(direction) + shape + why).second)
    std::fprintf(stderr,
                 "fullshard: cuDNN attention %s not run (%s): %s; fullshard's flash kernels run it "
                 "instead\n",
                 direction, shape.c_str(), why.c_str());
  return false;
}

bool env_enabled() {
  static const bool on = enabled_by_env(std::getenv("FULLSHARD_CUDNN_ATTENTION"));
  return on;
}

#if FULLSHARD_HAVE_CUDNN
namespace fe = cudnn_frontend;
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// What the graph and its plan depend on: the offsets of packed q / k / v move the pointers, not
// the graph; the model's workspace bounds the plan.
using Key = std::array<int64_t, 12>;
Key key_of(int device, bool backward, DType dt, const AttnLayout& l, int64_t model_bytes) {
  return {
      device,   backward,   static_cast<int64_t>(dt), l.B, l.S, l.H, l.Hkv, l.hd, l.q_ld, l.kv_ld,
      l.lse_ld, model_bytes};
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;  // get_workspace_size() of the plan that runs: engine + frontend
  int64_t frontend = 0;   // the frontend's node tensors alone
  std::string plan;       // the engine's name, for plans()
  std::vector<std::string> skipped;  // heuristic plans passed over, with the frontend's reason
  std::string error;                 // not empty: cuDNN will not run this shape
};

// One handle per device for this thread, and this thread's graphs. Leaked at thread exit on
// purpose, as PyTorch's pool: destroying handles while the process tears CUDA down can fail.
struct ThreadState {
  std::map<int, cudnnHandle_t> handles;
  std::map<Key, Built> graphs;
};
ThreadState& thread_state() {
  thread_local ThreadState* s = new ThreadState;
  return *s;
}

std::string status_text(cudnnStatus_t st) { return cudnnGetErrorString(st); }

// Every tensor carries its dtype from the start (not only once the graph expands), so validate()
// checks the strides' alignment too.
std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, int64_t uid,
                                                     const char* name, const TensorLayout& t,
                                                     fe::DataType_t dt) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_uid(uid)
                      .set_name(name)
                      .set_data_type(dt)
                      .set_dim({t.dim.begin(), t.dim.end()})
                      .set_stride({t.stride.begin(), t.stride.end()}));
}
void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid,
               const TensorLayout& l) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({l.dim.begin(), l.dim.end()})
      .set_stride({l.stride.begin(), l.stride.end()});
}

// The graph PyTorch's MHA.cpp builds for this call (NOTE [cuDNN attention on the CUDA backend]).
// sm_version 0: the current device's (asked at validate).
std::shared_ptr<fe::graph::Graph> describe(bool backward, DType dt, const AttnLayout& l,
                                           int sm_version = 0) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);  // before any node: each copies the context
  const fe::DataType_t io =
      dt == DType::kBFloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  const fe::DataType_t f32 = fe::DataType_t::FLOAT;
  g->set_io_data_type(io).set_intermediate_data_type(f32).set_compute_data_type(f32);
  const GraphLayout gl = graph_layout(l);
  auto q = tensor(*g, kQ, "Q", gl.q, io), k = tensor(*g, kK, "K", gl.k, io),
       v = tensor(*g, kV, "V", gl.v, io);
  if (!backward) {
    auto [o, stats] = g->sdpa(q, k, v,
                              fe::graph::SDPA_attributes()
                                  .set_name("fullshard_sdpa")
                                  .set_generate_stats(true)
                                  .set_causal_mask(true)
                                  .set_attn_scale(l.scale));
    as_output(o, kO, gl.o);
    o->set_data_type(io);
    as_output(stats, kStats, gl.stats);
    stats->set_data_type(f32);
  } else {
    auto o = tensor(*g, kO, "O", gl.o, io), dout = tensor(*g, kDO, "dO", gl.o, io);
    auto stats = tensor(*g, kStats, "Stats", gl.stats, f32);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats,
                                         fe::graph::SDPA_backward_attributes()
                                             .set_name("fullshard_sdpa_backward")
                                             .set_causal_mask(true)
                                             .set_attn_scale(l.scale));
    as_output(dq, kDQ, gl.dq);
    as_output(dk, kDK, gl.dkv);
    as_output(dv, kDV, gl.dkv);
    for (auto* t : {&dq, &dk, &dv}) (*t)->set_data_type(io);
  }
  return g;
}

// Records the first failing step's message in *error; true while none failed.
bool step(fe::error_t e, const char* what, std::string* error) {
  if (e.is_bad() && error->empty()) *error = std::string(what) + ": " + e.get_message();
  return error->empty();
}

// NOTE [cuDNN plan choice] (cudnn_sdpa_choice.cc): the plans PyTorch's build_plans tries, in its
// order, with the engine's workspace capped at what the model's block leaves after the
// frontend's tensors (get_autotune_workspace_size() before any plan is built: those alone).
Built build(bool backward, DType dt, const AttnLayout& l, cudnnHandle_t handle,
            int64_t model_bytes) {
  Built b;
  auto g = describe(backward, dt, l);
  std::string* e = &b.error;
  if (!(step(g->validate(), "validate", e) &&
        step(g->build_operation_graph(handle), "build_operation_graph", e) &&
        step(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", e)))
    return b;
  b.frontend = g->get_autotune_workspace_size();
  const int64_t model_frontend = cudnn_sdpa_workspace(backward, l.B, l.S, l.H, l.hd).frontend;
  PlanChoice c;
  if (engine_limit(model_bytes, b.frontend) >= 0) {
    g->deselect_workspace_greater_than(engine_limit(model_bytes, b.frontend));
    c = choose_plan(
        g->get_execution_plan_count(),
        [&](int64_t i) {
          PlanOutcome o;
          if (fe::error_t st = g->build_plan_at_index(i); st.is_bad()) {
            o.failure = st.get_message();
          } else if (fe::error_t ws = g->get_workspace_size_plan_at_index(i, o.workspace);
                     ws.is_bad()) {
            o.failure = "get_workspace_size: " + ws.get_message();
          }
          return o;
        },
        model_bytes);
  }
  b.skipped = c.skipped;
  if (c.index < 0) {
    b.error = no_plan_reason(c, model_bytes, b.frontend, model_frontend);
    return b;
  }
  b.workspace = c.workspace;
  if (step(g->get_plan_name_at_index(c.index, b.plan), "get_plan_name", e)) b.graph = std::move(g);
  return b;
}

// The cached graph for this call on this thread's handle for the current device (bound to s), or
// why there is none.
struct Lookup {
  const Built* built = nullptr;
  cudnnHandle_t handle = nullptr;
  std::string error;
};
Lookup graph_for(bool backward, DType dt, const AttnLayout& l, int64_t model_bytes,
                 cudaStream_t s) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Lookup{nullptr, nullptr, "no current CUDA device"};
  }
  ThreadState& ts = thread_state();
  auto [h, fresh] = ts.handles.try_emplace(device, nullptr);
  if (fresh) {
    if (const cudnnStatus_t st = cudnnCreate(&h->second); st != CUDNN_STATUS_SUCCESS) {
      h->second = nullptr;
      return Lookup{nullptr, nullptr, "cudnnCreate: " + status_text(st)};
    }
  }
  if (h->second == nullptr) return Lookup{nullptr, nullptr, "cudnnCreate failed on this device"};
  const Key key = key_of(device, backward, dt, l, model_bytes);
  auto it = ts.graphs.find(key);
  if (it == ts.graphs.end()) {
    Built b;
    try {
      b = build(backward, dt, l, h->second, model_bytes);
    } catch (const std::exception& e) {
      b = Built{};
      b.error = std::string("building the graph: ") + e.what();
    }
    it = ts.graphs.emplace(key, std::move(b)).first;
  }
  if (!it->second.error.empty()) return Lookup{nullptr, nullptr, it->second.error};
  if (const cudnnStatus_t st = cudnnSetStream(h->second, s); st != CUDNN_STATUS_SUCCESS)
    throw InternalError("cudnnSetStream: " + status_text(st));
  return Lookup{&it->second, h->second, ""};
}

void* at(const void* base, int64_t offset, DType dt) {
  return const_cast<char*>(static_cast<const char*>(base)) +
         offset * static_cast<int64_t>(dtype_size(dt));
}

// execute() checks the pack, the workspace and the pointers' alignment before it launches
// anything, so a refusal leaves the outputs to the flash kernels: "" when it ran.
std::string run(const Built& b, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack,
                void* workspace) {
  fe::error_t e = b.graph->execute(handle, pack, workspace);
  return e.is_bad() ? "execute: " + e.get_message() : "";
}
#endif

}  // namespace

bool built_with_cudnn() { return FULLSHARD_HAVE_CUDNN != 0; }

std::string validate_graph(bool backward, DType dt, const AttnLayout& l, int sm_version) {
#if FULLSHARD_HAVE_CUDNN
  std::string error;
  try {
    step(describe(backward, dt, l, sm_version)->validate(), "validate", &error);
  } catch (const std::exception& e) {
    error = e.what();
  }
  return error;
#else
  return "this build has no cuDNN";
#endif
}

Counters counters() { return Counters{n_forward.load(), n_backward.load(), n_declined.load()}; }

std::vector<std::pair<std::string, int64_t>> path_counts() {
  return path_counts_of_process().counts();
}

std::vector<std::string> plans() {
  std::vector<std::string> out;
#if FULLSHARD_HAVE_CUDNN
  for (const auto& [key, b] : thread_state().graphs) {
    std::string line = std::string(key[1] ? "backward" : "forward") + " B " +
                       std::to_string(key[3]) + ", S " + std::to_string(key[4]) + ", heads " +
                       std::to_string(key[5]) + "/" + std::to_string(key[6]) + ", head_dim " +
                       std::to_string(key[7]) + ", model workspace " + std::to_string(key[11]) +
                       " B: ";
    if (b.error.empty()) {
      line += b.plan + ", workspace " + std::to_string(b.workspace) + " B (frontend " +
              std::to_string(b.frontend) + ")";
      for (const std::string& s : b.skipped) line += "; skipped " + s;
    } else {
      line += b.error;
    }
    for (char& ch : line)
      if (ch == '\n') ch = ' ';
    out.push_back(line);
  }
#endif
  return out;
}

bool forward(const AttnLayout& l, std::initializer_list<DType> dtypes, const ForwardArgs& a,
             cudaStream_t s) {
  if (!env_enabled()) return decline("forward", l, "FULLSHARD_CUDNN_ATTENTION=off", true);
  const DType dt = *dtypes.begin();
  if (const std::string why = precheck(l, dtypes, {a.q, a.k, a.v, a.o, a.stats}); !why.empty())
    return decline("forward", l, why);
#if FULLSHARD_HAVE_CUDNN
  // The model gives the forward no workspace block (NOTE [cuDNN SDPA workspace]): its total is 0.
  const int64_t model_bytes = cudnn_sdpa_workspace(false, l.B, l.S, l.H, l.hd).total();
  const Lookup g = graph_for(false, dt, l, model_bytes, s);
  if (g.built == nullptr) return decline("forward", l, g.error);
  const GraphLayout gl = graph_layout(l);
  std::unordered_map<int64_t, void*> pack = {{kQ, at(a.q, gl.q.offset, dt)},
                                             {kK, at(a.k, gl.k.offset, dt)},
                                             {kV, at(a.v, gl.v.offset, dt)},
                                             {kO, a.o},
                                             {kStats, a.stats}};
  if (const std::string why = run(*g.built, g.handle, pack, nullptr); !why.empty())
    return decline("forward", l, why);
  ++n_forward;
  path_counts_of_process().ran(false);
  return true;
#else
  (void)s;
  return decline("forward", l, "this build has no cuDNN (tools/deps.sh fetches its frontend)");
#endif
}

bool backward(const AttnLayout& l, std::initializer_list<DType> dtypes, const BackwardArgs& a,
              cudaStream_t s) {
  if (!env_enabled()) return decline("backward", l, "FULLSHARD_CUDNN_ATTENTION=off", true);
  const DType dt = *dtypes.begin();
  if (const std::string why =
          precheck(l, dtypes, {a.dout, a.q, a.k, a.v, a.o, a.stats, a.dq, a.dk, a.dv, a.workspace});
      !why.empty())
    return decline("backward", l, why);
#if FULLSHARD_HAVE_CUDNN
  // The plan is chosen to fit the model's block (NOTE [cuDNN plan choice]), which it is handed.
  const Lookup g = graph_for(true, dt, l, static_cast<int64_t>(a.workspace_bytes), s);
  if (g.built == nullptr) return decline("backward", l, g.error);
  const GraphLayout gl = graph_layout(l);
  std::unordered_map<int64_t, void*> pack = {{kQ, at(a.q, gl.q.offset, dt)},
                                             {kK, at(a.k, gl.k.offset, dt)},
                                             {kV, at(a.v, gl.v.offset, dt)},
                                             {kO, at(a.o, 0, dt)},
                                             {kDO, at(a.dout, 0, dt)},
                                             {kStats, const_cast<float*>(a.stats)},
                                             {kDQ, a.dq},
                                             {kDK, a.dk},
                                             {kDV, a.dv}};
  if (const std::string why =
          run(*g.built, g.handle, pack, g.built->workspace > 0 ? a.workspace : nullptr);
      !why.empty())
    return decline("backward", l, why);
  ++n_backward;
  path_counts_of_process().ran(true);
  return true;
#else
  (void)s;
  return decline("backward", l, "this build has no cuDNN (tools/deps.sh fetches its frontend)");
#endif
}

}  // namespace fullshard::cuda::cudnn_sdpa

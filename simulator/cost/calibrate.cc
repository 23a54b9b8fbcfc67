#include "simulator/cost/calibrate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/scenario/json_reader.h"
#include "simulator/cost/dtype_conversion.h"

namespace fullshard::sim {
namespace {

namespace jr = json_reader;
using nlohmann::json;

double log_error(double predicted, double measured) { return std::log(predicted / measured); }

template <typename Sample>
double rms(const HardwareProfile& p, const std::vector<const Sample*>& samples) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (const Sample* s : samples) {
    const double e = log_error(predict(p, *s), s->time_s);
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(samples.size()));
}

// NOTE [Calibration fit]: one figure at a time, minimising the RMS log error of the samples it
// governs. NCCL's choice of algorithm makes the objective piecewise, so a log-spaced grid over
// [lo, hi] finds the basin and a golden-section search refines it.
double fit_scalar(const std::function<double(double)>& objective, double lo, double hi,
                  bool log_scale) {
  auto to = [&](double u) { return log_scale ? std::exp(u) : u; };
  double a = log_scale ? std::log(lo) : lo, b = log_scale ? std::log(hi) : hi;
  constexpr int kGrid = 120;
  double best_u = a, best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= kGrid; ++i) {
    const double u = a + (b - a) * i / kGrid;
    const double v = objective(to(u));
    if (v < best) {
      best = v;
      best_u = u;
    }
  }
  const double step = (b - a) / kGrid;
  double l = std::max(a, best_u - step), r = std::min(b, best_u + step);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = r - g * (r - l), x2 = l + g * (r - l);
  double f1 = objective(to(x1)), f2 = objective(to(x2));
  for (int i = 0; i < 60; ++i) {
    if (f1 <= f2) {
      r = x2;
      x2 = x1;
      f2 = f1;
      x1 = r - g * (r - l);
      f1 = objective(to(x1));
    } else {
      l = x1;
      x1 = x2;
      f1 = f2;
      x2 = l + g * (r - l);
      f2 = objective(to(x2));
    }
  }
  const double u = f1 <= f2 ? x1 : x2;
  return objective(to(u)) <= best ? to(u) : to(best_u);
}

// Sets each row of `table` that samples fall into to the median efficiency they achieved.
bool fit_table(EfficiencyTable& table,
               const std::vector<std::pair<double, double>>& size_and_efficiency) {
  bool changed = false;
  for (size_t row = 0; row < table.rows.size(); ++row) {
    const double lo = table.rows[row].first;
    const double hi =
        row == 0 ? std::numeric_limits<double>::infinity() : table.rows[row - 1].first;
    std::vector<double> e;
    for (const auto& [size, eff] : size_and_efficiency)
      if (size >= lo && size < hi) e.push_back(eff);
    if (e.empty()) continue;
    std::sort(e.begin(), e.end());
    const double median =
        e.size() % 2 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
    table.rows[row].second = std::clamp(median, 1e-3, 1.0);
    changed = true;
  }
  return changed;
}

nccl::Func parse_func(const json& v, const std::string& path) {
  const std::string s =
      jr::get_choice(v, path, {"all_gather", "reduce_scatter", "all_reduce", "broadcast"});
  if (s == "all_gather") return nccl::Func::kAllGather;
  if (s == "reduce_scatter") return nccl::Func::kReduceScatter;
  if (s == "broadcast") return nccl::Func::kBroadcast;
  return nccl::Func::kAllReduce;
}

// nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor, algbw = size / time.
double busbw_factor(nccl::Func f, int n) {
  switch (f) {
    case nccl::Func::kAllReduce: return 2.0 * (n - 1) / n;
    case nccl::Func::kAllGather:
    case nccl::Func::kReduceScatter: return static_cast<double>(n - 1) / n;
    case nccl::Func::kBroadcast: return 1.0;
  }
  return 1.0;
}

std::optional<DirectFigure> direct_figure(const std::string& op) {
  if (op == "kernel_gap") return DirectFigure::kKernelGap;
  if (op == "eager_op") return DirectFigure::kEagerOp;
  if (op == "copy_pinned") return DirectFigure::kCopyPinned;
  if (op == "copy_pageable") return DirectFigure::kCopyPageable;
  if (op == "fsdp_hook") return DirectFigure::kFsdpHook;
  return std::nullopt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The "fsdp_hook" samples as a line in the unit's parameter count (NOTE [Direct samples]).
void fit_fsdp_hooks(const std::vector<DirectSample>& direct, HardwareProfile& p,
                    std::vector<std::string>& fitted) {
  std::vector<const DirectSample*> hooks;
  for (const auto& d : direct)
    if (d.figure == DirectFigure::kFsdpHook) hooks.push_back(&d);
  if (hooks.empty()) return;
  const double n = static_cast<double>(hooks.size());
  double mp = 0, mt = 0;
  for (const auto* d : hooks) mp += static_cast<double>(d->params) / n, mt += d->time_s / n;
  double sxx = 0, sxy = 0;
  for (const auto* d : hooks) {
    const double dx = static_cast<double>(d->params) - mp;
    sxx += dx * dx, sxy += dx * (d->time_s - mt);
  }
  if (sxx > 0) {
    p.fsdp_hook_param_s = std::max(0.0, sxy / sxx);
    p.fsdp_hook_s = std::max(0.0, mt - p.fsdp_hook_param_s * mp);
    fitted.insert(fitted.end(), {"fsdp_hook_s", "fsdp_hook_param_s"});
  } else {
    p.fsdp_hook_s = std::max(0.0, mt - p.fsdp_hook_param_s * mp);
    fitted.push_back("fsdp_hook_s");
  }
}

}  // namespace

double predict(const HardwareProfile& p, const CollectiveSample& s) {
  const int n = s.nodes * s.ranks_per_node;
  const GroupTopology g{n, s.nodes, s.ranks_per_node, s.ranks_per_node};
  return nccl::choose(nccl::platform_from(p), g, s.func, s.bytes).time_us * 1e-6;
}

namespace {
// As NOTE [Converting kernels] (dtype_conversion.h): the sample as one tensor read and one written,
// of one element count (a measured elementwise kernel), through the rule the simulator applies to
// every op.
bool sample_converts(const KernelSample& s) {
  auto tensor = [](DType d) {
    TensorRef t;
    t.meta.dtype = d;
    t.meta.shape = {1};
    return t;
  };
  return !s.norm && s.op == OpClass::kVector &&
         converts_dtype({tensor(s.dtype)}, {tensor(s.out_dtype.value_or(s.dtype))});
}
}  // namespace

Instr kernel_of(const KernelSample& s) {
  Instr in;
  in.type = InstrType::kKernel;
  in.op = s.norm                     ? (s.backward ? OpKind::kRMSNormBackward : OpKind::kRMSNorm)
          : s.op == OpClass::kMatmul ? OpKind::kLinear
          : s.op == OpClass::kAttention
              ? (s.backward ? OpKind::kAttentionBackward : OpKind::kAttention)
              : OpKind::kAdd;
  in.dtype = s.dtype;
  in.flops = s.flops;
  in.bytes = s.bytes;
  in.dims = s.dims;
  in.converts_dtype = sample_converts(s);
  return in;
}

double predict(const HardwareProfile& p, const KernelSample& s) {
  return ComputeModel(p, {}).device_seconds(kernel_of(s));
}

std::string kernel_class_name(const KernelSample& s) {
  if (s.norm) return s.backward ? "norm_backward" : "norm";
  if (s.op == OpClass::kMatmul) return "matmul";
  if (s.op == OpClass::kAttention) return s.backward ? "attention_backward" : "attention";
  return sample_converts(s) ? "convert" : "vector";
}

// NOTE [Launch-bound samples] (calibrate.h): the host's launch of one eager op bounds what a
// Python loop of launches can time. 0 without an eager_op sample.
double host_launch_seconds(const CalibrationInput& input) {
  std::vector<double> eager;
  for (const auto& d : input.direct)
    if (d.figure == DirectFigure::kEagerOp) eager.push_back(d.time_s);
  return eager.empty() ? 0.0 : median(eager);
}

bool launch_bound(const KernelSample& s, const CalibrationInput& input) {
  const double host = host_launch_seconds(input);
  return host > 0 && s.time_s <= 1.25 * host;
}

bool parse_blas_workspace_measurement(const json& j, CalibrationInput& in) {
  if (!j.is_object() || !j.contains("forward_workspace_bytes")) return false;
  int64_t most = 0;
  for (const char* k : {"forward_workspace_bytes", "backward_workspace_bytes"}) {
    if (!j.contains(k))
      throw InputError(k, "is missing from a cuBLAS workspace measurement",
                       "write the file with tools/measure/blas_workspace.py");
    most = std::max(most, jr::get_int(j.at(k), k, 0, int64_t{1} << 40, "33554432"));
  }
  in.blas_workspace_bytes = most;
  return true;
}

CalibrationInput parse_calibration_input(const json& j) {
  jr::require_object(j, "", "{\"collectives\": [...], \"kernels\": [...]}");
  jr::reject_unknown_fields(j, "", {"$comment", "profile", "collectives", "kernels"});
  CalibrationInput in;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (j.contains("collectives")) {
    const json& a = j.at("collectives");
    if (!a.is_array())
      throw InputError("collectives", "is " + jr::describe(a) + ", not an array",
                       "write a list of samples");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string P = jr::index_path("collectives", i);
      const json& o = a[i];
      jr::require_object(o, P,
                         "{\"collective\": \"all_gather\", \"nodes\": 1, \"gpus_per_node\": 8, "
                         "\"bytes\": 1e9, \"time_us\": 2900}");
      jr::reject_unknown_fields(
          o, P, {"collective", "nodes", "gpus_per_node", "bytes", "time_us", "busbw_gbs"});
      for (const char* k : {"collective", "bytes"})
        jr::require_field(o, P, k, "every sample gives it");
      CollectiveSample s;
      s.func = parse_func(o.at("collective"), P + ".collective");
      if (o.contains("nodes"))
        s.nodes = static_cast<int>(jr::get_int(o.at("nodes"), P + ".nodes", 1, 1 << 20, "2"));
      if (o.contains("gpus_per_node"))
        s.ranks_per_node = static_cast<int>(
            jr::get_int(o.at("gpus_per_node"), P + ".gpus_per_node", 1, 1 << 20, "8"));
      // 2^50 (1 PiB): no collective moves more; the NCCL model converts bytes to an integer.
      s.bytes = jr::get_number(o.at("bytes"), P + ".bytes", 0, false, 1125899906842624.0, true,
                               "1073741824");
      if (o.contains("time_us") == o.contains("busbw_gbs"))
        throw InputError(
            P,
            "gives " + std::string(o.contains("time_us") ? "both time_us and busbw_gbs"
                                                         : "neither time_us nor busbw_gbs"),
            "give the measured time in us, or the bus bandwidth nccl-tests prints in GB/s");
      if (o.contains("time_us")) {
        s.time_s =
            jr::get_number(o.at("time_us"), P + ".time_us", 0, false, kInf, false, "2900") * 1e-6;
      } else {
        const double busbw =
            jr::get_number(o.at("busbw_gbs"), P + ".busbw_gbs", 0, false, kInf, false, "360");
        s.time_s = s.bytes * busbw_factor(s.func, s.nodes * s.ranks_per_node) / (busbw * 1e9);
        if (!std::isfinite(s.time_s))
          throw InputError(P + ".busbw_gbs",
                           "is " + jr::show(o.at("busbw_gbs")) + ", too small for a finite time",
                           "write the bus bandwidth in GB/s, e.g. 360");
      }
      if (s.nodes * s.ranks_per_node < 2)
        throw InputError(P + ".gpus_per_node", "gives a one-rank collective",
                         "measure over at least 2 GPUs");
      in.collectives.push_back(s);
    }
  }
  if (j.contains("kernels")) {
    const json& a = j.at("kernels");
    if (!a.is_array())
      throw InputError("kernels", "is " + jr::describe(a) + ", not an array",
                       "write a list of samples");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string P = jr::index_path("kernels", i);
      const json& o = a[i];
      jr::require_object(o, P,
                         "{\"op\": \"matmul\", \"dtype\": \"bf16\", \"flops\": 1e12, \"bytes\": "
                         "1e8, \"time_s\": 0.0012}");
      jr::reject_unknown_fields(o, P,
                                {"op", "dtype", "out_dtype", "flops", "bytes", "time_s", "m", "n",
                                 "k", "seq", "head_dim", "params"});
      for (const char* k : {"op", "time_s"}) jr::require_field(o, P, k, "every sample gives it");
      KernelSample s;
      const std::string op = jr::get_choice(
          o.at("op"), P + ".op",
          {"matmul", "attention", "attention_backward", "vector", "norm", "norm_backward",
           "kernel_gap", "eager_op", "copy_pinned", "copy_pageable", "fsdp_hook"});
      if (const auto direct = direct_figure(op)) {  // NOTE [Direct samples]
        DirectSample d{
            *direct, 0,
            jr::get_number(o.at("time_s"), P + ".time_s", 0, false, kInf, false, "2e-6")};
        if (d.figure == DirectFigure::kCopyPinned || d.figure == DirectFigure::kCopyPageable) {
          jr::require_field(o, P, "bytes", "a copy sample gives the bytes it moved");
          d.bytes = jr::get_number(o.at("bytes"), P + ".bytes", 0, false, kInf, false, "1e9");
        }
        if (d.figure == DirectFigure::kFsdpHook) {
          jr::require_field(o, P, "params",
                            "a hook sample gives the parameters of the hooked unit");
          d.params = jr::get_int(o.at("params"), P + ".params", 0, int64_t{1} << 40, "8");
        }
        in.direct.push_back(d);
        continue;
      }
      if (o.contains("params"))
        throw InputError(P + ".params", "is given on a " + op + " sample",
                         "give params on fsdp_hook rows only");
      s.norm = op == "norm" || op == "norm_backward";
      s.op = op == "matmul"             ? OpClass::kMatmul
             : op == "vector" || s.norm ? OpClass::kVector
                                        : OpClass::kAttention;
      s.backward = op == "attention_backward" || op == "norm_backward";
      if (s.norm && !o.contains("bytes"))
        throw InputError(P, "is a norm sample without bytes", "give the bytes the kernel moved");
      auto dim = [&](const char* key, size_t slot) {
        if (o.contains(key))
          s.dims[slot] = jr::get_int(o.at(key), P + "." + key, 1, int64_t{1} << 40, "4096");
      };
      if (s.op == OpClass::kMatmul) {
        dim("m", 0), dim("k", 1), dim("n", 2);
      } else {
        dim("seq", 1), dim("head_dim", 2);
      }
      if (o.contains("dtype")) {
        const std::string d = jr::get_choice(o.at("dtype"), P + ".dtype", {"bf16", "fp16", "fp32"});
        s.dtype = *parse_float_dtype(d);
      }
      if (o.contains("out_dtype")) {
        if (op != "vector")
          throw InputError(P + ".out_dtype", "is given on a " + op + " sample",
                           "give out_dtype on vector rows only (the dtype an elementwise kernel "
                           "writes)");
        const std::string d =
            jr::get_choice(o.at("out_dtype"), P + ".out_dtype", {"bf16", "fp16", "fp32"});
        s.out_dtype = *parse_float_dtype(d);
      }
      if (o.contains("flops"))
        s.flops = jr::get_number(o.at("flops"), P + ".flops", 0, true, kInf, false, "1e12");
      if (o.contains("bytes"))
        s.bytes = jr::get_number(o.at("bytes"), P + ".bytes", 0, true, kInf, false, "1e8");
      s.time_s = jr::get_number(o.at("time_s"), P + ".time_s", 0, false, kInf, false, "0.0012");
      if (s.flops <= 0 && s.bytes <= 0)
        throw InputError(P, "has neither flops nor bytes",
                         "give the kernel's FLOPs and/or bytes moved");
      in.kernels.push_back(s);
    }
  }
  return in;
}

Calibration calibrate(const HardwareProfile& start, const CalibrationInput& input) {
  Calibration c;
  c.profile = start;
  HardwareProfile& p = c.profile;
  // One-node all-reduces depend on NVLS too: the NVLink bus bandwidth is fitted on the other
  // one-node collectives when there are any, then NVLS's efficiency on the all-reduces.
  std::vector<const CollectiveSample*> all_coll, one_node, one_node_ar, multi_node;
  for (const auto& s : input.collectives) {
    all_coll.push_back(&s);
    if (s.nodes > 1) {
      multi_node.push_back(&s);
    } else {
      (s.func == nccl::Func::kAllReduce ? one_node_ar : one_node).push_back(&s);
    }
  }
  if (one_node.empty()) one_node = one_node_ar;
  const double host_launch_s = host_launch_seconds(input);
  std::vector<const KernelSample*> all_kernels;
  for (const auto& s : input.kernels) {
    if (launch_bound(s, input)) {
      ++c.launch_bound_samples;
      continue;
    }
    all_kernels.push_back(&s);
  }
  c.collective_error_before = rms(start, all_coll);
  c.kernel_error_before = rms(start, all_kernels);
  const char* kClasses[] = {"matmul", "attention", "attention_backward", "norm", "norm_backward",
                            "vector", "convert"};
  auto class_samples = [&](const std::string& name) {
    std::vector<const KernelSample*> v;
    for (const KernelSample* s : all_kernels)
      if (kernel_class_name(*s) == name) v.push_back(s);
    return v;
  };
  for (const char* name : kClasses)
    if (const auto v = class_samples(name); !v.empty())
      c.kernel_classes.push_back({name, static_cast<int>(v.size()), rms(start, v), 0.0});

  auto fit = [&](const char* figure, double& value,
                 const std::vector<const CollectiveSample*>& samples, double lo, double hi,
                 bool log_scale) {
    if (samples.empty()) return;
    const double before = value;
    value = fit_scalar(
        [&](double v) {
          const double keep = value;
          value = v;
          const double e = rms(p, samples);
          value = keep;
          return e;
        },
        lo, hi, log_scale);
    if (value != before) c.fitted.push_back(figure);
  };
  fit("intra_node_bus_bandwidth", p.intra_node_bus_bandwidth, one_node, 1e8, 1e13, true);
  if (p.nvls) fit("nvls_efficiency", p.nvls_efficiency, one_node_ar, 0.05, 1.0, false);
  fit("network_bus_bandwidth", p.network_bus_bandwidth, multi_node, 1e7, 1e12, true);

  // Kernels: each sample informs the bound it is closest to at peak (NOTE [Efficiency step
  // tables]): its achieved fraction of peak FLOP/s, or of HBM bandwidth.
  // GEMM samples are divided by their shape factor (NOTE [GEMM shape]) and tabled by FLOPs;
  // attention samples by their head-dim factor and the clock ratio, tabled by sequence length
  // (forward and backward separately); the kernel gap is taken off the measured time first.
  // Direct samples first (NOTE [Direct samples]): the kernel gap is taken off the kernel
  // samples' times below.
  auto direct = [&](DirectFigure f, const char* figure, double& value, auto&& of_sample) {
    std::vector<double> v;
    for (const auto& d : input.direct)
      if (d.figure == f) v.push_back(of_sample(d));
    if (v.empty()) return;
    value = median(std::move(v));
    c.fitted.push_back(figure);
  };
  for (const auto& d : input.direct)
    if (d.figure == DirectFigure::kKernelGap && host_launch_s > 0 &&
        d.time_s >= 0.5 * host_launch_s)
      c.kernel_gap_launch_bound = true;
  if (!c.kernel_gap_launch_bound)
    direct(DirectFigure::kKernelGap, "kernel_gap_s", p.kernel_gap_s,
           [](const DirectSample& d) { return d.time_s; });
  if (input.blas_workspace_bytes > 0 &&
      static_cast<uint64_t>(input.blas_workspace_bytes) != p.blas_workspace_bytes) {
    p.blas_workspace_bytes = static_cast<uint64_t>(input.blas_workspace_bytes);
    c.fitted.push_back("blas_workspace_bytes");
  }
  direct(DirectFigure::kEagerOp, "eager_dispatch_s", p.eager_dispatch_s,
         [&](const DirectSample& d) { return std::max(0.0, d.time_s - p.launch_overhead_s); });
  direct(DirectFigure::kCopyPinned, "pinned_copy_bandwidth", p.pinned_copy_bandwidth,
         [](const DirectSample& d) { return d.bytes / d.time_s; });
  direct(DirectFigure::kCopyPageable, "pageable_copy_bandwidth", p.pageable_copy_bandwidth,
         [](const DirectSample& d) { return d.bytes / d.time_s; });

  fit_fsdp_hooks(input.direct, p, c.fitted);

  const ComputeModel peaks(start, {});
  std::vector<std::pair<double, double>> mm, attn, attn_bwd, vec, mem, convert;
  std::vector<double> norm;
  for (const KernelSample* sp : all_kernels) {
    const KernelSample& s = *sp;
    if (s.norm) {  // NOTE [Fused norm kernels]: its bytes over HBM bandwidth, its kernels' gaps off
      const double kernels = s.backward ? 2 : 1;
      const double t = std::max(s.time_s - kernels * p.kernel_gap_s, 1e-3 * s.time_s);
      norm.push_back(std::min(1.0, s.bytes / (t * p.hbm_bandwidth)));
      continue;
    }
    const Instr k = kernel_of(s);
    const double peak = peaks.peak_flops(op_class(k.op), s.dtype);
    const double t = std::max(s.time_s - p.kernel_gap_s, 1e-3 * s.time_s);
    const double compute_ideal = s.flops / peak, memory_ideal = s.bytes / p.hbm_bandwidth;
    if (compute_ideal >= memory_ideal) {
      const double achieved = compute_ideal / t;
      if (s.op == OpClass::kMatmul) {
        mm.emplace_back(s.flops,
                        achieved / (peaks.matmul_shape_factor(s.dims) * p.sustained_clock_ratio));
      } else if (s.op == OpClass::kAttention) {
        const double hd = s.dims[2] > 0 ? static_cast<double>(s.dims[2]) : 128.0;
        const double e =
            achieved / (p.attention_head_dim_efficiency.at(hd) * p.sustained_clock_ratio);
        (s.backward ? attn_bwd : attn).emplace_back(static_cast<double>(s.dims[1]), e);
      } else {
        vec.emplace_back(s.flops, achieved);
      }
    } else {
      (k.converts_dtype ? convert : mem).emplace_back(s.bytes, memory_ideal / t);
    }
  }
  if (fit_table(p.matmul_efficiency, mm)) c.fitted.push_back("matmul_efficiency");
  if (fit_table(p.attention_efficiency, attn)) c.fitted.push_back("attention_efficiency");
  if (fit_table(p.attention_backward_efficiency, attn_bwd))
    c.fitted.push_back("attention_backward_efficiency");
  if (fit_table(p.vector_efficiency, vec)) c.fitted.push_back("vector_efficiency");
  if (fit_table(p.memory_efficiency, mem)) c.fitted.push_back("memory_efficiency");
  if (!convert.empty()) {  // NOTE [Converting kernels]: relative to the (fitted) table's row
    std::vector<double> factor;
    for (const auto& [bytes, eff] : convert) factor.push_back(eff / p.memory_efficiency.at(bytes));
    p.convert_memory_factor = std::clamp(median(std::move(factor)), kMinFigureFraction, 1.0);
    c.fitted.push_back("convert_memory_factor");
  }
  if (!norm.empty()) {
    p.norm_memory_efficiency = median(std::move(norm));
    c.fitted.push_back("norm_memory_efficiency");
  }

  c.collective_error_after = rms(p, all_coll);
  c.kernel_error_after = rms(p, all_kernels);
  for (auto& k : c.kernel_classes) k.after = rms(p, class_samples(k.name));
  return c;
}

}  // namespace fullshard::sim

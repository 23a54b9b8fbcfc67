#include "backends/cpu/cpu_backend.h"

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "backends/common/host_fills.h"
#include "backends/common/scalar_read.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/gloo/rendezvous.h"
#include "core/common/error.h"

namespace fullshard::cpu {

CpuBackend::CpuBackend(CpuBackendOptions options)
    : Backend(options.rank, options.world_size, options.allocator,
              std::make_unique<HostSegmentSource>(), options.record_timeline),
      options_(std::move(options)) {
  for (StreamRole r : kAllStreams)
    streams_.push_back(std::make_unique<StreamWorker>(std::string(stream_name(r)), failure_));
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = [this] {
    for (auto& s : streams_) s->drain();
  };
}

CpuBackend::~CpuBackend() {
  for (auto& s : streams_) s->drain();
  release_host_buffers(true);
  // The allocator (in Backend) releases its segments after this destructor: nothing to drain.
  static_cast<HostSegmentSource*>(segment_source())->before_unmap = nullptr;
  streams_.clear();  // joins the workers
  groups_.clear();
}

void CpuBackend::check_failed() const { failure_.rethrow_if_failed(); }

backends::HostFillContext CpuBackend::host_fill_context() const {
  return {&options_.batches, rank(), world_size()};
}

uint8_t* CpuBackend::resolve(const TensorRef& ref) const { return addresses_.pointer(ref); }

void CpuBackend::copy_to_host(const TensorRef& ref, void* dst) {
  synchronize_device();
  const uint8_t* p = resolve(ref);
  if (ref.nbytes() > 0) std::memcpy(dst, p, ref.nbytes());
}

void CpuBackend::copy_from_host(const TensorRef& ref, const void* src) {
  synchronize_device();
  if (ref.nbytes() > 0) std::memcpy(resolve(ref), src, ref.nbytes());
}

double CpuBackend::clock_s() const { return measurements_.clock_s(); }

void CpuBackend::run_timed(StreamRole r, uint64_t seq, bool starts, const std::function<void()>& fn,
                           const std::string* group) {
  const auto t0 = backends::MeasurementStore::Clock::now();
  fn();
  const auto t1 = backends::MeasurementStore::Clock::now();
  measurements_.add(r, seq, group, measurements_.seconds_at(t0), measurements_.seconds_at(t1),
                    starts);
}

std::vector<KernelTime> CpuBackend::take_kernel_times() { return measurements_.take_kernels(); }

std::vector<CollectiveInterval> CpuBackend::take_collective_intervals() {
  return measurements_.take_collectives();
}

std::vector<std::pair<uint64_t, double>> CpuBackend::take_work_starts() {
  return measurements_.take_starts();
}

std::optional<StreamIntervals> CpuBackend::take_busy_intervals() {
  return measurements_.take_busy();
}

void CpuBackend::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
  uint8_t* p = nullptr;
  if (buffer.on_host) {
    release_host_buffers(false);
    p = static_cast<uint8_t*>(
        std::aligned_alloc(64, std::max<uint64_t>(64, (buffer.bytes + 63) / 64 * 64)));
    FULLSHARD_CHECK(p != nullptr,
                    fmt::format("host allocation of {} bytes for {} failed", buffer.bytes, what));
  } else {
    p = backends::BufferAddresses::block_address(buffer);
  }
  addresses_.add(buffer, p);
}

void CpuBackend::on_free(const Buffer& buffer) {
  const std::optional<backends::Address> a = addresses_.remove(buffer.id);
  if (!a) return;
  if (a->on_host) {
    DeferredHostFree d{a->ptr, {}};
    for (size_t i = 0; i < streams_.size(); ++i) {
      d.fences[i] = std::make_shared<CpuEvent>();
      streams_[i]->record(d.fences[i]);
    }
    deferred_host_frees_.push_back(std::move(d));
  }
}

void CpuBackend::release_host_buffers(bool all) {
  auto keep = deferred_host_frees_.begin();
  for (auto& d : deferred_host_frees_) {
    bool done = true;
    for (auto& f : d.fences) {
      if (all) f->wait();
      done = done && f->done();
    }
    if (done) {
      std::free(d.ptr);
    } else {
      *keep++ = std::move(d);
    }
  }
  deferred_host_frees_.erase(keep, deferred_host_frees_.end());
}

void CpuBackend::do_launch(StreamRole r, const OpCall& op) {
  check_failed();
  std::vector<void*> in, out;
  in.reserve(op.inputs.size());
  out.reserve(op.outputs.size());
  for (const auto& t : op.inputs) in.push_back(resolve(t));
  for (const auto& t : op.outputs) out.push_back(resolve(t));
  stream(r).enqueue([this, r, op, seq = host_seq(), starts = memory().records_timeline(),
                     in = std::move(in), out = std::move(out)] {
    run_timed(r, seq, starts, [&] {
      if (!backends::run_host_fill(op, host_fill_context(), out)) run_kernel(op, in, out);
    });
  });
}

backends::GlooCollectiveGroup& CpuBackend::process_group(const ProcessGroup& g, StreamRole r) {
  const std::string key = std::string(stream_name(r)) + "/" + g.key();
  std::lock_guard<std::mutex> lock(groups_mu_);
  auto it = groups_.find(key);
  if (it != groups_.end()) return *it->second;
  FULLSHARD_CHECK(g.size() == 1 || (options_.store && options_.device),
                  "a collective over several ranks needs a rendezvous store and a device");
  // A one-rank group exchanges nothing and has no store (a one-rank job); wrapping a null
  // store in a PrefixStore would bind a reference to it.
  auto store = options_.store ? gloo_backend::make_prefix_store(key, options_.store) : nullptr;
  auto pg = std::make_unique<backends::GlooCollectiveGroup>(store, options_.device, g, rank(),
                                                            options_.collectives);
  return *groups_.emplace(key, std::move(pg)).first->second;
}

void CpuBackend::do_collective(StreamRole r, const CollectiveCall& call,
                               const ProcessGroup& group) {
  check_failed();
  // NOTE [One collective decoding] (backends/common/collective_args.h)
  const backends::CollectivePlan plan =
      backends::plan_collective(call, group, rank(), resolve(call.input), resolve(call.output));
  stream(r).enqueue([this, r, plan, group, seq = host_seq(), starts = memory().records_timeline()] {
    auto& pg = process_group(group, r);
    run_timed(
        r, seq, starts,
        [&] {
          if (plan.copy_bytes > 0) std::memcpy(plan.args.output, plan.copy_from, plan.copy_bytes);
          pg.run(plan.args, backends::CallingThread{});
        },
        &group.name);
  });
}

EventId CpuBackend::do_record_event(StreamRole r) {
  auto e = std::make_shared<CpuEvent>();
  stream(r).record(e);
  return events_.add(std::move(e));
}

void CpuBackend::do_wait_event(StreamRole r, EventId event) {
  const auto* e = events_.find(event);
  if (e == nullptr) return;  // NOTE [Pruned events]
  stream(r).wait(*e);
}

void CpuBackend::do_synchronize(EventId event) {
  if (const auto* e = events_.find(event)) (*e)->wait();
  check_failed();
  events_.prune([](EventId, const std::shared_ptr<CpuEvent>& e) {
    return e->done();
  });  // NOTE [Pruned events]
  release_host_buffers(false);
}

void CpuBackend::synchronize_device() {
  for (auto& s : streams_) s->drain();
  check_failed();
  release_host_buffers(false);
}

void CpuBackend::do_read_scalar(StreamRole r, const TensorRef& ref) {
  backends::check_scalar_dtype(ref.meta.dtype);
  const uint8_t* p = resolve(ref);
  stream(r).enqueue([this, dtype = ref.meta.dtype, p] {
    const double v = backends::decode_scalar(p, dtype);
    std::lock_guard<std::mutex> lock(scalars_mu_);
    scalars_.push_back(v);
  });
}

std::vector<double> CpuBackend::take_scalars() {
  std::lock_guard<std::mutex> lock(scalars_mu_);
  return std::exchange(scalars_, {});
}

}  // namespace fullshard::cpu

#include "backends/cpu/cpu_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "backends/common/device_kernels.h"
#include "backends/common/scalar_read.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/common/error.h"

namespace fullshard::cpu {

CpuDevice::CpuDevice(const Backend& host, const BatchSource& batches,
                     backends::MeasurementStore& measurements)
    : Device(/*has_data=*/true), host_(host), batches_(batches), measurements_(measurements) {
  for (StreamRole r : kAllStreams)
    streams_.push_back(std::make_unique<StreamWorker>(std::string(stream_name(r)), failure_));
}

CpuDevice::~CpuDevice() {
  close();
  streams_.clear();  // joins the workers
}

void CpuDevice::drain() {
  for (auto& s : streams_) s->drain();
}

void CpuDevice::close() {
  drain();
  release_host_buffers(true);
}

backends::HostFillContext CpuDevice::host_fill_context() const {
  return {&batches_, host_.rank(), host_.world_size()};
}

void CpuDevice::copy_idle(const TensorRef& ref, void* host, bool to_host) {
  uint8_t* p = resolve(ref);
  if (ref.nbytes() == 0) return;
  if (to_host)
    std::memcpy(host, p, ref.nbytes());
  else
    std::memcpy(p, host, ref.nbytes());
}

void CpuDevice::run_timed(StreamRole r, uint64_t seq, bool starts, const std::function<void()>& fn,
                          const std::string* group) {
  const auto t0 = backends::MeasurementStore::Clock::now();
  fn();
  const auto t1 = backends::MeasurementStore::Clock::now();
  measurements_.add(r, seq, group, measurements_.seconds_at(t0), measurements_.seconds_at(t1),
                    starts);
}

void CpuDevice::on_allocate(const Buffer& buffer, StreamRole stream, std::string_view what) {
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

void CpuDevice::on_free(const Buffer& buffer) {
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

void CpuDevice::release_host_buffers(bool all) {
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

void CpuDevice::launch(StreamRole r, const OpCall& op) {
  check_failed();
  backends::check_runs_on_device(op, "the CPU backend", &cpu::has_kernel);
  std::vector<void*> in, out;
  in.reserve(op.inputs.size());
  out.reserve(op.outputs.size());
  for (const auto& t : op.inputs) in.push_back(resolve(t));
  for (const auto& t : op.outputs) out.push_back(resolve(t));
  stream(r).enqueue([this, r, op, seq = host_.host_seq(),
                     starts = host_.memory().records_timeline(), in = std::move(in),
                     out = std::move(out)] {
    run_timed(r, seq, starts, [&] {
      if (!backends::run_host_fill(op, host_fill_context(), out)) run_kernel(op, in, out);
    });
  });
}

EventId CpuDevice::record_event(StreamRole r) {
  auto e = std::make_shared<CpuEvent>();
  stream(r).record(e);
  return events_.add(std::move(e));
}

void CpuDevice::wait_event(StreamRole r, EventId event) {
  const auto* e = events_.find(event);
  if (e == nullptr) return;  // NOTE [Pruned events]
  stream(r).wait(*e);
}

void CpuDevice::synchronize(EventId event) {
  if (const auto* e = events_.find(event)) (*e)->wait();
  check_failed();
  events_.prune([](EventId, const std::shared_ptr<CpuEvent>& e) {
    return e->done();
  });  // NOTE [Pruned events]
  release_host_buffers(false);
}

void CpuDevice::synchronize_device() {
  drain();
  check_failed();
  release_host_buffers(false);
}

void CpuDevice::read_scalar(StreamRole r, const TensorRef& ref) {
  backends::check_scalar_dtype(ref.meta.dtype);
  const uint8_t* p = resolve(ref);
  stream(r).enqueue([this, dtype = ref.meta.dtype, p] {
    const double v = backends::decode_scalar(p, dtype);
    std::lock_guard<std::mutex> lock(scalars_mu_);
    scalars_.push_back(v);
  });
}

std::vector<double> CpuDevice::take_scalars() {
  std::lock_guard<std::mutex> lock(scalars_mu_);
  return std::exchange(scalars_, {});
}

}  // namespace fullshard::cpu

#include "backends/common/measurements.h"

#include <iterator>

namespace fullshard::backends {

void Measurements::add(StreamRole stream, uint64_t seq, const std::string* group, double begin_s,
                       double end_s, bool with_start) {
  busy[static_cast<size_t>(stream)].emplace_back(begin_s, end_s);
  if (group)
    collectives.push_back({*group, stream, begin_s, end_s});
  else
    kernels.push_back({seq, begin_s, end_s});
  if (with_start) starts.emplace_back(seq, begin_s);
}

namespace {
template <class T>
void move_append(std::vector<T>& to, std::vector<T>& from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}
}  // namespace

void Measurements::append(Measurements&& more) {
  for (size_t i = 0; i < busy.size(); ++i) move_append(busy[i], more.busy[i]);
  move_append(collectives, more.collectives);
  move_append(starts, more.starts);
  move_append(kernels, more.kernels);
}

void MeasurementStore::add(StreamRole stream, uint64_t seq, const std::string* group,
                           double begin_s, double end_s, bool with_start) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.add(stream, seq, group, begin_s, end_s, with_start);
}

void MeasurementStore::append(Measurements&& more) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.append(std::move(more));
}

StreamIntervals MeasurementStore::take_busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(m_.busy, {});
}

std::vector<CollectiveInterval> MeasurementStore::take_collectives() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(m_.collectives, {});
}

std::vector<std::pair<uint64_t, double>> MeasurementStore::take_starts() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(m_.starts, {});
}

std::vector<KernelTime> MeasurementStore::take_kernels() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(m_.kernels, {});
}

std::optional<StreamIntervals> MeasurementStore::take_busy_intervals() {
  if (collect_ && !collect_()) return std::nullopt;
  return take_busy();
}

std::vector<CollectiveInterval> MeasurementStore::take_collective_intervals() {
  if (collect_ && !collect_()) return {};
  return take_collectives();
}

std::vector<std::pair<uint64_t, double>> MeasurementStore::take_work_starts() {
  if (collect_ && !collect_()) return {};
  return take_starts();
}

std::vector<KernelTime> MeasurementStore::take_kernel_times() {
  if (collect_ && !collect_()) return {};
  return take_kernels();
}

}  // namespace fullshard::backends

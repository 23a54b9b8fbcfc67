#include "backends/cuda/nccl_process_group.h"

#include <thread>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/nccl_args.h"
#include "backends/gloo/fingerprint.h"
#include "backends/cuda/nccl_unique_id.h"
#include "backends/gloo/process_group.h"
#include "core/common/error.h"

namespace fullshard::cuda {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::microseconds(20);

}  // namespace

std::string NcclProcessGroup::who() const {
  std::string s = "nccl: rank " + std::to_string(global_rank_) + " (member " +
                  std::to_string(rank_) + " of group " + text() + ")";
  return s;
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                                   const ProcessGroup& group, int global_rank,
                                   NcclProcessGroupOptions options)
    : group_(group),
      global_rank_(global_rank),
      rank_(group.index_of(global_rank)),
      options_(std::move(options)) {
  FULLSHARD_CHECK(rank_ >= 0, "rank " + std::to_string(global_rank) + " is not a member of group " +
                                  group.name);
  FULLSHARD_CHECK(options_.timeout.count() > 0, "NCCL timeout must be positive");
  FULLSHARD_CHECK(group.size() == 1 || store != nullptr,
                  "an NCCL group of several ranks needs a rendezvous store");
  const auto deadline = Clock::now() + options_.timeout;
  ncclUniqueId id{};
  if (rank_ == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw gloo_backend::CollectiveError(who() +
                                          ": ncclGetUniqueId failed: " + nccl_error_text(r));
  }
  if (group.size() > 1) {
    const int generation = next_unique_id_generation(store, global_rank, options_.instance, group);
    id = exchange_unique_id(*store, nccl_unique_id_key(options_.instance, group, generation),
                            rank_ == 0, id, options_.timeout, who(), group.ranks[0]);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = group_.name.c_str();
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, group.size(), id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
    throw gloo_backend::CollectiveError(who() +
                                        ": ncclCommInitRankConfig failed: " + nccl_error_text(r));
  }
  std::lock_guard<std::mutex> lock(launch_mu_);
  wait_ready(
      deadline,
      "communicator creation (ncclCommInitRankConfig; every member must construct the group)");
}

NcclProcessGroup::~NcclProcessGroup() {
  std::lock_guard<std::mutex> lock(launch_mu_);
  release_barrier_word();
  if (comm_ == nullptr || aborted_) return;
  // A destroy waits for the communicator's pending work; after a failure nothing may wait.
  ncclResult_t state = ncclSuccess;
  ncclCommGetAsyncError(comm_, &state);
  if (state == ncclSuccess) {
    ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + options_.timeout;
    do {
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclInProgress) break;
      std::this_thread::sleep_for(kPollInterval);
    } while (Clock::now() < deadline);
  }
  if (state == ncclSuccess) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

ncclResult_t NcclProcessGroup::async_error() const {
  // The host thread may be launching (and, on a failed launch, aborting: comm_ is freed) under
  // launch_mu_; it checks the state itself then, so the watchdog just looks again later.
  std::unique_lock<std::mutex> lock(launch_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return ncclInProgress;
  if (aborted_ || comm_ == nullptr) return ncclSuccess;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  return r != ncclSuccess ? r : state;
}

std::string NcclProcessGroup::last_error() const {
  std::unique_lock<std::mutex> lock(launch_mu_, std::try_to_lock);
  const char* m =
      lock.owns_lock() && comm_ != nullptr && !aborted_ ? ncclGetLastError(comm_) : nullptr;
  return m != nullptr ? std::string(m) : std::string();
}

void NcclProcessGroup::release_barrier_word() {
  if (barrier_word_ == nullptr) return;
  // The word may still be read by a barrier kernel; freeing pinned memory waits for the device.
  if (!aborted_) cudaDeviceSynchronize();
  cudaFreeHost(barrier_word_);
  barrier_word_ = nullptr;
}

void NcclProcessGroup::abort() {
  std::lock_guard<std::mutex> lock(launch_mu_);
  if (aborted_.exchange(true) || comm_ == nullptr) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclProcessGroup::wait_ready(Clock::time_point deadline, const std::string& what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress || Clock::now() >= deadline) {
      const std::string detail = state == ncclInProgress
                                     ? "did not finish within " +
                                           std::to_string(options_.timeout.count()) +
                                           " ms (a member is missing or stalled)"
                                     : "failed: " + nccl_error_text(state) + " " + last_error();
      ncclCommAbort(comm_);
      comm_ = nullptr;
      aborted_ = true;
      throw gloo_backend::CollectiveError(who() + ": " + what + " " + detail +
                                          "; the communicator was aborted");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void NcclProcessGroup::launch(const CollectiveArgs& a, cudaStream_t stream) {
  const ncclDataType_t dt = nccl_dtype(a.dtype);
  ncclResult_t r = ncclSuccess;
  switch (a.kind) {
    case CollectiveKind::kAllGather:
      r = ncclAllGather(a.input, a.output, a.count, dt, comm_, stream);
      break;
    case CollectiveKind::kBroadcast:
      r = ncclBroadcast(a.output, a.output, a.count, dt, a.root, comm_, stream);
      break;
    case CollectiveKind::kBarrier: {
      // NCCL has no barrier (and skips 0-element collectives): ProcessGroupNCCL all-reduces
      // one element. Ours lives in a pinned, device-mapped host word (barrier_word_) so that
      // no device memory is taken outside the allocator.
      if (barrier_word_ == nullptr) {
        check_cuda(cudaHostAlloc(&barrier_word_, sizeof(float),
                                 cudaHostAllocPortable | cudaHostAllocMapped),
                   "cudaHostAlloc (NCCL barrier word)");
      }
      r = ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream);
      break;
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce: {
      const NcclReduction red = nccl_reduction(a.op, a.scale, a.dtype);
      ncclRedOp_t op = red.builtin;
      if (red.premul) {
        NcclReduction scalar = red;  // NCCL reads the host-immediate scalar during the call
        r = ncclRedOpCreatePreMulSum(&op, scalar.scalar.data(), dt, ncclScalarHostImmediate, comm_);
        if (r != ncclSuccess && r != ncclInProgress) break;
      }
      r = a.kind == CollectiveKind::kReduceScatter
              ? ncclReduceScatter(a.input, a.output, a.count, dt, op, comm_, stream)
              : ncclAllReduce(a.input, a.output, a.count, dt, op, comm_, stream);
      if (red.premul) {
        // After the launch has left NCCL's hands (NOTE [Non-blocking launches]).
        if (r == ncclSuccess || r == ncclInProgress) {
          wait_ready(Clock::now() + options_.timeout, gloo_backend::describe(a.info()) + " launch");
          r = ncclSuccess;
        }
        ncclRedOpDestroy(op, comm_);
      }
      break;
    }
    case CollectiveKind::kAllToAll: {  // NOTE [All-to-all over NCCL] in nccl_args.h
      const size_t es = dtype_size(a.dtype);
      const auto* in = static_cast<const unsigned char*>(a.input);
      auto* out = static_cast<unsigned char*>(a.output);
      r = ncclGroupStart();
      if (r != ncclSuccess) break;
      for (const NcclTransfer& t : nccl_all_to_all_transfers(a.send_counts, a.recv_counts)) {
        r = t.send ? ncclSend(in + t.offset * es, t.count, dt, t.peer, comm_, stream)
                   : ncclRecv(out + t.offset * es, t.count, dt, t.peer, comm_, stream);
        if (r != ncclSuccess && r != ncclInProgress) break;
      }
      const ncclResult_t end = ncclGroupEnd();  // always closes the group it opened
      if (r == ncclSuccess || r == ncclInProgress) r = end;
      break;
    }
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
    throw gloo_backend::CollectiveError(who() + ": " + gloo_backend::describe(a.info()) +
                                        " could not be enqueued: " + nccl_error_text(r) +
                                        "; the communicator was aborted");
  }
}

void NcclProcessGroup::run(const CollectiveArgs& a, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(launch_mu_);
  if (aborted_ || comm_ == nullptr)
    throw gloo_backend::CollectiveError(
        who() + ": " + gloo_backend::describe(a.info()) +
        " cannot run: the communicator was aborted after an earlier failure");
  launch(a, stream);
  if (comm_ != nullptr)
    wait_ready(Clock::now() + options_.timeout, gloo_backend::describe(a.info()) + " launch");
}

void NcclProcessGroup::point_to_point(bool send, void* buffer, size_t count, DType dtype, int peer,
                                      cudaStream_t stream, const std::string& name) {
  FULLSHARD_CHECK(peer >= 0 && peer < group_.size() && peer != rank_,
                  "nccl: " + std::string(send ? "send '" : "recv '") + name + "' with member " +
                      std::to_string(peer) + ", which is not another member of the group");
  gloo_backend::CallInfo call{
      CollectiveKind::kBroadcast, count, dtype, false, ReduceOp::kSum, peer, name,
      send ? "send" : "recv",     0};
  const std::string what = gloo_backend::describe(call);
  std::lock_guard<std::mutex> lock(launch_mu_);
  if (aborted_ || comm_ == nullptr)
    throw gloo_backend::CollectiveError(
        who() + ": " + what + " cannot run: the communicator was aborted after an earlier failure");
  const ncclDataType_t dt = nccl_dtype(dtype);
  const ncclResult_t r = send ? ncclSend(buffer, count, dt, peer, comm_, stream)
                              : ncclRecv(buffer, count, dt, peer, comm_, stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
    throw gloo_backend::CollectiveError(who() + ": " + what + " could not be enqueued: " +
                                        nccl_error_text(r) + "; the communicator was aborted");
  }
  wait_ready(Clock::now() + options_.timeout, what + " launch");
}

void NcclProcessGroup::send(const void* buffer, size_t count, DType dtype, int peer,
                            cudaStream_t stream, const std::string& name) {
  point_to_point(true, const_cast<void*>(buffer), count, dtype, peer, stream, name);
}

void NcclProcessGroup::recv(void* buffer, size_t count, DType dtype, int peer, cudaStream_t stream,
                            const std::string& name) {
  point_to_point(false, buffer, count, dtype, peer, stream, name);
}

}  // namespace fullshard::cuda

#include "runner/checkpoint_saver.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/checkpoint/checkpoint_dir.h"
#include "core/checkpoint/rank_pieces.h"
#include "core/common/error.h"
#include "runner/checkpoint.h"

namespace fullshard::runner {
namespace fs = std::filesystem;
namespace {

const char* const kFlag = "--checkpoint-dir";

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One rank's file of one save, staged in host memory.
struct StagedShard {
  std::string path;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<SafetensorsTensor> tensors;  // point into `bytes`
  uint64_t total = 0;
};

StagedShard stage(Backend& b, const std::vector<LocalCheckpointTensor>& tensors,
                  const RankPieces& pieces, const std::string& path) {
  StagedShard st;
  st.path = path;
  st.bytes.reserve(tensors.size());
  for (const auto& t : tensors) {
    // A parameter replicated over tp: tp rank 0 writes it; a persistent buffer: file 0's writer
    // (NOTE [Persistent buffers in checkpoints] in core/checkpoint/checkpoint_metadata.h).
    if (t.buffer ? pieces.file_index() != 0 : !pieces.stores(*t.param)) continue;
    st.bytes.emplace_back(t.local.nbytes());
    b.copy_to_host(t.local, st.bytes.back().data());
    st.total += t.local.nbytes();
    st.tensors.push_back({t.name, std::string(safetensors_dtype_name(t.local.meta.dtype)),
                          t.local.meta.shape, st.bytes.back().data()});
  }
  return st;
}

}  // namespace

nlohmann::json checkpoint_stats_json(const CheckpointSaveStats& s) {
  return {{"saves", s.saves},
          {"mode", checkpoint_save_mode_name(s.mode)},
          {"staging_bytes", s.staging_bytes},
          {"exposed_s", s.exposed_s},
          {"background_s", s.background_s},
          {"hidden_s", s.hidden_s}};
}

CheckpointSaveStats checkpoint_stats_from_json(const nlohmann::json& j) {
  CheckpointSaveStats s;
  if (!j.is_object()) return s;
  s.saves = j.value("saves", 0);
  s.mode = checkpoint_save_mode_from_name(j.value("mode", std::string("sync")))
               .value_or(CheckpointSaveMode::kSync);
  s.staging_bytes = j.value("staging_bytes", uint64_t{0});
  s.exposed_s = j.value("exposed_s", 0.0);
  s.background_s = j.value("background_s", 0.0);
  s.hidden_s = j.value("hidden_s", 0.0);
  return s;
}

CheckpointSaver::CheckpointSaver(Backend& b, const Scenario& s, CheckpointSaveOptions o)
    : b_(b), s_(s), o_(std::move(o)) {
  stats_.mode = o_.mode;
}

CheckpointSaver::~CheckpointSaver() {
  if (!worker_.joinable()) return;
  cancel_ = true;  // rank 0's thread may wait for the files of a rank that failed
  worker_.join();
}

void CheckpointSaver::wait_previous() {
  if (!worker_.joinable()) return;
  const double t0 = now_s();
  worker_.join();
  const double waited = now_s() - t0;
  stats_.background_s += worker_s_;
  stats_.hidden_s += std::max(0.0, worker_s_ - waited);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void CheckpointSaver::finish() {
  const double t0 = now_s();
  wait_previous();
  stats_.exposed_s += now_s() - t0;
}

void CheckpointSaver::save(TrainingProgram& prog, int64_t steps_done, const BatchSource* data) {
  const double t0 = now_s();
  wait_previous();  // one save in flight at a time; rank 0's includes its commit
  const MeshInfo mesh = mesh_info_for(s_, b_.rank());
  const RankPieces pieces = rank_pieces(s_, b_.rank());
  const bool writer = !mesh.replicate_group ||
                      mesh.replicate_group->index_of(b_.rank()) == 0;  // HSDP: one replica writes
  const bool leader = b_.rank() == 0;
  const std::string folder = (fs::path(o_.root) / step_folder_name(steps_done)).string();
  if (leader) begin_checkpoint(o_.root, steps_done, kFlag);
  world_barrier(b_, "checkpoint begin");
  const auto tensors = local_checkpoint_tensors(prog);
  auto shard = std::make_shared<StagedShard>();
  if (writer)
    *shard =
        stage(b_, tensors, pieces,
              (fs::path(folder) / shard_file_name(pieces.file_index(), piece_files(pieces.mesh)))
                  .string());
  std::shared_ptr<CheckpointMetadata> meta;
  if (leader)
    meta = std::make_shared<CheckpointMetadata>(
        checkpoint_metadata(b_, prog, s_, steps_done, tensors, data));
  ++stats_.saves;
  if (o_.mode == CheckpointSaveMode::kSync) {
    if (writer) write_safetensors(shard->path, shard->tensors, {}, kFlag);
    shard.reset();
    world_barrier(b_, "checkpoint written");
    if (leader) {
      commit_checkpoint(o_.root, *meta, kFlag);
      prune_checkpoints(o_.root, o_.keep_last, kFlag);
    }
    stats_.exposed_s += now_s() - t0;
    return;
  }
  stats_.staging_bytes = std::max(stats_.staging_bytes, shard->total);
  cancel_ = false;
  worker_s_ = 0;
  worker_ = std::thread([this, shard, meta, writer, folder] {
    const double w0 = now_s();
    try {
      if (writer) write_safetensors(shard->path, shard->tensors, {}, kFlag);
      shard->bytes.clear();  // the staging buffer is freed as soon as it is written
      if (meta) {
        for (const auto& f : meta->files)
          while (!fs::exists(fs::path(folder) / f.name)) {
            if (cancel_) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        commit_checkpoint(o_.root, *meta, kFlag);
        prune_checkpoints(o_.root, o_.keep_last, kFlag);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    worker_s_ = now_s() - w0;
  });
  stats_.exposed_s += now_s() - t0;
}

}  // namespace fullshard::runner

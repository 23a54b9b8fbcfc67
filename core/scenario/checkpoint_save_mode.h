#pragma once
// How a distributed checkpoint is saved, in torch.distributed.checkpoint's words: dcp.save
// (kSync) or dcp.async_save (kAsync). Spelled "sync" / "async" in the scenario's
// training.checkpoint.mode and in `fullshard train / plan --checkpoint-mode`.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fullshard {

// kSync: training waits until the save is written and committed. kAsync: the shards are staged
// to host memory and written by a background thread while training goes on (NOTE [Asynchronous
// save] in runner/checkpoint_saver.h; its simulated cost: NOTE [Checkpoint cost]).
enum class CheckpointSaveMode : uint8_t { kSync, kAsync };

const char* checkpoint_save_mode_name(CheckpointSaveMode m);  // "sync", "async"
// Every mode's name, in enum order (the choices a reader offers).
const std::vector<std::string>& checkpoint_save_mode_names();
// "sync" or "async"; anything else: nullopt.
std::optional<CheckpointSaveMode> checkpoint_save_mode_from_name(const std::string& name);
// As checkpoint_save_mode_from_name, but anything else throws the one-line InputError naming
// `field`: "<field>: is '<value>'; use sync (the default) or async".
CheckpointSaveMode parse_checkpoint_save_mode(const std::string& value, const std::string& field);

}  // namespace fullshard

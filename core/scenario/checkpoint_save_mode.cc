#include "core/scenario/checkpoint_save_mode.h"

#include "core/common/error.h"

namespace fullshard {

const char* checkpoint_save_mode_name(CheckpointSaveMode m) {
  return m == CheckpointSaveMode::kAsync ? "async" : "sync";
}

const std::vector<std::string>& checkpoint_save_mode_names() {
  static const std::vector<std::string> names{"sync", "async"};
  return names;
}

std::optional<CheckpointSaveMode> checkpoint_save_mode_from_name(const std::string& name) {
  if (name == "sync") return CheckpointSaveMode::kSync;
  if (name == "async") return CheckpointSaveMode::kAsync;
  return std::nullopt;
}

CheckpointSaveMode parse_checkpoint_save_mode(const std::string& value, const std::string& field) {
  if (auto m = checkpoint_save_mode_from_name(value)) return *m;
  throw InputError(field, "is '" + value + "'", "use sync (the default) or async");
}

}  // namespace fullshard

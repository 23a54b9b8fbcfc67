#include "core/scenario/checkpoint_save_mode.h"

#include "core/common/error.h"

namespace fullshard {

const std::vector<std::string>& checkpoint_save_mode_names() {
  static const std::vector<std::string> names{"sync", "async"};  // enum order
  return names;
}

const char* checkpoint_save_mode_name(CheckpointSaveMode m) {
  return checkpoint_save_mode_names()[static_cast<size_t>(m)].c_str();
}

std::optional<CheckpointSaveMode> checkpoint_save_mode_from_name(const std::string& name) {
  const auto& names = checkpoint_save_mode_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<CheckpointSaveMode>(i);
  return std::nullopt;
}

CheckpointSaveMode parse_checkpoint_save_mode(const std::string& value, const std::string& field) {
  if (auto m = checkpoint_save_mode_from_name(value)) return *m;
  throw InputError(field, "is '" + value + "'", "use sync (the default) or async");
}

}  // namespace fullshard

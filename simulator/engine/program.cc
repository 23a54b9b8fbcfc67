#include "simulator/engine/program.h"

namespace fullshard::sim {

const std::vector<std::string>& NameTable::view() const {
  static const std::vector<std::string> kNone;
  return names_ ? *names_ : kNone;
}

void NameTable::emplace_back(std::string_view name) {
  if (!names_)
    names_ = std::make_shared<std::vector<std::string>>();
  else if (names_.use_count() > 1)  // NOTE [Shared names]: copy before appending
    names_ = std::make_shared<std::vector<std::string>>(*names_);
  names_->emplace_back(name);
}

}  // namespace fullshard::sim

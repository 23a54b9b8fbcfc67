#include "core/common/error.h"

namespace fullshard {

InputError::InputError(std::string where, std::string problem, std::string fix)
    : std::runtime_error(where + ": " + problem + (fix.empty() ? "" : "; " + fix)),
      where_(std::move(where)) {}

void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) +
                      ": check `" + cond + "` failed: " + msg);
}

}  // namespace fullshard

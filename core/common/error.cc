#include "core/common/error.h"

#include "core/common/user_text.h"

namespace fullshard {

namespace {
// NOTE [Printing user text] (user_text.h): the parts of an InputError quote what the user
// wrote, so each is made printable and bounded here, once, for every error.
constexpr size_t kMaxWhere = 256, kMaxProblem = 512, kMaxFix = 1024;
}  // namespace

InputError::InputError(std::string where, std::string problem, std::string fix)
    : InputError(printable(where, kMaxWhere), printable(problem, kMaxProblem),
                 printable(fix, kMaxFix), 0) {}

InputError::InputError(std::string where, std::string problem, std::string fix, int)
    : std::runtime_error(where + ": " + problem + (fix.empty() ? "" : "; " + fix)),
      where_(std::move(where)) {}

void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) +
                      ": check `" + cond + "` failed: " + msg);
}

}  // namespace fullshard

#pragma once
// Two error channels (docs/architecture.md, "Errors"):
//  - InputError: the user gave bad input (a scenario field, a CLI flag, a missing file).
//    The message names where (JSON path or flag), the bad value and the fix. The CLI prints
//    it on one line and exits with code 2.
//  - FULLSHARD_CHECK: an internal invariant; failing one is a fullshard bug. It throws
//    InternalError with file:line so that tests can catch it and the CLI never aborts.
#include <stdexcept>
#include <string>

namespace fullshard {

class InputError : public std::runtime_error {
 public:
  // where: JSON path like "fsdp.mesh.shape[1]" or a flag like "--json". Each part is passed
  // through printable() (core/common/user_text.h): control characters escaped, length bounded.
  InputError(std::string where, std::string problem, std::string fix);
  const std::string& where() const { return where_; }

 private:
  InputError(std::string where, std::string problem, std::string fix, int /*already printable*/);
  std::string where_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               const std::string& msg);

}  // namespace fullshard

#define FULLSHARD_CHECK(cond, msg)                                            \
  do {                                                                        \
    if (!(cond)) ::fullshard::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)

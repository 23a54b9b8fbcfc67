#pragma once
// The message of the InputError a call throws, for tests of one-line errors ("" when it throws
// none, so a find() on it fails the test). Any other exception propagates.
#include <string>

#include "core/common/error.h"

namespace fullshard::testing {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace fullshard::testing

#pragma once
// The real backends this binary was built with ("cpu" always, "cuda" where CUDA was found).
#include "runner/backend_factory.h"

namespace fullshard::cli {

const runner::BackendRegistry& real_backends();

}  // namespace fullshard::cli

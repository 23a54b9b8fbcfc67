#include "core/common/build_info.h"

#ifndef FULLSHARD_VERSION
#define FULLSHARD_VERSION "unknown"
#endif
#ifndef FULLSHARD_BUILD_TYPE
#define FULLSHARD_BUILD_TYPE "unknown"
#endif
#ifndef FULLSHARD_NATIVE_BUILD
#define FULLSHARD_NATIVE_BUILD 0
#endif
#ifndef FULLSHARD_CUDA_BUILD
#define FULLSHARD_CUDA_BUILD 0
#endif

namespace fullshard {

BuildInfo build_info() {
  BuildInfo b;
  b.version = FULLSHARD_VERSION;
  b.build_type = FULLSHARD_BUILD_TYPE;
  b.native = FULLSHARD_NATIVE_BUILD != 0;
  b.cuda = FULLSHARD_CUDA_BUILD != 0;
  return b;
}

std::string build_description() {
  const BuildInfo b = build_info();
  return "fullshard " + b.version + " (" +
         (b.build_type.empty() ? std::string("no build type") : b.build_type) + ", " +
         (b.native ? "host-tuned -march=native code: runs only on CPUs like the one that built it"
                   : "portable code for any x86-64 CPU") +
         ", " + (b.cuda ? "CUDA backend" : "no CUDA backend") + ")";
}

}  // namespace fullshard

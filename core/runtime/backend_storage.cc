#include "core/runtime/backend_storage.h"

namespace fullshard {

Tensor empty_tensor(Backend& b, TensorMeta meta, MemCategory category, StreamRole stream,
                    std::string_view what) {
  Buffer buf = b.allocate(meta.nbytes(), category, stream, what);
  return adopt_buffer(b, buf, std::move(meta));
}

}  // namespace fullshard

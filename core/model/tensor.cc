#include "core/model/tensor.h"

namespace fullshard {

Tensor Tensor::empty(Backend& b, TensorMeta meta, MemCategory category, StreamRole stream,
                     std::string_view what) {
  Buffer buf = b.allocate(meta.nbytes(), category, stream, what);
  return Tensor(std::make_shared<Storage>(b, buf), std::move(meta));
}

}  // namespace fullshard

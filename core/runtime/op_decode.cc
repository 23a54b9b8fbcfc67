// validate_op_args: every kind's argument struct, from the op table (op_kinds.def's Args column).
#include "core/runtime/adamw_args.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/float8_args.h"
#include "core/runtime/layer_args.h"
#include "core/runtime/moe_args.h"
#include "core/runtime/nf4_args.h"
#include "core/runtime/norm_args.h"
#include "core/runtime/op_args.h"
#include "core/runtime/repeat_kv_args.h"
#include "core/runtime/rope_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard {

void validate_op_args(const OpCall& op) {
  switch (op.kind) {
#define FS_OP(kind, Args, ...) \
  case OpKind::kind:           \
    (void)Args::decode(op);    \
    return;
#include "core/runtime/op_kinds.def"
#undef FS_OP
  }
  FULLSHARD_CHECK(false, op_where(op) + "is not an op kind");
}

}  // namespace fullshard

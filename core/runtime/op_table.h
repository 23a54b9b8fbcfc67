#pragma once
// The op table (op_kinds.def) as data: a kind's name, arity, typed argument struct and
// properties, read by everything that asks about a kind rather than switching over OpKind.
//
// NOTE [One op table]: every OpKind is one FS_OP row of core/runtime/op_kinds.def; op.h makes
// the enum from the rows, so a kind without a row cannot exist. Each row names the kind's
// argument struct (core/runtime/*_args.h: `encode` where the model builds the OpCall, `decode`
// that validates once and throws the one message), its operand counts and its properties:
// kOpBlas (a cuBLAS matmul, using its thread's workspace), kOpCompiled (a torch.compile'd
// region's generated kernel), kOpHostFill (the backend's own host work, no kernel:
// core/data fills it) and kOpSimulatedOnly (no real backend runs it: asynchronous TP's
// collective matmuls). op_kind_name,
// op_uses_blas, is_compiled_region and the backends' has_kernel read this table;
// tests/unit/op_table_test.cc checks every kind's row and its decode against the host
// programs the model records.
#include <cstddef>
#include <cstdint>

#include "core/runtime/op.h"

namespace fullshard {

enum OpProperty : uint32_t {
  kOpBlas = 1u << 0,
  kOpCompiled = 1u << 1,
  kOpHostFill = 1u << 2,
  kOpSimulatedOnly = 1u << 3,
};

struct OpInfo {
  static constexpr int kMany = -1;  // no upper bound on an operand count
  OpKind kind;
  const char* name;  // "Fill" for kFill
  const char* args;  // the argument struct's name, e.g. "RopeArgs"
  int in_min, in_max, out_min, out_max;
  uint32_t properties;

  constexpr bool has(OpProperty p) const { return (properties & p) != 0; }
  constexpr bool inputs_ok(size_t n) const {
    return static_cast<int64_t>(n) >= in_min &&
           (in_max == kMany || static_cast<int64_t>(n) <= in_max);
  }
  constexpr bool outputs_ok(size_t n) const {
    return static_cast<int64_t>(n) >= out_min &&
           (out_max == kMany || static_cast<int64_t>(n) <= out_max);
  }
};

namespace op_table_detail {
constexpr int kMany = OpInfo::kMany;
// clang-format off
inline constexpr OpInfo kRows[] = {
#define FS_OP(kind, args, in_min, in_max, out_min, out_max, props) \
  {OpKind::kind, #kind + 1, #args, in_min, in_max, out_min, out_max, static_cast<uint32_t>(props)},
#include "core/runtime/op_kinds.def"
#undef FS_OP
};
// clang-format on
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < sizeof(kRows) / sizeof(kRows[0]); ++i)
    if (static_cast<size_t>(kRows[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "op_kinds.def: row i must be OpKind i");
}  // namespace op_table_detail

inline constexpr size_t kOpKindCount =
    sizeof(op_table_detail::kRows) / sizeof(op_table_detail::kRows[0]);

inline constexpr const OpInfo& op_info(OpKind k) {
  return op_table_detail::kRows[static_cast<size_t>(k)];
}

// Whether a real backend's kernel library runs the kind: every kind but the backend's own host
// fills (kOpHostFill) and the simulator-only ones (kOpSimulatedOnly). A kind with a device
// kernel somewhere may still lack one on a given backend (cuda::has_kernel lists its own).
inline constexpr bool has_device_kernel(OpKind k) {
  return !op_info(k).has(kOpHostFill) && !op_info(k).has(kOpSimulatedOnly);
}

}  // namespace fullshard

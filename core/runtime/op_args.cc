#include "core/runtime/op_args.h"

#include "core/common/error.h"
#include "core/runtime/op_table.h"

namespace fullshard {

std::string op_where(const OpCall& op) {
  return std::string(op_kind_name(op.kind)) + " '" + op.name + "': ";
}

void check_arity(const OpCall& op, size_t n_in, size_t n_out) {
  FULLSHARD_CHECK(op.inputs.size() == n_in && op.outputs.size() == n_out,
                  op_where(op) + "expected " + std::to_string(n_in) + " inputs and " +
                      std::to_string(n_out) + " outputs, got " + std::to_string(op.inputs.size()) +
                      " and " + std::to_string(op.outputs.size()));
}

void check_table_arity(const OpCall& op) {
  const OpInfo& t = op_info(op.kind);
  auto bound = [](int lo, int hi) {
    return std::to_string(lo) + (hi == lo              ? ""
                                 : hi == OpInfo::kMany ? "+"
                                                       : ".." + std::to_string(hi));
  };
  FULLSHARD_CHECK(t.inputs_ok(op.inputs.size()) && t.outputs_ok(op.outputs.size()),
                  op_where(op) + "expected " + bound(t.in_min, t.in_max) + " inputs and " +
                      bound(t.out_min, t.out_max) + " outputs, got " +
                      std::to_string(op.inputs.size()) + " and " +
                      std::to_string(op.outputs.size()));
}

void check_addresses(const OpCall& op, const std::vector<void*>& in,
                     const std::vector<void*>& out) {
  check_table_arity(op);  // before any kernel indexes its operands
  FULLSHARD_CHECK(in.size() == op.inputs.size() && out.size() == op.outputs.size(),
                  op_where(op) + "address count does not match the op's tensors");
  for (size_t i = 0; i < in.size(); ++i)
    FULLSHARD_CHECK(in[i] || op.inputs[i].nbytes() == 0,
                    op_where(op) + "null input address " + std::to_string(i));
  for (size_t i = 0; i < out.size(); ++i)
    FULLSHARD_CHECK(out[i] || op.outputs[i].nbytes() == 0,
                    op_where(op) + "null output address " + std::to_string(i));
}

int64_t decode_unary(const OpCall& op) {
  check_arity(op, 1, 1);
  const int64_t n = op.inputs[0].meta.numel();
  FULLSHARD_CHECK(op.outputs[0].meta.numel() == n,
                  op_where(op) + "output size differs from the input");
  return n;
}

void decode_reduce(const OpCall& op) {
  if (op.kind == OpKind::kSquaredNorm) {
    FULLSHARD_CHECK(
        (op.outputs.size() == 1 || op.outputs.size() == 2) &&
            op.outputs[0].meta.numel() == static_cast<int64_t>(op.inputs.size()),
        op_where(op) + "expects n inputs and one [n] output (then _foreach_norm's scratch)");
    return;
  }
  check_arity(op, 1, 1);
  FULLSHARD_CHECK(op.outputs[0].meta.numel() == 1, op_where(op) + "output must have one element");
}

NoArgs NoArgs::decode(const OpCall& op) {
  check_table_arity(op);
  return {};
}

}  // namespace fullshard

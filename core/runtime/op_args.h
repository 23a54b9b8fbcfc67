#pragma once
// What every typed argument struct (one per op family, named by op_kinds.def's Args column)
// shares: the op named in a message, the operand-count check, and NoArgs for the kinds that
// carry no attributes. Each struct X has
//   void encode(OpCall& op) const;      // writes op.iargs / op.fargs (the model's side)
//   static X decode(const OpCall& op);  // validates once (arity, attributes, operand sizes)
//                                       // and throws InternalError naming the op
// so the CPU kernels, the CUDA dispatch and the simulator read the same fields, checked once.
#include <cstddef>
#include <string>
#include <vector>

#include "core/runtime/op.h"

namespace fullshard {

std::string op_where(const OpCall& op);  // "kCopy 'layers.0 ...': " without the k
// Exactly n_in inputs and n_out outputs, or "expected N inputs and M outputs, got ...".
void check_arity(const OpCall& op, size_t n_in, size_t n_out);
// The op table's bounds for the kind (op_kinds.def).
void check_table_arity(const OpCall& op);
// A kernel's operands within the table's bounds and its addresses: one per operand, null only
// for a zero-byte tensor (both backends' dispatch runs it before any kernel).
void check_addresses(const OpCall& op, const std::vector<void*>& in, const std::vector<void*>& out);

// Decodes `op` with its kind's argument struct (op_kinds.def's Args column): throws what the
// kernels would throw for it. tests/unit/sim_op_table_test.cc runs it on recorded programs.
void validate_op_args(const OpCall& op);

// Operand layouts of kinds without attributes (NoArgs in the table), checked once here too:
// one input and one output of its size (kRsqrt, kExp, kLog, and kScale / kPowScalar /
// kAddScalar after their scalar), its numel returned;
int64_t decode_unary(const OpCall& op);
// kSum (t -> [1]) and kSquaredNorm ((t_0..t_{n-1}) -> [n][, _foreach_norm's scratch]).
void decode_reduce(const OpCall& op);

struct NoArgs {
  void encode(OpCall&) const {}
  static NoArgs decode(const OpCall& op);  // the table's arity
};

}  // namespace fullshard

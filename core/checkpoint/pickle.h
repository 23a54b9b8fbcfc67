#pragma once
// The part of Python's pickle format that PyTorch's checkpoints use: DCP's `.metadata` (a
// pickled torch.distributed.checkpoint.metadata.Metadata) and the `data.pkl` record of a
// torch.save archive (docs/checkpoints.md, "DCP's own format").
//
// NOTE [A pickle subset without Python]: a pickle is a program for a small stack machine; an
// object of a class is written as the class (a global "module.name"), its constructor
// arguments and a state that BUILD applies. We never run it: the decoder builds a tree of
// plain values (PyObj) that records each call as "callable applied to arguments" and each
// object as "class, arguments, state", so a hostile file cannot make us do anything but read
// it. Every global must be one the caller names as expected (a DCP metadata file holds about
// a dozen classes); any other global, any opcode outside the ~35 that protocols 2-5 use for
// these structures, a memo index that was never stored, a stack underflow or a truncated
// stream is an InputError naming the file, the byte offset and the opcode or class. The
// encoder writes protocol 2 (what torch.save's data.pkl uses, and what every Python 3 reads)
// and memoizes exactly as Python's pickler does for a tree without shared objects, so a
// torch.save data.pkl comes out byte for byte as PyTorch writes it (tests/unit/
// checkpoint_pickle_test.cc checks this against bytes Python wrote).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fullshard {

enum class PyKind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kReduce,
  kNewObj,
  kPersId
};

struct PyObj;
using PyPtr = std::shared_ptr<PyObj>;

struct PyObj {
  PyKind kind = PyKind::kNone;
  int64_t i = 0;     // kBool (0 or 1), kInt
  double f = 0;      // kFloat (BINFLOAT: a Python float, an IEEE double)
  std::string s;     // kStr; kGlobal: the module
  std::string name;  // kGlobal: the name inside the module
  // kTuple, kList: the elements; kDict: key, value, key, value, ... in insertion order;
  // kReduce: {callable, args tuple}; kNewObj: {class, args tuple}; kPersId: {the persistent id}.
  std::vector<PyPtr> items;
  PyPtr state;  // kReduce, kNewObj: what BUILD applied (null: no BUILD)
};

PyPtr py_none();
PyPtr py_bool(bool b);
PyPtr py_int(int64_t v);
PyPtr py_float(double v);
PyPtr py_str(std::string s);
PyPtr py_tuple(std::vector<PyPtr> items);
PyPtr py_list(std::vector<PyPtr> items);
PyPtr py_dict(std::vector<PyPtr> keys_and_values);  // k0, v0, k1, v1, ...
PyPtr py_global(std::string module, std::string name);
PyPtr py_reduce(PyPtr callable, std::vector<PyPtr> args);
PyPtr py_newobj(PyPtr cls, PyPtr state);  // cls(*()) then BUILD(state), as dataclasses pickle
PyPtr py_persid(PyPtr id);

// Structural equality of acyclic trees (a damaged pickle can build a list that holds itself:
// never compare what a hostile file decoded to).
bool py_equal(const PyObj& a, const PyObj& b);
std::string py_repr(const PyObj& v);  // Python-like, for errors and test output

// The value of key `key` (a str) in dict `d`, or null.
const PyObj* py_dict_get(const PyObj& d, std::string_view key);
// True when `v` is the global module.name.
bool py_is_global(const PyObj& v, std::string_view module, std::string_view name);

// Protocol 2 bytes of `v` (NOTE [A pickle subset without Python]).
std::string pickle_dumps(const PyObj& v);

// Which globals a decoder accepts: (module, name) -> allowed.
using PickleGlobals = std::function<bool(const std::string& module, const std::string& name)>;

// Decodes `bytes`; `source` names the file in errors. Throws InputError for anything outside
// the subset or a global `allowed` refuses.
PyPtr pickle_loads(std::string_view bytes, const std::string& source, const PickleGlobals& allowed);

}  // namespace fullshard

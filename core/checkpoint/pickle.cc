#include "core/checkpoint/pickle.h"

#include <fmt/format.h>

#include <cstring>

#include "core/common/error.h"

namespace fullshard {
namespace {

PyPtr make(PyKind k) {
  auto p = std::make_shared<PyObj>();
  p->kind = k;
  return p;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

// ---------------------------------------------------------------- encoder
// Memoizes as Python's pickler does (protocol 2): every str, global, non-empty tuple, list,
// dict and REDUCE / NEWOBJ result gets the next memo slot right after it is built.
class Encoder {
 public:
  std::string out;
  void save(const PyObj& v) {
    switch (v.kind) {
      case PyKind::kNone: out += 'N'; return;
      case PyKind::kBool: out += static_cast<char>(v.i ? 0x88 : 0x89); return;
      case PyKind::kInt: save_int(v.i); return;
      case PyKind::kFloat: {  // BINFLOAT: the double's 8 bytes, big-endian
        uint64_t bits;
        std::memcpy(&bits, &v.f, 8);
        out += 'G';
        for (int b = 7; b >= 0; --b) out.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
        return;
      }
      case PyKind::kStr:
        out += 'X';
        put_le(out, v.s.size(), 4);
        out += v.s;
        memoize();
        return;
      case PyKind::kTuple:
        if (v.items.empty()) {
          out += ')';
          return;
        }
        if (v.items.size() <= 3) {
          for (const auto& x : v.items) save(*x);
          out += static_cast<char>(0x85 + v.items.size() - 1);
        } else {
          out += '(';
          for (const auto& x : v.items) save(*x);
          out += 't';
        }
        memoize();
        return;
      case PyKind::kList:
        out += ']';
        memoize();
        batches(v.items, 1, 'a', 'e');
        return;
      case PyKind::kDict:
        out += '}';
        memoize();
        batches(v.items, 2, 's', 'u');
        return;
      case PyKind::kGlobal:
        out += 'c' + v.s + '\n' + v.name + '\n';
        memoize();
        return;
      case PyKind::kReduce:
      case PyKind::kNewObj:
        save(*v.items.at(0));
        save(*v.items.at(1));
        out += v.kind == PyKind::kReduce ? 'R' : static_cast<char>(0x81);
        memoize();
        if (v.state) {
          save(*v.state);
          out += 'b';
        }
        return;
      case PyKind::kPersId:
        save(*v.items.at(0));
        out += 'Q';
        return;
    }
  }

 private:
  uint32_t memo_ = 0;
  void memoize() {
    if (memo_ < 256) {
      out += 'q';
      out += static_cast<char>(memo_);
    } else {
      out += 'r';
      put_le(out, memo_, 4);
    }
    ++memo_;
  }
  void save_int(int64_t x) {
    if (x >= 0 && x <= 0xff) {
      out += 'K';
      put_le(out, static_cast<uint64_t>(x), 1);
    } else if (x >= 0 && x <= 0xffff) {
      out += 'M';
      put_le(out, static_cast<uint64_t>(x), 2);
    } else if (x >= -0x80000000LL && x <= 0x7fffffffLL) {
      out += 'J';
      put_le(out, static_cast<uint64_t>(x), 4);
    } else {  // LONG1: the fewest little-endian two's complement bytes that keep the sign
      int n = 8;
      while (n > 1) {
        const int64_t top =
            x >> (8 * (n - 1) - 1);  // the bits a shorter encoding drops, and its sign
        if (top != 0 && top != -1) break;
        --n;
      }
      out += static_cast<char>(0x8a);
      out += static_cast<char>(n);
      put_le(out, static_cast<uint64_t>(x), n);
    }
  }
  // Python's _batch_appends / _batch_setitems: groups of 1000 (pairs for a dict), a group of
  // one with the single opcode.
  void batches(const std::vector<PyPtr>& items, size_t per, char one, char many) {
    const size_t n = items.size() / per;
    for (size_t b = 0; b < n; b += 1000) {
      const size_t e = std::min(n, b + 1000);
      if (e - b > 1) out += '(';
      for (size_t k = b * per; k < e * per; ++k) save(*items[k]);
      out += e - b > 1 ? many : one;
    }
  }
};

// ---------------------------------------------------------------- decoder
class Decoder {
 public:
  Decoder(std::string_view b, const std::string& source, const PickleGlobals& allowed)
      : b_(b), source_(source), allowed_(allowed) {}

  PyPtr run() {
    while (true) {
      op_at_ = pos_;
      const uint8_t op = u(1);
      switch (op) {
        case 0x80:  // PROTO
          if (u(1) > 5) fail(op, "a pickle protocol above 5");
          break;
        case 0x95: u(8); break;  // FRAME: a length hint
        case '.':                // STOP
          if (stack_.size() != 1 || !marks_.empty())
            fail(op, "STOP with a stack of " + std::to_string(stack_.size()));
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;
        case 'N': push(make(PyKind::kNone)); break;
        case 0x88: push(py_bool(true)); break;
        case 0x89: push(py_bool(false)); break;
        case 'J': push(py_int(static_cast<int32_t>(u(4)))); break;
        case 'K': push(py_int(static_cast<int64_t>(u(1)))); break;
        case 'M': push(py_int(static_cast<int64_t>(u(2)))); break;
        case 'G': {  // BINFLOAT
          uint64_t bits = 0;
          for (int b = 0; b < 8; ++b) bits = (bits << 8) | u(1);
          double d;
          std::memcpy(&d, &bits, 8);
          push(py_float(d));
          break;
        }
        case 0x8a: {  // LONG1
          const uint64_t n = u(1);
          if (n > 8) fail(op, "an integer of " + std::to_string(n) + " bytes");
          uint64_t v = n ? u(static_cast<int>(n)) : 0;
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign
          push(py_int(static_cast<int64_t>(v)));
          break;
        }
        case 'X': push(py_str(text(u(4)))); break;
        case 0x8c: push(py_str(text(u(1)))); break;
        case 0x8d: push(py_str(text(u(8)))); break;
        case ')': push(py_tuple({})); break;
        case 't': push(py_tuple(pop_mark(op))); break;
        case 0x85:
        case 0x86:
        case 0x87: {
          const size_t n = op - 0x84u;
          need(op, n);
          std::vector<PyPtr> items(stack_.end() - static_cast<long>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(py_tuple(std::move(items)));
          break;
        }
        case ']': push(py_list({})); break;
        case '}': push(py_dict({})); break;
        case 'a':
        case 's': {  // APPEND, SETITEM
          const size_t n = op == 'a' ? 1 : 2;
          need(op, n + 1);
          std::vector<PyPtr> items(stack_.end() - static_cast<long>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          extend(op, std::move(items), op == 'a' ? PyKind::kList : PyKind::kDict);
          break;
        }
        case 'e':
        case 'u': {  // APPENDS, SETITEMS
          auto items = pop_mark(op);
          if (op == 'u' && items.size() % 2) fail(op, "an odd number of keys and values");
          need(op, 1);
          extend(op, std::move(items), op == 'e' ? PyKind::kList : PyKind::kDict);
          break;
        }
        case 'c': {  // GLOBAL
          std::string module = line(), name = line();
          push(global(op, std::move(module), std::move(name)));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          need(op, 2);
          PyPtr name = pop(), module = pop();
          if (module->kind != PyKind::kStr || name->kind != PyKind::kStr)
            fail(op, "a global whose name is not a str");
          push(global(op, module->s, name->s));
          break;
        }
        case 'R':
        case 0x81: {  // REDUCE, NEWOBJ
          need(op, 2);
          PyPtr args = pop(), callable = pop();
          if (args->kind != PyKind::kTuple) fail(op, "arguments that are not a tuple");
          auto v = make(op == 'R' ? PyKind::kReduce : PyKind::kNewObj);
          v->items = {callable, args};
          push(v);
          break;
        }
        case 'b': {  // BUILD
          need(op, 2);
          PyPtr state = pop();
          PyObj& obj = *stack_.back();
          if ((obj.kind != PyKind::kReduce && obj.kind != PyKind::kNewObj) || obj.state)
            fail(op, "BUILD on " + py_repr(obj));
          obj.state = state;
          break;
        }
        case 'Q': {  // BINPERSID
          need(op, 1);
          auto v = make(PyKind::kPersId);
          v->items = {pop()};
          push(v);
          break;
        }
        case 'q': put(op, u(1)); break;
        case 'r': put(op, u(4)); break;
        case 0x94: put(op, memo_.size()); break;  // MEMOIZE
        case 'h': push(get(op, u(1))); break;
        case 'j': push(get(op, u(4))); break;
        default: fail(op, "this opcode");
      }
    }
  }

 private:
  std::string_view b_;
  const std::string& source_;
  const PickleGlobals& allowed_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<PyPtr> stack_, memo_;
  std::vector<size_t> marks_;

  [[noreturn]] void fail(uint8_t op, const std::string& what) const {
    const char c = static_cast<char>(op);
    throw InputError(
        source_,
        fmt::format("pickle opcode 0x{:02x}{} at byte {}: {} is not supported", op,
                    c >= 0x21 && c < 0x7f ? fmt::format(" ('{}')", c) : "", op_at_, what),
        "give a checkpoint torch.distributed.checkpoint wrote (a .metadata file and its "
        ".distcp files), undamaged");
  }
  [[noreturn]] void truncated() const {
    throw InputError(source_, fmt::format("pickle ends at byte {} inside an opcode", b_.size()),
                     "the file is truncated or damaged; write it again");
  }
  uint64_t u(int n) {
    if (b_.size() - pos_ < static_cast<size_t>(n)) truncated();
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= uint64_t{static_cast<uint8_t>(b_[pos_ + k])} << (8 * k);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string text(uint64_t n) {
    if (b_.size() - pos_ < n) truncated();
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string line() {
    const size_t e = b_.find('\n', pos_);
    if (e == std::string_view::npos) truncated();
    std::string s(b_.substr(pos_, e - pos_));
    pos_ = e + 1;
    return s;
  }
  void push(PyPtr p) { stack_.push_back(std::move(p)); }
  PyPtr pop() {
    PyPtr p = stack_.back();
    stack_.pop_back();
    return p;
  }
  void need(uint8_t op, size_t n) const {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n)
      fail(op, "an opcode with too few values on the stack (damaged?)");
  }
  std::vector<PyPtr> pop_mark(uint8_t op) {
    if (marks_.empty()) fail(op, "an opcode without its MARK (damaged?)");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyPtr> items(stack_.begin() + static_cast<long>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void extend(uint8_t op, std::vector<PyPtr> items, PyKind want) {
    PyObj& target = *stack_.back();
    if (target.kind != want) fail(op, "adding items to " + py_repr(target));
    for (auto& x : items) target.items.push_back(std::move(x));
  }
  PyPtr global(uint8_t op, std::string module, std::string name) {
    if (!allowed_(module, name)) {
      throw InputError(
          source_,
          fmt::format("pickle global '{}.{}' at byte {} is not a class this file may hold", module,
                      name, op_at_),
          "give a checkpoint torch.distributed.checkpoint wrote; fullshard reads "
          "tensors only (no custom objects)");
    }
    (void)op;
    return py_global(std::move(module), std::move(name));
  }
  void put(uint8_t op, uint64_t i) {
    if (stack_.empty()) fail(op, "a memo store with an empty stack");
    if (i > memo_.size() + (uint64_t{1} << 20)) fail(op, "a memo index of " + std::to_string(i));
    if (memo_.size() <= i) memo_.resize(i + 1);
    memo_[i] = stack_.back();
  }
  PyPtr get(uint8_t op, uint64_t i) {
    if (i >= memo_.size() || !memo_[i])
      fail(op, "memo index " + std::to_string(i) + " (never stored)");
    return memo_[i];
  }
};

}  // namespace

PyPtr py_none() { return make(PyKind::kNone); }
PyPtr py_bool(bool b) {
  auto p = make(PyKind::kBool);
  p->i = b;
  return p;
}
PyPtr py_int(int64_t v) {
  auto p = make(PyKind::kInt);
  p->i = v;
  return p;
}
PyPtr py_float(double v) {
  auto p = make(PyKind::kFloat);
  p->f = v;
  return p;
}
PyPtr py_str(std::string s) {
  auto p = make(PyKind::kStr);
  p->s = std::move(s);
  return p;
}
PyPtr py_tuple(std::vector<PyPtr> items) {
  auto p = make(PyKind::kTuple);
  p->items = std::move(items);
  return p;
}
PyPtr py_list(std::vector<PyPtr> items) {
  auto p = make(PyKind::kList);
  p->items = std::move(items);
  return p;
}
PyPtr py_dict(std::vector<PyPtr> kv) {
  FULLSHARD_CHECK(kv.size() % 2 == 0, "py_dict: keys and values in pairs");
  auto p = make(PyKind::kDict);
  p->items = std::move(kv);
  return p;
}
PyPtr py_global(std::string module, std::string name) {
  auto p = make(PyKind::kGlobal);
  p->s = std::move(module);
  p->name = std::move(name);
  return p;
}
PyPtr py_reduce(PyPtr callable, std::vector<PyPtr> args) {
  auto p = make(PyKind::kReduce);
  p->items = {std::move(callable), py_tuple(std::move(args))};
  return p;
}
PyPtr py_newobj(PyPtr cls, PyPtr state) {
  auto p = make(PyKind::kNewObj);
  p->items = {std::move(cls), py_tuple({})};
  p->state = std::move(state);
  return p;
}
PyPtr py_persid(PyPtr id) {
  auto p = make(PyKind::kPersId);
  p->items = {std::move(id)};
  return p;
}

bool py_equal(const PyObj& a, const PyObj& b) {
  if (a.kind != b.kind || a.i != b.i ||
      std::memcmp(&a.f, &b.f, sizeof a.f) != 0 || a.s != b.s || a.name != b.name ||
      a.items.size() != b.items.size() || !a.state != !b.state)
    return false;
  for (size_t k = 0; k < a.items.size(); ++k)
    if (!py_equal(*a.items[k], *b.items[k])) return false;
  return !a.state || py_equal(*a.state, *b.state);
}

namespace {
// Bounded: a damaged pickle may hold a list that contains itself.
std::string repr(const PyObj& v, int depth) {
  if (depth > 6) return "...";
  auto join = [&](const std::vector<PyPtr>& xs, size_t step, const char* sep) {
    std::string s;
    for (size_t k = 0; k + step <= xs.size(); k += step) {
      if (k > 0) s += ", ";
      if (k >= 16 * step) return s + "...";
      s += repr(*xs[k], depth + 1);
      if (step == 2) s += std::string(sep) + repr(*xs[k + 1], depth + 1);
    }
    return s;
  };
  switch (v.kind) {
    case PyKind::kNone: return "None";
    case PyKind::kBool: return v.i ? "True" : "False";
    case PyKind::kInt: return std::to_string(v.i);
    case PyKind::kFloat: return fmt::format("{}", v.f);
    case PyKind::kStr: return "'" + v.s.substr(0, 64) + (v.s.size() > 64 ? "...'" : "'");
    case PyKind::kTuple: return "(" + join(v.items, 1, "") + (v.items.size() == 1 ? ",)" : ")");
    case PyKind::kList: return "[" + join(v.items, 1, "") + "]";
    case PyKind::kDict: return "{" + join(v.items, 2, ": ") + "}";
    case PyKind::kGlobal: return v.s + "." + v.name;
    case PyKind::kReduce:
    case PyKind::kNewObj:
      return repr(*v.items[0], depth + 1) + repr(*v.items[1], depth + 1) +
             (v.state ? "<" + repr(*v.state, depth + 1) + ">" : "");
    case PyKind::kPersId: return "persid(" + repr(*v.items[0], depth + 1) + ")";
  }
  return "?";
}
}  // namespace

std::string py_repr(const PyObj& v) { return repr(v, 0); }

const PyObj* py_dict_get(const PyObj& d, std::string_view key) {
  if (d.kind != PyKind::kDict) return nullptr;
  for (size_t k = 0; k + 1 < d.items.size(); k += 2)
    if (d.items[k]->kind == PyKind::kStr && d.items[k]->s == key) return d.items[k + 1].get();
  return nullptr;
}

bool py_is_global(const PyObj& v, std::string_view module, std::string_view name) {
  return v.kind == PyKind::kGlobal && v.s == module && v.name == name;
}

std::string pickle_dumps(const PyObj& v) {
  Encoder e;
  e.out = "\x80\x02";
  e.save(v);
  e.out += '.';
  return e.out;
}

PyPtr pickle_loads(std::string_view bytes, const std::string& source,
                   const PickleGlobals& allowed) {
  return Decoder(bytes, source, allowed).run();
}

}  // namespace fullshard

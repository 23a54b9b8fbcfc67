// The pickle subset (NOTE [A pickle subset without Python]): the encoder's bytes equal Python's
// pickle.dumps(v, protocol=2) (fixed byte strings generated once with CPython 3.11's pickle), any
// tree round trips, and the decoder refuses what is outside the subset with one line naming the
// opcode or the class, at any truncation and any damaged byte.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>

#include "core/checkpoint/pickle.h"
#include "core/common/error.h"

namespace fullshard {
namespace {

const PickleGlobals kAny = [](const std::string&, const std::string&) { return true; };

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

std::string error_of(std::string_view b, const PickleGlobals& allowed = kAny) {
  try {
    pickle_loads(b, "f.pkl", allowed);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Pickle, IntegersAsPythonWritesThem) {
  // pickle.dumps(v, protocol=2) for each v.
  const std::vector<std::pair<int64_t, std::string>> cases{
      {0, bytes({0x80, 0x02, 0x4b, 0x00, 0x2e})},
      {255, bytes({0x80, 0x02, 0x4b, 0xff, 0x2e})},
      {256, bytes({0x80, 0x02, 0x4d, 0x00, 0x01, 0x2e})},
      {65535, bytes({0x80, 0x02, 0x4d, 0xff, 0xff, 0x2e})},
      {65536, bytes({0x80, 0x02, 0x4a, 0x00, 0x00, 0x01, 0x00, 0x2e})},
      {-1, bytes({0x80, 0x02, 0x4a, 0xff, 0xff, 0xff, 0xff, 0x2e})},
      {2147483647, bytes({0x80, 0x02, 0x4a, 0xff, 0xff, 0xff, 0x7f, 0x2e})},
      {-2147483648LL, bytes({0x80, 0x02, 0x4a, 0x00, 0x00, 0x00, 0x80, 0x2e})},
      {2147483648LL, bytes({0x80, 0x02, 0x8a, 0x05, 0x00, 0x00, 0x00, 0x80, 0x00, 0x2e})},
      {-2147483649LL, bytes({0x80, 0x02, 0x8a, 0x05, 0xff, 0xff, 0xff, 0x7f, 0xff, 0x2e})},
      {std::numeric_limits<int64_t>::max(),
       bytes({0x80, 0x02, 0x8a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x2e})},
      {std::numeric_limits<int64_t>::min(),
       bytes({0x80, 0x02, 0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x2e})},
      {1099511627776LL, bytes({0x80, 0x02, 0x8a, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2e})}};
  for (const auto& [v, want] : cases) {
    EXPECT_EQ(pickle_dumps(*py_int(v)), want) << v;
    EXPECT_EQ(pickle_loads(want, "t", kAny)->i, v);
  }
}

TEST(Pickle, ContainersAndMemoAsPythonWritesThem) {
  // pickle.dumps(('a', [1, None, True], {'k': (2, 3, 4, 5)}, [], {}, ()), protocol=2)
  const std::string want =
      bytes({0x80, 0x02, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61, 0x71, 0x00, 0x5d, 0x71, 0x01,
             0x28, 0x4b, 0x01, 0x4e, 0x88, 0x65, 0x7d, 0x71, 0x02, 0x58, 0x01, 0x00, 0x00, 0x00,
             0x6b, 0x71, 0x03, 0x28, 0x4b, 0x02, 0x4b, 0x03, 0x4b, 0x04, 0x4b, 0x05, 0x74, 0x71,
             0x04, 0x73, 0x5d, 0x71, 0x05, 0x7d, 0x71, 0x06, 0x29, 0x74, 0x71, 0x07, 0x2e});
  const PyPtr v =
      py_tuple({py_str("a"), py_list({py_int(1), py_none(), py_bool(true)}),
                py_dict({py_str("k"), py_tuple({py_int(2), py_int(3), py_int(4), py_int(5)})}),
                py_list({}), py_dict({}), py_tuple({})});
  EXPECT_EQ(pickle_dumps(*v), want);
  EXPECT_TRUE(py_equal(*pickle_loads(want, "t", kAny), *v));
  // pickle.dumps([[7], {'x': 1}], protocol=2): one-item list and dict use APPEND / SETITEM
  const std::string want2 =
      bytes({0x80, 0x02, 0x5d, 0x71, 0x00, 0x28, 0x5d, 0x71, 0x01, 0x4b, 0x07, 0x61, 0x7d, 0x71,
             0x02, 0x58, 0x01, 0x00, 0x00, 0x00, 0x78, 0x71, 0x03, 0x4b, 0x01, 0x73, 0x65, 0x2e});
  const PyPtr v2 = py_list({py_list({py_int(7)}), py_dict({py_str("x"), py_int(1)})});
  EXPECT_EQ(pickle_dumps(*v2), want2);
  EXPECT_TRUE(py_equal(*pickle_loads(want2, "t", kAny), *v2));
}

TEST(Pickle, RefusesOtherOpcodesAndClassesInOneLine) {
  // protocol 0's INT opcode 'I'
  EXPECT_EQ(error_of(bytes({0x80, 0x02, 'I', '1', '\n', '.'})),
            "f.pkl: pickle opcode 0x49 ('I') at byte 2: this opcode is not supported; give a "
            "checkpoint torch.distributed.checkpoint wrote (a .metadata file and its .distcp "
            "files), undamaged");
  const auto none = [](const std::string&, const std::string&) { return false; };
  const std::string os_system =
      "\x80\x02"
      "cos\nsystem\n"
      "q\x00.";
  EXPECT_NE(
      error_of(os_system, none).find("f.pkl: pickle global 'os.system' at byte 2 is not a class"),
      std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 0x02, 'h', 0x03, '.'})).find("memo index 3 (never stored)"),
            std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 0x02, 'N', 'N', '.'})).find("STOP with a stack of 2"),
            std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 0x02, 't', '.'})).find("without its MARK"), std::string::npos);
  EXPECT_NE(error_of(bytes({0x80, 0x02, 'N', 'a', '.'})).find("too few values"), std::string::npos);
}

// A tree of every kind the codec knows, at most `depth` containers deep (drawn inside a property).
PyPtr draw_tree(int depth) {
  const int kind = *rc::gen::inRange(0, depth == 0 ? 5 : 11);
  auto children = [&] {
    std::vector<PyPtr> v(*rc::gen::inRange<size_t>(0, 6));
    for (auto& x : v) x = draw_tree(depth - 1);
    return v;
  };
  switch (kind) {
    case 0: return py_none();
    case 1: return py_bool(*rc::gen::arbitrary<bool>());
    case 2: return py_int(*rc::gen::arbitrary<int64_t>());
    case 3: return py_str(*rc::gen::arbitrary<std::string>());
    case 4:
      return py_global(*rc::gen::elementOf(std::vector<std::string>{"torch", "collections", "m.n"}),
                       "Name");
    case 5: return py_tuple(children());
    case 6: return py_list(children());
    case 7: {
      std::vector<PyPtr> kv;
      for (auto& x : children()) {
        kv.push_back(py_str("k" + std::to_string(kv.size())));
        kv.push_back(x);
      }
      return py_dict(std::move(kv));
    }
    case 8: return py_reduce(py_global("m", "f"), children());
    case 9: return py_newobj(py_global("m", "C"), draw_tree(depth - 1));
    default: return py_persid(draw_tree(depth - 1));
  }
}

RC_GTEST_PROP(PickleProp, AnyTreeRoundTrips, ()) {
  const PyPtr v = draw_tree(3);
  const std::string b = pickle_dumps(*v);
  const PyPtr back = pickle_loads(b, "t", kAny);
  RC_ASSERT(py_equal(*back, *v));
  RC_ASSERT(pickle_dumps(*back) == b);
}

RC_GTEST_PROP(PickleProp, TruncatedOrDamagedIsAnInputErrorNeverACrash, ()) {
  const std::string b = pickle_dumps(*draw_tree(2));
  const size_t cut = *rc::gen::inRange<size_t>(0, b.size());
  RC_ASSERT_THROWS_AS(pickle_loads(b.substr(0, cut), "t", kAny), InputError);
  std::string bad = b;
  const size_t at = *rc::gen::inRange<size_t>(0, b.size());
  bad[at] = static_cast<char>(*rc::gen::arbitrary<uint8_t>());
  try {
    pickle_loads(bad, "t", kAny);  // may still be a valid pickle
  } catch (const InputError&) {}
}

}  // namespace
}  // namespace fullshard

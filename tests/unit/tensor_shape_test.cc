// Shape keeps std::vector<int64_t>'s behaviour with its dims inline (NOTE [Inline shape]):
// every operation, applied to a Shape and to a vector, leaves the same dims, inline or on the
// heap, through copies and moves.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/tensor/shape.h"

namespace fullshard {
namespace {

using Vec = std::vector<int64_t>;

void expect_same(const Shape& s, const Vec& v) {
  RC_ASSERT(s.size() == v.size());
  RC_ASSERT(Vec(s.begin(), s.end()) == v);
  RC_ASSERT(s == Shape(v));
  RC_ASSERT(static_cast<Vec>(s) == v);
  RC_ASSERT(s.capacity() >= s.size());
}

RC_GTEST_PROP(TensorShape, EveryOperationMatchesAVector, ()) {
  const Vec start = *rc::gen::container<Vec>(rc::gen::inRange<int64_t>(-3, 1000));
  Shape s = start;
  Vec v = start;
  const int n = *rc::gen::inRange(0, 40);
  for (int i = 0; i < n; ++i) {
    const int64_t x = *rc::gen::inRange<int64_t>(0, 100);
    switch (*rc::gen::inRange(0, 12)) {
      case 0:
        s.push_back(x);
        v.push_back(x);
        break;
      case 1:
        if (!v.empty()) {
          s.pop_back();
          v.pop_back();
        }
        break;
      case 2: {
        const size_t at = *rc::gen::inRange<size_t>(0, v.size() + 1);
        s.insert(s.begin() + at, x);
        v.insert(v.begin() + static_cast<long>(at), x);
        break;
      }
      case 3: {  // a range of itself, which may move while inserting
        const size_t at = *rc::gen::inRange<size_t>(0, v.size() + 1);
        const Shape copy = s;
        s.insert(s.begin() + at, copy.begin(), copy.end());
        v.insert(v.begin() + static_cast<long>(at), copy.begin(), copy.end());
        break;
      }
      case 4:
        if (!v.empty()) {
          const size_t a = *rc::gen::inRange<size_t>(0, v.size());
          const size_t b = *rc::gen::inRange<size_t>(a, v.size() + 1);
          s.erase(s.begin() + a, s.begin() + b);
          v.erase(v.begin() + static_cast<long>(a), v.begin() + static_cast<long>(b));
        }
        break;
      case 5: {
        const size_t m = *rc::gen::inRange<size_t>(0, 12);
        s.resize(m, x);
        v.resize(m, x);
        break;
      }
      case 6: {  // copy, then move through a temporary
        Shape c = s;
        Shape moved = std::move(c);
        RC_ASSERT(c.empty());
        s = moved;
        break;
      }
      case 7: {
        Shape other{x, x + 1};
        swap(s, other);
        swap(s, other);
        RC_ASSERT((other == Shape{x, x + 1}));
        break;
      }
      case 8:
        s.assign(3, x);
        v.assign(3, x);
        break;
      case 9:
        if (!v.empty()) {
          const size_t at = *rc::gen::inRange<size_t>(0, v.size());
          s[at] = x;
          v[at] = x;
          RC_ASSERT(s.at(at) == x);
        }
        break;
      case 10: {
        Shape t;
        t = std::move(s);
        s = std::move(t);
        break;
      }
      default:
        s.clear();
        v.clear();
        break;
    }
    expect_same(s, v);
  }
  // numel is a plain product (shapes of real tensors never overflow it); random dims can, so the
  // comparison runs only where the vector's product fits in int64.
  int64_t product = 1;
  bool fits = true;
  for (int64_t d : v) fits = fits && !__builtin_mul_overflow(product, d, &product);
  if (fits) RC_ASSERT(numel(s) == product);
}

RC_GTEST_PROP(TensorShape, OrdersAsAVector, ()) {
  const Vec a = *rc::gen::container<Vec>(rc::gen::inRange<int64_t>(0, 3));
  const Vec b = *rc::gen::container<Vec>(rc::gen::inRange<int64_t>(0, 3));
  RC_ASSERT((Shape(a) < Shape(b)) == (a < b));
  RC_ASSERT((Shape(a) == Shape(b)) == (a == b));
  RC_ASSERT((Shape(a) == b) == (a == b));
}

TEST(TensorShape, ConstructsAsAVector) {
  EXPECT_EQ(Shape(3, 7), (Shape{7, 7, 7}));
  EXPECT_EQ(Shape(size_t{2}), (Shape{0, 0}));
  EXPECT_TRUE(Shape().empty());
  EXPECT_EQ(Shape{5}.size(), 1u);
  const Vec big{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(Shape(big.begin(), big.end()), big);
  EXPECT_THROW(Shape{1}.at(1), std::out_of_range);
  std::map<Shape, int> by_shape{{Shape{2, 3}, 1}, {Shape{2}, 2}};
  EXPECT_EQ(by_shape.begin()->second, 2);
}

TEST(TensorShape, ReadsAndWritesJsonAsAnArray) {
  nlohmann::json j;
  j["shape"] = Shape{4096, 128};
  EXPECT_EQ(j.dump(), R"({"shape":[4096,128]})");
  EXPECT_EQ(j["shape"].get<Shape>(), (Shape{4096, 128}));
}

}  // namespace
}  // namespace fullshard

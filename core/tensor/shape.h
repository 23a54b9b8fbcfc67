#pragma once
#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor/dtype.h"

namespace fullshard {

// NOTE [Inline shape]: a tensor's dims with std::vector<int64_t>'s interface (and implicit
// conversions to and from it), up to kInline dims stored in the object itself, so copying a
// TensorRef or TensorMeta -- as the simulator does for every op it records -- allocates nothing;
// more dims move to the heap. Iterators are pointers, invalidated as a vector's are and also by
// moving an inline shape. nlohmann::json reads and writes it as an array (to_json/from_json
// below, found by ADL). The CUDA sources are C++17: no <=>, so shape_compare17.h there.
class Shape {
 public:
  static constexpr size_t kInline = 5;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  explicit Shape(size_t n) { assign(n, 0); }
  Shape(size_t n, int64_t v) { assign(n, v); }
  Shape(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(o); }
  ~Shape() { release(); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> l) {
    assign(l.begin(), l.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT: implicit

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  size_t max_size() const { return UINT32_MAX; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& at(size_t i) { return i < size_ ? data()[i] : out_of_range(); }
  const int64_t& at(size_t i) const { return i < size_ ? data()[i] : out_of_range(); }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  const_reverse_iterator crbegin() const { return rbegin(); }
  const_reverse_iterator crend() const { return rend(); }

  void reserve(size_t n) {
    if (n <= cap_) return;
    int64_t* p = new int64_t[n];
    std::copy_n(data_, size_, p);
    if (data_ != inline_) delete[] data_;
    data_ = p;
    cap_ = static_cast<uint32_t>(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n) { resize(n, 0); }
  void resize(size_t n, int64_t v) {
    if (n > cap_) reserve(std::max(n, 2 * static_cast<size_t>(cap_)));
    for (size_t i = size_; i < n; ++i) data()[i] = v;
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == cap_) reserve(2 * static_cast<size_t>(cap_));
    data()[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { --size_; }
  void assign(size_t n, int64_t v) {
    size_ = 0;
    resize(n, v);
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    if (n > cap_) reserve(n);
    std::copy(first, last, data());
    size_ = static_cast<uint32_t>(n);
  }
  void assign(std::initializer_list<int64_t> l) { assign(l.begin(), l.end()); }

  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t{1}, v); }
  iterator insert(const_iterator pos, size_t n, int64_t v) {
    const size_t at = make_room(pos, n);
    std::fill_n(data() + at, n, v);
    return data() + at;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    const Shape copy(first, last);  // the range may lie inside *this
    const size_t at = make_room(pos, copy.size());
    std::copy(copy.begin(), copy.end(), data() + at);
    return data() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> l) {
    return insert(pos, l.begin(), l.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - begin());
    const size_t n = static_cast<size_t>(last - first);
    std::copy(begin() + at + n, end(), begin() + at);
    size_ -= static_cast<uint32_t>(n);
    return begin() + at;
  }
  void swap(Shape& o) noexcept {
    Shape t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }
#if __cplusplus >= 202002L
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }
#endif
 private:
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    cap_ = kInline;
    size_ = 0;
  }
  // *this is released (inline and empty): takes o's dims and leaves o empty.
  void take(Shape& o) noexcept {
    size_ = o.size_;
    if (o.data_ != o.inline_) {
      data_ = o.data_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = kInline;
    } else {
      std::copy_n(o.inline_, std::min<size_t>(o.size_, kInline), inline_);
    }
    o.size_ = 0;
  }
  // Opens n slots at pos; returns pos's index.
  size_t make_room(const_iterator pos, size_t n) {
    const size_t at = static_cast<size_t>(pos - begin());
    if (size_ + n > cap_) reserve(std::max(size_ + n, 2 * static_cast<size_t>(cap_)));
    std::copy_backward(begin() + at, end(), end() + n);
    size_ += static_cast<uint32_t>(n);
    return at;
  }
  [[noreturn]] static int64_t& out_of_range() { throw std::out_of_range("Shape::at"); }

  int64_t* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t cap_ = kInline;
  int64_t inline_[kInline];
};

inline void swap(Shape& a, Shape& b) noexcept { a.swap(b); }
#if __cplusplus < 202002L
#include "core/tensor/shape_compare17.h"
#endif
template <typename Json>
void to_json(Json& j, const Shape& s) {
  j = std::vector<int64_t>(s.begin(), s.end());
}
template <typename Json>
void from_json(const Json& j, Shape& s) {
  s = j.template get<std::vector<int64_t>>();
}

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
std::string shape_str(const Shape& s);  // "[4096, 4096]"

// Metadata of a tensor: dtype and shape, contiguous. Bytes are numel * element size.
struct TensorMeta {
  DType dtype = DType::kFloat32;
  Shape shape;
  int64_t numel() const { return fullshard::numel(shape); }
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

}  // namespace fullshard

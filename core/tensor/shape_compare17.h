// Shape's comparisons for C++17 sources (nvcc's), which have neither operator<=> nor rewritten
// comparisons: the same orders as std::vector<int64_t>'s. Included by shape.h only, inside
// namespace fullshard, after the class.

inline bool operator==(const Shape& a, const Shape& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
inline bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
inline bool operator<(const Shape& a, const Shape& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
}
inline bool operator>(const Shape& a, const Shape& b) { return b < a; }
inline bool operator<=(const Shape& a, const Shape& b) { return !(b < a); }
inline bool operator>=(const Shape& a, const Shape& b) { return !(a < b); }

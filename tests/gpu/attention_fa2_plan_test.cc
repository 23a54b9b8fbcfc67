// The FlashAttention-2 kernels' host-side plan (backends/cuda/kernels/attention_fa2_plan.h),
// without a GPU: tile sizes, grids, tile orders, causal ranges and masks, shared memory, the GQA
// map, and the ldmatrix / mma.sync fragment maps the kernels address shared memory with,
// emulated as PTX documents the instructions (NOTE [mma.sync fragments]).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/attention_fa2_plan.h"
#include "backends/cuda/kernels/plan.h"

namespace fullshard {
namespace {

namespace fa2 = cuda::fa2;
namespace plan = cuda::plan;

// NOTE [FlashAttention-2 tiles] (backends/cuda/kernels/attention_fa2_plan.h): the launch plan the
// kernels read, at the shapes that matter (the 1B and 8B Llama benchmarks) and at odd lengths:
// grids cover every query / key row with heads split across blocks, the forward visits exactly the
// causal key tiles of each query tile, longest first, masking only tiles that cross the diagonal;
// the backward's key tiles start at the first query tile that sees them; shared memory fits sm_80's
// and sm_90's opt-in limits at every head dim (99 KB: sm_86 / sm_89 too); GQA maps query heads to
// kv heads in groups.
TEST(FlashAttention2Plan, LaunchPlan) {
  for (int64_t hd : {32, 64, 80, 96, 128}) {
    ASSERT_TRUE(fa2::supports_head_dim(hd));
    EXPECT_LE(fa2::fwd_smem_bytes(hd), 99u * 1024) << hd;
    EXPECT_EQ(fa2::fwd_query_tile(hd) % (16 * fa2::kWarps), 0) << hd;  // whole m16 tiles per warp
    EXPECT_EQ(fa2::fwd_query_tile(hd) % fa2::kKeyTile, 0) << hd;       // diagonal tiles align
    EXPECT_EQ(fa2::bwd_key_tile(hd) % fa2::bwd_query_tile(hd), 0)
        << hd;  // first query tile aligned
    EXPECT_EQ(fa2::bwd_key_tile(hd), 16 * fa2::bwd_warps(hd)) << hd;
    EXPECT_LE(fa2::bwd_threads(hd), 1024) << hd;
    EXPECT_LE(fa2::bwd_smem_bytes(hd), 99u * 1024) << hd;  // sm_86 / sm_89 run them too
    EXPECT_EQ(hd % fa2::bwd_dq_chunk(hd), 0) << hd;
    EXPECT_EQ(fa2::row_stride(hd) * 2 % 16, 0) << hd;  // cp.async / ldmatrix rows 16-byte aligned
  }
  for (int64_t hd : {0, 8, 16, 40, 48, 256}) EXPECT_FALSE(fa2::supports_head_dim(hd)) << hd;
  EXPECT_EQ(fa2::fwd_query_tile(64), 128);
  EXPECT_EQ(fa2::fwd_query_tile(128), 64);
  struct Shape {
    int64_t B, S, H, Hkv, hd;
  };
  for (Shape sh : {Shape{2, 4096, 32, 8, 64}, Shape{1, 8192, 32, 8, 128}, Shape{2, 1, 2, 2, 64},
                   Shape{2, 63, 8, 2, 128}, Shape{2, 65, 8, 1, 64}, Shape{3, 200, 4, 4, 96},
                   Shape{1, 333, 8, 8, 80}, Shape{1, 129, 2, 1, 32}}) {
    cuda::AttnLayout l{};
    l.B = sh.B;
    l.S = sh.S;
    l.H = sh.H;
    l.Hkv = sh.Hkv;
    l.hd = sh.hd;
    l.group = sh.H / sh.Hkv;
    const std::string what = "S" + std::to_string(sh.S) + " hd" + std::to_string(sh.hd);
    const int64_t BM = fa2::fwd_query_tile(sh.hd), BN = fa2::kKeyTile,
                  BK = fa2::bwd_key_tile(sh.hd);
    const fa2::Grid3 f = fa2::fwd_grid(l), b = fa2::bwd_grid(l);
    EXPECT_EQ(f.y, sh.H) << what;
    EXPECT_EQ(f.z, sh.B) << what;
    EXPECT_GE(f.x * BM, sh.S) << what;
    EXPECT_LT((f.x - 1) * BM, sh.S) << what;
    EXPECT_EQ(b.y, sh.H) << what;
    EXPECT_EQ(b.z, sh.B) << what;
    EXPECT_GE(b.x * BK, sh.S) << what;
    EXPECT_LT((b.x - 1) * BK, sh.S) << what;
    // Forward: blocks in launch order take query tiles from the last (longest) down, each once.
    std::vector<int> seen(static_cast<size_t>(f.x), 0);
    int64_t prev_keys = INT64_MAX;
    for (int64_t x = 0; x < f.x; ++x) {
      const int64_t qt = fa2::fwd_query_tile_of_block(x, f.x);
      ASSERT_GE(qt, 0) << what;
      ASSERT_LT(qt, f.x) << what;
      ++seen[static_cast<size_t>(qt)];
      const int64_t n = fa2::fwd_key_tiles(qt, sh.S, sh.hd);
      EXPECT_LE(n, prev_keys) << what << ": longest first";
      prev_keys = n;
      // Tile kt is needed iff some key in it is <= the tile's last valid row. A tile the kernel
      // does not mask holds no (row, key) pair with key > row, rows and keys counted to the
      // tile's end (padding included); brute force on the short sequences.
      const int64_t last_row = std::min(sh.S, (qt + 1) * BM) - 1;
      for (int64_t kt = 0; kt * BN < sh.S; ++kt) {
        EXPECT_EQ(kt < n, kt * BN <= last_row) << what << " qt " << qt << " kt " << kt;
        if (kt >= n || sh.S > 512 || fa2::fwd_tile_masked(qt, kt, sh.hd)) continue;
        for (int64_t i = qt * BM; i < (qt + 1) * BM; ++i)
          for (int64_t j = kt * BN; j < (kt + 1) * BN; ++j)
            ASSERT_LE(j, i) << what << " qt " << qt << " kt " << kt;
      }
    }
    for (int c : seen) EXPECT_EQ(c, 1) << what;
    // Backward: key tile kt starts at the first query tile holding a query >= its first key,
    // and skipping the tiles before misses no (query >= key) pair.
    const int64_t BQ = fa2::bwd_query_tile(sh.hd);
    for (int64_t kt = 0; kt < b.x; ++kt) {
      const int64_t m = fa2::bwd_first_query_tile(kt, sh.hd);
      EXPECT_LE(m * BQ, kt * BK) << what;
      EXPECT_GE((m + 1) * BQ - 1, kt * BK) << what;
    }
    // GQA: heads h and h' share a kv head iff they are in the same group of H / Hkv.
    for (int64_t h = 0; h < sh.H; ++h) {
      EXPECT_EQ(fa2::kv_head(h, l.group), h * sh.Hkv / sh.H) << what;
      EXPECT_LT(fa2::kv_head(h, l.group), sh.Hkv) << what;
    }
  }
}

// Which head dims and dtypes take the FlashAttention-2 kernels.
TEST(FlashAttention2Plan, WhereItApplies) {
  plan::AttnPlan p;
  for (int64_t hd : {32, 64, 80, 96, 128}) {
    p.l.hd = hd;
    EXPECT_TRUE(plan::attention_uses_fa2(p, DType::kBFloat16)) << hd;
    EXPECT_TRUE(plan::attention_uses_fa2(p, DType::kFloat16)) << hd;
    EXPECT_FALSE(plan::attention_uses_fa2(p, DType::kFloat32)) << hd;
  }
  for (int64_t hd : {8, 40, 256}) {
    p.l.hd = hd;
    EXPECT_FALSE(plan::attention_uses_fa2(p, DType::kBFloat16)) << hd;
  }
}

// ---- fragment emulation
// A row-major tile of small integers (exact in double).
struct Tile {
  int rows, cols;
  std::vector<double> v;
  Tile(int r, int c, std::mt19937& rng) : rows(r), cols(c), v(static_cast<size_t>(r) * c) {
    std::uniform_int_distribution<int> d(-3, 3);
    for (double& x : v) x = d(rng);
  }
  double at(int r, int c) const {
    EXPECT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols) << r << ", " << c;
    return r >= 0 && r < rows && c >= 0 && c < cols ? v[static_cast<size_t>(r) * cols + c] : 0.0;
  }
};
using Regs = std::array<std::array<std::array<double, 2>, 4>, 32>;  // [lane][register][half]
using LaneMap = std::function<int(int)>;

// ldmatrix.x4 over a tile: lane L gives the address of row L % 8 of matrix L / 8 at (r0 +
// row(L), c0 + col(L)); lane (g, t) = (L / 4, L % 4) receives elements (g, 2t..2t+1) of each
// matrix, or with .trans (2t..2t+1, g).
Regs ldmatrix(const Tile& tile, int r0, int c0, const LaneMap& row, const LaneMap& col,
              bool trans) {
  Regs out{};
  for (int L = 0; L < 32; ++L)
    for (int m = 0; m < 4; ++m)
      for (int h = 0; h < 2; ++h) {
        const int g = L / 4, t = L % 4;
        const int src = trans ? m * 8 + 2 * t + h : m * 8 + g, c = trans ? g : 2 * t + h;
        out[L][m][h] = tile.at(r0 + row(src), c0 + col(src) + c);
      }
  return out;
}

using Acc = std::array<std::array<double, 4>, 32>;  // [lane][c0..c3]
// mma.m16n8k16: A from a[lane][0..3], B from b[lane][j0], b[lane][j1], by PTX's fragment layout.
void mma(Acc& c, const Regs& a, const Regs& b, int j0, int j1) {
  double A[16][16] = {}, B[16][8] = {};
  for (int L = 0; L < 32; ++L)
    for (int h = 0; h < 2; ++h) {
      const int g = L / 4, t = L % 4;
      A[g][2 * t + h] = a[L][0][h];
      A[g + 8][2 * t + h] = a[L][1][h];
      A[g][8 + 2 * t + h] = a[L][2][h];
      A[g + 8][8 + 2 * t + h] = a[L][3][h];
      B[2 * t + h][g] = b[L][j0][h];
      B[8 + 2 * t + h][g] = b[L][j1][h];
    }
  for (int L = 0; L < 32; ++L)
    for (int e = 0; e < 4; ++e) {
      const int row = L / 4 + (e >> 1) * 8, col = 2 * (L % 4) + (e & 1);
      for (int k = 0; k < 16; ++k) c[L][e] += A[row][k] * B[k][col];
    }
}
// Element (row, column) of accumulator tile n held by lane L, entry e.
int acc_row(int L, int e) { return L / 4 + (e >> 1) * 8; }
int acc_col(int n, int L, int e) { return n * 8 + 2 * (L % 4) + (e & 1); }
// Two accumulator tiles (columns 16 kk ..) as the A fragment of k block kk (acc_to_a).
Regs acc_to_a(const Acc& c0, const Acc& c1) {
  Regs a{};
  for (int L = 0; L < 32; ++L) {
    a[L][0] = {c0[L][0], c0[L][1]};
    a[L][1] = {c0[L][2], c0[L][3]};
    a[L][2] = {c1[L][0], c1[L][1]};
    a[L][3] = {c1[L][2], c1[L][3]};
  }
  return a;
}

namespace f = cuda::fa2;

// The forward's S = Q K^T (Q rows by a_*, K rows by b_*), then O = P V (P from S's accumulators,
// V by bt_* with .trans), and the backward's dQ = dS K (dS^T stored [key][query], read by at_*
// with .trans): each equals the plain product, for every head dim the kernels are built for.
TEST(FlashAttention2Plan, FragmentMapsComputeTheProducts) {
  std::mt19937 rng(28);
  for (int hd : {32, 64, 80, 96, 128}) {
    const std::string what = "hd " + std::to_string(hd);
    const int ld = f::row_stride(hd);  // padded rows, as in shared memory
    Tile Q(16, ld, rng), K(f::kKeyTile, ld, rng), V(f::kKeyTile, ld, rng);
    std::vector<Acc> s(f::kKeyTile / 8, Acc{});
    for (int kd = 0; kd < hd / 16; ++kd) {
      const Regs qa = ldmatrix(Q, 0, kd * 16, f::a_row, f::a_col, false);
      for (int np = 0; np < f::kKeyTile / 16; ++np) {
        const Regs kb = ldmatrix(K, np * 16, kd * 16, f::b_row, f::b_col, false);
        mma(s[2 * np], qa, kb, 0, 1);
        mma(s[2 * np + 1], qa, kb, 2, 3);
      }
    }
    for (int n = 0; n < f::kKeyTile / 8; ++n)
      for (int L = 0; L < 32; ++L)
        for (int e = 0; e < 4; ++e) {
          double want = 0;
          for (int d = 0; d < hd; ++d) want += Q.at(acc_row(L, e), d) * K.at(acc_col(n, L, e), d);
          ASSERT_EQ(s[n][L][e], want) << what << " S";
        }
    std::vector<Acc> o(hd / 8, Acc{});
    for (int kk = 0; kk < f::kKeyTile / 16; ++kk) {
      const Regs pa = acc_to_a(s[2 * kk], s[2 * kk + 1]);
      for (int np = 0; np < hd / 16; ++np) {
        const Regs vb = ldmatrix(V, kk * 16, np * 16, f::bt_row, f::bt_col, true);
        mma(o[2 * np], pa, vb, 0, 1);
        mma(o[2 * np + 1], pa, vb, 2, 3);
      }
    }
    for (int n = 0; n < hd / 8; ++n)
      for (int L = 0; L < 32; ++L)
        for (int e = 0; e < 4; ++e) {
          double want = 0;
          for (int j = 0; j < f::kKeyTile; ++j) {
            double sij = 0;
            for (int d = 0; d < hd; ++d) sij += Q.at(acc_row(L, e), d) * K.at(j, d);
            want += sij * V.at(j, acc_col(n, L, e));
          }
          ASSERT_EQ(o[n][L][e], want) << what << " O";
        }
    // dQ: dS^T is [keys][queries + 8] (the backward's St), one 16-row block rb, one column chunk.
    const int bm = f::bwd_query_tile(hd), qc = f::bwd_dq_chunk(hd);
    Tile St(f::kKeyTile, bm + 8, rng);
    for (int rb = 0; rb < bm / 16; ++rb)
      for (int ch = 0; ch < hd / qc; ++ch) {
        std::vector<Acc> dq(qc / 8, Acc{});
        for (int kk = 0; kk < f::kKeyTile / 16; ++kk) {
          const Regs a = ldmatrix(St, kk * 16, rb * 16, f::at_row, f::at_col, true);
          for (int np = 0; np < qc / 16; ++np) {
            const Regs kb = ldmatrix(K, kk * 16, ch * qc + np * 16, f::bt_row, f::bt_col, true);
            mma(dq[2 * np], a, kb, 0, 1);
            mma(dq[2 * np + 1], a, kb, 2, 3);
          }
        }
        for (int n = 0; n < qc / 8; ++n)
          for (int L = 0; L < 32; ++L)
            for (int e = 0; e < 4; ++e) {
              double want = 0;
              for (int j = 0; j < f::kKeyTile; ++j)
                want += St.at(j, rb * 16 + acc_row(L, e)) * K.at(j, ch * qc + acc_col(n, L, e));
              ASSERT_EQ(dq[n][L][e], want) << what << " dQ rb " << rb << " chunk " << ch;
            }
      }
  }
}

// The 8 row addresses of every ldmatrix phase fall in 8 distinct 16-byte bank groups (no bank
// conflicts) with the padded row strides, for each lane map and head dim.
TEST(FlashAttention2Plan, LdmatrixRowsAvoidBankConflicts) {
  for (int hd : {32, 64, 80, 96, 128})
    for (int stride : {f::row_stride(hd) * 2, (f::bwd_query_tile(hd) + 8) * 2})
      for (const LaneMap& row :
           {LaneMap(f::a_row), LaneMap(f::b_row), LaneMap(f::bt_row), LaneMap(f::at_row)})
        for (int m = 0; m < 4; ++m) {
          std::vector<int> groups;
          for (int r = 0; r < 8; ++r) groups.push_back((row(m * 8 + r) * stride / 16) % 8);
          std::sort(groups.begin(), groups.end());
          EXPECT_TRUE(std::adjacent_find(groups.begin(), groups.end()) == groups.end())
              << "hd " << hd << " stride " << stride;
        }
}

}  // namespace
}  // namespace fullshard

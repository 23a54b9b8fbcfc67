// Races and memory-safety checks of one rank's program (check_streams in checks.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/common/error.h"
#include "simulator/engine/checks.h"

namespace fullshard::sim {

// NOTE [Happens-before over streams]: each rank keeps a vector clock per stream and one for
// the host, with one component per stream (the host issues no accesses, so it needs none).
//  - an op (kernel / collective) on stream s first joins the host clock (work launched after
//    the host saw a completion is ordered after it), then ticks C[s][s]; its epoch is C[s][s].
//  - kRecordEvent on s snapshots C[s] (joined with the host) into the event;
//  - kWaitEvent on s joins the event's snapshot into C[s]; an event never recorded is a no-op,
//    as in CUDA;
//  - kSynchronize joins the event into the host clock (event 0: every stream, i.e. a device
//    synchronize).
// An access at epoch t on stream w happens before the current op on s iff C[s][w] >= t.
// Per buffer we keep the last write and the latest read per stream since that write
// (FastTrack): a write ordered after the reads transitively orders every earlier access.
//
// NOTE [Frees and the pool stream]: the caching allocator hands a freed block to the next
// allocation from the same pool (the kAlloc's stream). The memory of a new device buffer may
// therefore still be in use by (a) the pool stream's work issued before the allocation and
// (b) any access, on any stream, to a buffer freed to the same pool earlier. Its first use on
// each stream s must be ordered after both: C[s] must cover, per other stream w, the pool
// stream's epoch at allocation (w = pool) and the latest access on w to memory freed to the
// pool (we do not know which block is reused, so every freed buffer of the pool counts).
// That is exact for what the hardware can do, and it is what FSDP2 relies on: e.g. the
// reduce-scatter output is freed after the optimizer read it on the compute stream, and the
// next reduce-scatter stream work waits for the compute stream before using new memory.
// FreeRule::kAtFree (default) is stricter and reports at the free itself: join(C[pool], host)
// must cover every access from other streams when the host frees the buffer.
// Host buffers are exempt: they are not pooled.

namespace {

using Clock = std::array<uint32_t, kNumStreams>;
constexpr uint32_t kNoInstr = UINT32_MAX;

inline void join(Clock& into, const Clock& other) {
  for (int k = 0; k < kNumStreams; ++k) into[k] = std::max(into[k], other[k]);
}

struct Epoch {
  uint32_t clock = 0;  // 0: none
  uint32_t instr = kNoInstr;
};

// The latest access on one stream to memory freed to a pool: a later allocation from the
// pool is not safe to use on another stream before that stream is ordered after it.
struct Owed {
  uint32_t clock = 0;               // 0: none
  uint32_t instr = kNoInstr;        // the access
  uint32_t freed_alloc = kNoInstr;  // the freed buffer's kAlloc (for its name)
  uint64_t freed_id = 0;
};
using OwedSet = std::array<Owed, kNumStreams>;

struct BufferState {
  uint32_t alloc_instr = kNoInstr;   // kNoInstr: the program never allocated it
  uint32_t free_instr = kNoInstr;    // set once the host freed it
  uint32_t pool_epoch = 0;           // the pool stream's clock at allocation
  uint32_t pool_last_op = kNoInstr;  // the pool stream's last op before the allocation
  uint32_t owed = kNoInstr;          // index of the pool's OwedSet at allocation, if any
  uint8_t pool = 0;
  bool on_host = false;
  bool after_free_reported = false;
  uint8_t write_stream = 0;
  uint16_t first_use_checked = 0;  // bit per stream
  static_assert(kNumStreams <= 16, "first_use_checked holds a bit per stream");
  bool free_reported = false;
  Epoch write;
  std::array<Epoch, kNumStreams> reads{};
};

std::string_view sname(int s) { return stream_name(static_cast<StreamRole>(s)); }

class StreamChecker {
 public:
  StreamChecker(const Program& program, const CheckOptions& options)
      : program_(program), options_(options) {
    for (Clock& c : clocks_) c.fill(0);
    host_.fill(0);
    last_op_.fill(kNoInstr);
    pool_snapshot_.fill(kNoInstr);
    buffers_.reserve(program.instrs.size() / 4 + 16);
  }

  std::vector<Problem> run() {
    const auto& instrs = program_.instrs;
    for (uint32_t i = 0; i < instrs.size(); ++i) {
      const Instr& in = instrs[i];
      const int s = static_cast<int>(in.stream);
      FULLSHARD_CHECK(s < kNumStreams,
                      "instruction " + std::to_string(i) + " names stream " + std::to_string(s));
      switch (in.type) {
        case InstrType::kKernel:
        case InstrType::kCollective: on_op(i, in, s); break;
        case InstrType::kRecordEvent:
          join(clocks_[s], host_);
          events_[in.event] = clocks_[s];
          break;
        case InstrType::kWaitEvent: {
          join(clocks_[s], host_);
          auto it = events_.find(in.event);
          if (it != events_.end()) join(clocks_[s], it->second);
          break;
        }
        case InstrType::kSynchronize:
          if (in.event == 0) {
            for (const Clock& c : clocks_) join(host_, c);
          } else if (auto it = events_.find(in.event); it != events_.end()) {
            join(host_, it->second);
          }
          break;
        case InstrType::kAlloc: on_alloc(i, in); break;
        case InstrType::kFree: on_free(i, in); break;
        case InstrType::kMarker:
        case InstrType::kHostWork:             // host-only Python work: touches no buffer
        case InstrType::kStorageWrite: break;  // host-side I/O: reads host memory only
      }
    }
    return std::move(problems_);
  }

 private:
  std::string_view name_of(uint32_t instr) const {
    return instr == kNoInstr ? std::string_view("?") : instr_name(program_, program_.instrs[instr]);
  }

  // "'name' (id 12)", or with the pool: "'name' (id 12, allocated on compute stream)".
  std::string label(uint64_t id, const BufferState& b, bool with_pool = false) const {
    if (b.alloc_instr == kNoInstr) return fmt::format("(id {}, never allocated)", id);
    return fmt::format("'{}' (id {}{}{}{})", name_of(b.alloc_instr), id,
                       with_pool ? ", allocated on " : "", with_pool ? sname(b.pool) : "",
                       with_pool ? " stream" : "");
  }

  void report(ProblemKind kind, size_t& count, const Instr& at, std::string message) {
    if (count++ >= options_.max_problems) return;
    Problem p;
    p.kind = kind;
    p.step = at.step;
    p.ranks = {program_.rank};
    p.op = std::string(instr_name(program_, at));
    p.message = fmt::format("step {}: rank {}: {}", at.step, program_.rank, message);
    problems_.push_back(std::move(p));
  }

  void on_op(uint32_t i, const Instr& in, int s) {
    Clock& c = clocks_[s];
    join(c, host_);
    const uint32_t now = ++c[s];
    const std::string_view op = instr_name(program_, in);
    const auto* acc = program_.accesses.data() + in.access_begin;
    for (uint32_t k = 0; k < in.access_count; ++k) {
      const sim::Access& a = acc[k];
      BufferState& b = buffers_[a.buffer];
      const char* verb = a.write ? "writes" : "reads";
      if (options_.memory) check_memory(in, s, c, a, b, op, verb);
      if (options_.races) check_race(in, s, c, a, b, op, verb);
      if (a.write) {
        b.write = {now, i};
        b.write_stream = static_cast<uint8_t>(s);
        b.reads.fill(Epoch{});
      } else {
        b.reads[s] = {now, i};
      }
    }
    last_op_[s] = i;
  }

  void check_memory(const Instr& in, int s, const Clock& c, const sim::Access& a, BufferState& b,
                    std::string_view op, const char* verb) {
    if (b.free_instr != kNoInstr) {
      if (!b.after_free_reported) {
        b.after_free_reported = true;
        report(ProblemKind::kUseAfterFree, memory_count_, in,
               fmt::format("use after free: {} op '{}' {} buffer {} after the host freed it "
                           "(free at instruction #{}, step {})",
                           sname(s), op, verb, label(a.buffer, b), b.free_instr,
                           program_.instrs[b.free_instr].step));
      }
      return;
    }
    const uint16_t bit = static_cast<uint16_t>(1u << s);
    if (b.alloc_instr == kNoInstr || b.on_host || (b.first_use_checked & bit)) return;
    b.first_use_checked |= bit;
    if (b.owed != kNoInstr) check_owed(in, s, c, a, b, op);
    if (s == b.pool || c[b.pool] >= b.pool_epoch) return;
    report(ProblemKind::kUnorderedFirstUse, memory_count_, in,
           fmt::format("use after free: buffer {} is first used by {} op "
                       "'{}' on stream {}, not ordered after the {} work issued before the "
                       "allocation: the caching allocator may have handed it memory that {} op "
                       "'{}' still uses; make the {} stream wait on an event recorded on the {} "
                       "stream after the allocation",
                       label(a.buffer, b, true), sname(s), op, sname(s), sname(b.pool),
                       sname(b.pool), name_of(b.pool_last_op), sname(s), sname(b.pool)));
  }

  // The first use on s of a new buffer is ordered after accesses to memory freed to its pool.
  void check_owed(const Instr& in, int s, const Clock& c, const sim::Access& a,
                  const BufferState& b, std::string_view op) {
    const OwedSet& owed = owed_[b.owed];
    for (int w = 0; w < kNumStreams; ++w) {
      const Owed& o = owed[w];
      if (w == s || o.clock == 0 || c[w] >= o.clock) continue;
      report(ProblemKind::kFreeWhileInUse, memory_count_, in,
             fmt::format("use after free: buffer {} is first used by {} op '{}' while {} op '{}' "
                         "may still use buffer '{}' (id {}), which the host freed to the {} pool "
                         "before this allocation; make the {} stream wait on an event recorded "
                         "after '{}' before this use (or the {} stream before that free)",
                         label(a.buffer, b, true), sname(s), op, sname(w), name_of(o.instr),
                         name_of(o.freed_alloc), o.freed_id, sname(b.pool), sname(s),
                         name_of(o.instr), sname(b.pool)));
      return;
    }
  }

  void check_race(const Instr& in, int s, const Clock& c, const sim::Access& a,
                  const BufferState& b, std::string_view op, const char* verb) {
    if (b.write.clock != 0 && b.write_stream != s && c[b.write_stream] < b.write.clock) {
      race(in, s, a.buffer, b, op, verb, b.write_stream, b.write.instr, "write");
      return;
    }
    if (!a.write) return;
    for (int r = 0; r < kNumStreams; ++r) {
      if (r != s && b.reads[r].clock != 0 && c[r] < b.reads[r].clock) {
        race(in, s, a.buffer, b, op, verb, r, b.reads[r].instr, "read");
        return;
      }
    }
  }

  void race(const Instr& in, int s, uint64_t id, const BufferState& b, std::string_view op,
            const char* verb, int other, uint32_t other_instr, const char* other_verb) {
    report(ProblemKind::kStreamRace, race_count_, in,
           fmt::format("race on buffer {}: {} op '{}' {} it while {} op '{}' may still {} it; "
                       "no event orders them (missing wait_event?)",
                       label(id, b), sname(s), op, verb, sname(other), name_of(other_instr),
                       other_verb));
  }

  void on_alloc(uint32_t i, const Instr& in) {
    BufferState& b = buffers_[in.buffer];
    b = BufferState{};
    b.alloc_instr = i;
    b.on_host = in.on_host;
    b.pool = static_cast<uint8_t>(in.stream);
    b.pool_epoch = clocks_[b.pool][b.pool];
    b.pool_last_op = last_op_[b.pool];
    if (in.on_host || !pool_owes_[b.pool]) return;
    if (pool_snapshot_[b.pool] == kNoInstr) {  // the pool's debts changed since the last one
      pool_snapshot_[b.pool] = static_cast<uint32_t>(owed_.size());
      owed_.push_back(pool_owed_[b.pool]);
    }
    b.owed = pool_snapshot_[b.pool];
  }

  // Remembers the accesses from other streams to a buffer freed to pool p (NOTE above).
  void owe(uint64_t id, const BufferState& b) {
    const int p = b.pool;
    auto add = [&](int w, const Epoch& e) {
      Owed& o = pool_owed_[p][w];
      if (w == p || e.clock <= o.clock) return;
      o = {e.clock, e.instr, b.alloc_instr, id};
      pool_owes_[p] = true;
      pool_snapshot_[p] = kNoInstr;
    };
    if (b.write.clock != 0) add(b.write_stream, b.write);
    for (int r = 0; r < kNumStreams; ++r) {
      if (b.reads[r].clock != 0) add(r, b.reads[r]);
    }
  }

  void on_free(uint32_t i, const Instr& in) {
    BufferState& b = buffers_[in.buffer];
    if (b.free_instr != kNoInstr) {
      if (options_.memory) {
        report(ProblemKind::kUseAfterFree, memory_count_, in,
               fmt::format("use after free: buffer {} freed twice (first at instruction #{})",
                           label(in.buffer, b), b.free_instr));
      }
      return;
    }
    b.free_instr = i;
    if (!options_.memory || b.alloc_instr == kNoInstr || b.on_host) return;
    Clock f = clocks_[b.pool];
    join(f, host_);
    int other = -1;
    uint32_t other_instr = kNoInstr;
    if (b.write.clock != 0 && b.write_stream != b.pool && f[b.write_stream] < b.write.clock) {
      other = b.write_stream;
      other_instr = b.write.instr;
    }
    for (int r = 0; r < kNumStreams && other < 0; ++r) {
      if (r != b.pool && b.reads[r].clock != 0 && f[r] < b.reads[r].clock) {
        other = r;
        other_instr = b.reads[r].instr;
      }
    }
    if (other < 0 || options_.free_rule == FreeRule::kAtReuse) {
      owe(in.buffer, b);
      return;
    }
    report(ProblemKind::kFreeWhileInUse, memory_count_, in,
           fmt::format("use after free: buffer {} freed by the host "
                       "while {} op '{}' on stream {} may still use it; make the {} stream wait "
                       "on an event recorded after '{}' before freeing",
                       label(in.buffer, b, true), sname(other), name_of(other_instr), sname(other),
                       sname(b.pool), name_of(other_instr)));
  }

  const Program& program_;
  const CheckOptions& options_;
  std::array<Clock, kNumStreams> clocks_;
  Clock host_;
  std::array<uint32_t, kNumStreams> last_op_;
  std::unordered_map<uint64_t, Clock> events_;
  std::unordered_map<uint64_t, BufferState> buffers_;
  // Per pool: what memory freed to it may still be used by (NOTE [Frees and the pool stream]),
  // and the index in owed_ of its current state (kNoInstr: changed since the last snapshot).
  std::array<OwedSet, kNumStreams> pool_owed_{};
  std::array<bool, kNumStreams> pool_owes_{};
  std::array<uint32_t, kNumStreams> pool_snapshot_;
  std::vector<OwedSet> owed_;
  std::vector<Problem> problems_;
  size_t race_count_ = 0;
  size_t memory_count_ = 0;
};

}  // namespace

std::vector<Problem> check_streams(const Program& program, const CheckOptions& options) {
  if (!options.races && !options.memory) return {};
  return StreamChecker(program, options).run();
}

}  // namespace fullshard::sim

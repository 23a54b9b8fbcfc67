#include "simulator/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <queue>
#include <string>
#include <unordered_map>

#include "core/common/error.h"
#include "simulator/engine/world.h"

namespace fullshard::sim {

// NOTE [Timing semantics]: as CUDA runs a host program.
//  - The host issues its instructions in order. A kernel or collective launch costs the cost
//    model's launch overhead of host time; the op enters its stream's FIFO when the launch
//    returns (InstrTime::issue). Records, waits, alloc, free and markers take no time. The host
//    waits only at kSynchronize, for the event's latest record (event 0: all work issued so far).
//  - A stream runs its queue in order: an op starts at max(its issue time, the end of the
//    stream's previous op); a kWaitEvent also waits for the latest record of that event issued
//    before it (none: a no-op, as in CUDA); a kRecordEvent completes with the work before it.
//  - The i-th collective of each member on a group (NOTE [Collective matching] in checks.cc)
//    starts when the last present member has it at the head of its stream and ends at start +
//    duration on every member (the longest of the members' costs).
//  - Actors (hosts, streams, running collectives) pop from a queue ordered by (time, sequence
//    number); a stream starts an op only at the current time, so rate changes apply in time
//    order. Every time is a max/plus of times independent of processing order: bit-identical
//    run to run. A queue that empties with work left is a deadlock (the pending collectives
//    say who waits for whom).

// NOTE [Communicator order]: a group's collectives run one at a time, in the order the host
// issued them, whatever stream each was issued on: a collective cannot start on a member before
// that member's previous collective on the same group has ended. NCCL orders every launch on a
// communicator behind the previous one (docs/cost-model.md has the source trail), so an FSDP2
// all-gather prefetch queues behind a reduce-scatter of the same group on another stream, while
// different groups (HSDP's shard and replicate) overlap and share links. Issue order per member
// is the matching order (NOTE [Collective matching]), so this never hangs a program that
// CUDA + NCCL would run.

// NOTE [Rates]: a kernel or collective is work (the cost model's seconds) done at a rate. A
// device kernel runs at its rank's speed (EngineOptions::speed) x (1 - the summed
// compute_slowdown of the collectives running on that rank, at most kMaxSlowdown); a collective
// runs at 1 / (the most collectives sharing its link class on any present member) (NOTE
// [Collective load] in cost_model.h). Rates change only when a collective starts or ends; the
// running ops of its members are then advanced to that moment and their ends recomputed. With
// the default load (none) every rate is 1 and end = start + cost exactly.

namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint8_t kHostActor = kNumStreams;
constexpr uint8_t kCollectiveActor = kNumStreams + 1;  // QItem::rank is then the collective slot
constexpr double kMaxSlowdown = 0.95;
constexpr int kNumLinks = 2;

// A kernel or collective in flight (NOTE [Rates]).
struct Running {
  double work = 0;  // seconds left at rate 1, as of `since`
  double rate = 1;
  double since = 0;
  double end() const { return since + work / rate; }
  // Advances to `now` and switches to `rate`; false (no change) when the rate is the same or
  // the op ends by `now` anyway.
  bool set_rate(double new_rate, double now) {
    if (new_rate == rate || end() <= now) return false;
    work = std::max(0.0, work - (now - since) * rate);
    since = now;
    rate = new_rate;
    return true;
  }
};

struct Arrival {
  uint32_t rank;  // program index
  uint8_t stream;
  uint32_t instr;
  double duration;
};

struct Pending {
  double ready = 0;
  std::vector<Arrival> arrivals;
};

struct RunningCollective {
  std::vector<Arrival> arrivals;  // one per present member
  Running run;
  CollectiveLoad load;
  uint64_t version = 0;
  uint64_t stamp = 0;  // dedupes rate updates
  bool live = false;
};

struct RankState {
  const Program* prog = nullptr;
  std::vector<InstrTime>* times = nullptr;
  std::array<std::vector<uint32_t>, kNumStreams> queue;
  std::array<uint32_t, kNumStreams> head{};
  std::array<double, kNumStreams> free_at{};
  std::array<bool, kNumStreams> wants_host{};     // its next op is not issued yet
  std::array<bool, kNumStreams> in_collective{};  // arrived, waiting for the other members
  std::array<uint32_t, kNumStreams> last_issued{};
  std::array<bool, kNumStreams + 1> scheduled{};  // the host's (streams use wake_version)
  std::array<uint64_t, kNumStreams> wake_version{};
  std::array<bool, kNumStreams> busy{};  // a kernel is running (kernel[s])
  std::array<Running, kNumStreams> kernel{};
  std::array<bool, kNumStreams> slowable{};        // the running kernel is a device kernel
  std::array<uint32_t, kNumStreams> collective{};  // running collective slot, or kNone
  std::array<int, kNumLinks> links{};              // running collectives per link class
  double slowdown = 0;                             // summed compute_slowdown of those
  double speed = 1;
  std::vector<uint32_t> ref;  // kWaitEvent / kSynchronize: the record it waits for, or kNone
  std::unordered_map<uint64_t, uint32_t> last_record;  // event -> latest record issued
  std::vector<uint8_t> has_waiters;
  std::unordered_map<uint32_t, std::vector<uint8_t>> waiters;  // instr -> blocked actors
  uint32_t pc = 0;
  double host_time = 0;
  double storage_free = 0;  // when the checkpoint lane's last write ends
};

struct QItem {
  double time;
  uint64_t seq;
  uint32_t rank;
  uint8_t actor;
  uint64_t version;  // stream and collective wake-ups: only the latest counts
};
struct Later {
  bool operator()(const QItem& a, const QItem& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

bool is_op(InstrType t) { return t == InstrType::kKernel || t == InstrType::kCollective; }
bool on_stream(InstrType t) {
  return is_op(t) || t == InstrType::kRecordEvent || t == InstrType::kWaitEvent;
}
std::string_view sname(int s) { return stream_name(static_cast<StreamRole>(s)); }

class Engine {
 public:
  Engine(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
         const CostModel& cost, const EngineOptions& options, EngineResult& result)
      : programs_(programs),
        groups_(groups),
        cost_(cost),
        world_(index_world(programs, groups, options.symmetric)),
        result_(result) {
    result_.ranks.resize(programs.size());
    ranks_.resize(programs.size());
    FULLSHARD_CHECK(options.speed.empty() || options.speed.size() == programs.size(),
                    "EngineOptions::speed needs one factor per program");
    for (size_t r = 0; r < programs.size(); ++r) {
      init_rank(static_cast<uint32_t>(r));
      if (!options.speed.empty()) {
        FULLSHARD_CHECK(options.speed[r] > 0, "speed factors must be positive");
        ranks_[r].speed = options.speed[r];
      }
    }
  }

  void run() {
    for (uint32_t r = 0; r < ranks_.size(); ++r) schedule(r, kHostActor, 0);
    while (!queue_.empty()) {
      const QItem item = queue_.top();
      queue_.pop();
      ++result_.events_processed;
      if (item.actor == kCollectiveActor) {
        RunningCollective& c = collectives_[item.rank];
        if (c.live && c.version == item.version) end_collective(item.rank, item.time);
        continue;
      }
      RankState& R = ranks_[item.rank];
      if (item.actor == kHostActor) {
        R.scheduled[item.actor] = false;
        run_host(item.rank);
      } else if (R.wake_version[item.actor] == item.version) {
        run_stream(item.rank, item.actor, item.time);
      }
    }
    summarize();
  }

 private:
  void init_rank(uint32_t r) {
    const Program& p = programs_[r];
    RankState& R = ranks_[r];
    R.prog = &p;
    RankTiming& out = result_.ranks[r];
    out.rank = p.rank;
    out.times.assign(p.instrs.size(), InstrTime{});
    R.times = &out.times;
    std::array<uint32_t, kNumStreams> counts{};
    for (const Instr& in : p.instrs) {
      FULLSHARD_CHECK(static_cast<int>(in.stream) < kNumStreams,
                      "rank " + std::to_string(p.rank) + " uses stream " +
                          std::to_string(static_cast<int>(in.stream)));
      if (on_stream(in.type)) ++counts[static_cast<int>(in.stream)];
    }
    for (int s = 0; s < kNumStreams; ++s) R.queue[s].reserve(counts[s]);
    for (uint32_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      if (on_stream(in.type)) R.queue[static_cast<int>(in.stream)].push_back(i);
    }
    // Every stream waits for the host to issue its first op.
    for (int s = 0; s < kNumStreams; ++s) R.wants_host[s] = !R.queue[s].empty();
    R.last_issued.fill(kNone);
    R.collective.fill(kNone);
    R.ref.assign(p.instrs.size(), kNone);
    R.has_waiters.assign(p.instrs.size(), 0);
  }

  void schedule(uint32_t r, uint8_t actor, double time) {
    RankState& R = ranks_[r];
    if (actor != kHostActor) {  // a stream: this wake-up replaces any earlier one
      queue_.push(QItem{time, next_seq_++, r, actor, ++R.wake_version[actor]});
      return;
    }
    if (R.scheduled[actor]) return;
    R.scheduled[actor] = true;
    queue_.push(QItem{time, next_seq_++, r, actor, 0});
  }

  void add_waiter(RankState& R, uint32_t instr, uint8_t actor) {
    R.has_waiters[instr] = 1;
    R.waiters[instr].push_back(actor);
  }

  static uint32_t latest_record(const RankState& R, uint64_t event) {
    auto it = R.last_record.find(event);
    return it == R.last_record.end() ? kNone : it->second;
  }

  // ---- host ----

  void run_host(uint32_t r) {
    RankState& R = ranks_[r];
    const auto& instrs = R.prog->instrs;
    auto& times = *R.times;
    while (R.pc < instrs.size()) {
      const uint32_t i = R.pc;
      const Instr& in = instrs[i];
      InstrTime& t = times[i];
      const int s = static_cast<int>(in.stream);
      switch (in.type) {
        case InstrType::kKernel:
        case InstrType::kCollective:
        case InstrType::kRecordEvent:
        case InstrType::kWaitEvent:
          if (is_op(in.type)) R.host_time += cost_.launch_seconds(in);
          t.issue = R.host_time;
          if (in.type == InstrType::kRecordEvent) R.last_record[in.event] = i;
          if (in.type == InstrType::kWaitEvent) R.ref[i] = latest_record(R, in.event);
          R.last_issued[s] = i;
          ++R.pc;
          if (R.wants_host[s]) {
            R.wants_host[s] = false;
            schedule(r, static_cast<uint8_t>(s), R.host_time);
          }
          continue;
        case InstrType::kSynchronize:
          if (!synchronize(R, i)) return;  // blocked; the awaited completion reschedules us
          break;
        case InstrType::kAlloc:
        case InstrType::kFree:
        case InstrType::kMarker: t.issue = t.start = t.end = R.host_time; break;
        case InstrType::kHostWork:  // the host is busy; streams run on meanwhile
          t.issue = t.start = R.host_time;
          R.host_time += checked(cost_.host_work_seconds(in), in);
          t.end = R.host_time;
          break;
        case InstrType::kStorageWrite:
          // NOTE [Checkpoint lane]: a writer thread beside the host: one write at a time, from
          // when the host hands it over; the host goes on at once, and a synchronize on its
          // event waits for its end (which is known now: nothing else shares the lane).
          t.issue = R.host_time;
          t.start = std::max(R.host_time, R.storage_free);
          t.end = t.start + checked(cost_.storage_write_seconds(in), in);
          R.storage_free = t.end;
          if (in.event != 0) R.last_record[in.event] = i;
          break;
      }
      ++R.pc;
    }
  }

  // Returns false when the host must block.
  bool synchronize(RankState& R, uint32_t i) {
    const Instr& in = R.prog->instrs[i];
    InstrTime& t = (*R.times)[i];
    if (t.issue == kNotRun) {  // first visit
      t.issue = t.start = R.host_time;
      if (in.event != 0) R.ref[i] = latest_record(R, in.event);
    }
    double done = R.host_time;
    auto await = [&](uint32_t j) {
      if (j == kNone) return true;
      const double end = (*R.times)[j].end;
      if (end == kNotRun) {
        add_waiter(R, j, kHostActor);
        return false;
      }
      done = std::max(done, end);
      return true;
    };
    if (in.event == 0) {
      for (int s = 0; s < kNumStreams; ++s) {
        if (!await(R.last_issued[s])) return false;
      }
    } else if (!await(R.ref[i])) {
      return false;
    }
    R.host_time = done;
    t.end = done;
    return true;
  }

  // ---- streams ----

  void run_stream(uint32_t r, uint8_t s, double now) {
    RankState& R = ranks_[r];
    const auto& q = R.queue[s];
    const auto& instrs = R.prog->instrs;
    auto& times = *R.times;
    if (R.busy[s]) {  // woken at the end of its running kernel
      if (R.kernel[s].end() > now) return;
      R.busy[s] = false;
      finish(r, s, q[R.head[s]], now);
    }
    while (R.head[s] < q.size() && !R.in_collective[s]) {
      const uint32_t i = q[R.head[s]];
      if (i >= R.pc) {  // not issued yet: the host wakes us when it issues it
        R.wants_host[s] = true;
        return;
      }
      const Instr& in = instrs[i];
      InstrTime& t = times[i];
      const double ready = std::max(t.issue, R.free_at[s]);
      if (ready > now) {  // NOTE [Rates]: start ops only at the current time
        schedule(r, s, ready);
        return;
      }
      switch (in.type) {
        case InstrType::kKernel: {
          t.start = now;
          const double work = checked(cost_.kernel_seconds(in), in);
          if (work == 0) break;
          R.slowable[s] = in.place == KernelPlace::kDevice;
          R.kernel[s] = Running{work, kernel_rate(R, s), now};
          R.busy[s] = true;
          schedule(r, s, R.kernel[s].end());
          return;
        }
        case InstrType::kRecordEvent: break;
        case InstrType::kWaitEvent:
          if (const uint32_t j = R.ref[i]; j != kNone && times[j].end == kNotRun) {
            add_waiter(R, j, s);
            return;
          }
          break;
        case InstrType::kCollective:
          // Queued behind the previous collective on its group (NOTE [Communicator order]).
          if (const uint32_t j = previous_on_group(r, i); j != kNone && times[j].end == kNotRun) {
            add_waiter(R, j, s);
            return;
          }
          arrive(r, s, i, now);
          continue;  // either started alone (in_collective) or waits for the other members
        default: FULLSHARD_CHECK(false, "host instruction on a stream queue");
      }
      t.start = now;
      finish(r, s, i, now);
    }
  }

  // The collective this rank issued on the same group just before instruction i, or kNone.
  uint32_t previous_on_group(uint32_t r, uint32_t i) const {
    const uint32_t seq = world_.collective_seq[r][i];
    if (seq == 0) return kNone;
    return world_.collectives[r][programs_[r].instrs[i].group][seq - 1];
  }

  double kernel_rate(const RankState& R, int s) const {
    if (!R.slowable[s]) return 1.0;
    return R.speed * (1.0 - std::min(R.slowdown, kMaxSlowdown));
  }

  double checked(double seconds, const Instr& in) const {
    FULLSHARD_CHECK(seconds >= 0 && seconds < std::numeric_limits<double>::infinity(),
                    "cost model returned " + std::to_string(seconds) + " s for instruction " +
                        std::to_string(in.host_seq));
    return seconds;
  }

  void finish(uint32_t r, uint8_t s, uint32_t i, double end) {
    RankState& R = ranks_[r];
    (*R.times)[i].end = end;
    R.free_at[s] = end;
    ++R.head[s];
    if (!R.has_waiters[i]) return;
    auto it = R.waiters.find(i);
    for (uint8_t actor : it->second) schedule(r, actor, end);
    R.waiters.erase(it);
    R.has_waiters[i] = 0;
  }

  void arrive(uint32_t r, uint8_t s, uint32_t i, double ready) {
    const Instr& in = programs_[r].instrs[i];
    const Arrival a{r, s, i, checked(cost_.collective_seconds(in, groups_[in.group]), in)};
    const size_t expected = world_.present[in.group].size();
    ranks_[r].in_collective[s] = true;
    if (expected == 1) {  // symmetric mode with one representative: nobody to wait for
      start_collective(Pending{ready, {a}});
      return;
    }
    const uint64_t key = (uint64_t{in.group} << 32) | world_.collective_seq[r][i];
    Pending& p = pending_[key];
    p.ready = std::max(p.ready, ready);
    p.arrivals.push_back(a);
    if (p.arrivals.size() < expected) return;
    Pending done = std::move(p);
    pending_.erase(key);
    start_collective(done);
  }

  // All present members arrived (at p.ready, the current time).
  void start_collective(const Pending& p) {
    double duration = 0;
    for (const Arrival& a : p.arrivals) duration = std::max(duration, a.duration);
    for (const Arrival& a : p.arrivals) (*ranks_[a.rank].times)[a.instr].start = p.ready;
    if (duration == 0) {  // nothing to move: done at once, no load
      for (const Arrival& a : p.arrivals) {
        ranks_[a.rank].in_collective[a.stream] = false;
        finish(a.rank, a.stream, a.instr, p.ready);
        schedule(a.rank, a.stream, p.ready);
      }
      return;
    }
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = static_cast<uint32_t>(collectives_.size());
      collectives_.emplace_back();
    }
    RunningCollective& c = collectives_[slot];
    const Arrival& first = p.arrivals.front();
    const Instr& in = programs_[first.rank].instrs[first.instr];
    c.arrivals = p.arrivals;
    c.load = cost_.collective_load(in, groups_[in.group]);
    FULLSHARD_CHECK(
        c.load.link < kNumLinks && c.load.compute_slowdown >= 0 && c.load.compute_slowdown < 1,
        "cost model returned a bad collective load");
    c.run = Running{duration, 1.0, p.ready};
    c.live = true;
    for (const Arrival& a : c.arrivals) ranks_[a.rank].collective[a.stream] = slot;
    apply_load(slot, +1, p.ready);
  }

  void end_collective(uint32_t slot, double now) {
    RunningCollective& c = collectives_[slot];
    c.live = false;
    apply_load(slot, -1, now);
    for (const Arrival& a : c.arrivals) {
      RankState& A = ranks_[a.rank];
      A.in_collective[a.stream] = false;
      A.collective[a.stream] = kNone;
      finish(a.rank, a.stream, a.instr, now);
      schedule(a.rank, a.stream, now);
    }
    free_slots_.push_back(slot);
  }

  // NOTE [Rates] (above): a collective starts (+1) or ends (-1) on its members: update their link
  // counts and compute slowdown, then the rates of every op running on them.
  void apply_load(uint32_t slot, int sign, double now) {
    const CollectiveLoad load = collectives_[slot].load;
    const bool changes = load.link >= 0 || load.compute_slowdown > 0;
    if (changes) {
      for (const Arrival& a : collectives_[slot].arrivals) {
        RankState& A = ranks_[a.rank];
        if (load.link >= 0) A.links[static_cast<size_t>(load.link)] += sign;
        A.slowdown += sign * load.compute_slowdown;
        if (A.slowdown < 1e-12) A.slowdown = 0;  // no drift after the last one ends
      }
    }
    const uint64_t stamp = ++stamp_;
    std::vector<uint32_t> touched;
    if (sign > 0) {
      collectives_[slot].stamp = stamp;
      touched.push_back(slot);
    }
    if (changes) {
      for (const Arrival& a : collectives_[slot].arrivals) {
        RankState& A = ranks_[a.rank];
        for (int s = 0; s < kNumStreams; ++s) {
          if (A.busy[s] && A.slowable[s] && A.kernel[s].set_rate(kernel_rate(A, s), now))
            schedule(a.rank, static_cast<uint8_t>(s), A.kernel[s].end());
          const uint32_t other = A.collective[s];
          if (other != kNone && collectives_[other].live && collectives_[other].stamp != stamp) {
            collectives_[other].stamp = stamp;
            touched.push_back(other);
          }
        }
      }
    }
    for (uint32_t t : touched) {
      RunningCollective& c = collectives_[t];
      int sharing = 1;
      if (c.load.link >= 0)
        for (const Arrival& a : c.arrivals)
          sharing = std::max(sharing, ranks_[a.rank].links[static_cast<size_t>(c.load.link)]);
      const bool changed = c.run.set_rate(1.0 / sharing, now);
      if (changed || t == slot)
        queue_.push(QItem{c.run.end(), next_seq_++, t, kCollectiveActor, ++c.version});
    }
  }

  // ---- results ----

  void summarize() {
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      const RankState& R = ranks_[r];
      RankTiming& out = result_.ranks[r];
      out.completed = R.pc == R.prog->instrs.size();
      for (int s = 0; s < kNumStreams; ++s) out.completed &= R.head[s] == R.queue[s].size();
      result_.completed &= out.completed;
      double end = R.host_time;
      std::vector<std::pair<double, double>> compute, comm;
      for (uint32_t i = 0; i < out.times.size(); ++i) {
        const InstrTime& t = out.times[i];
        end = std::max(end, t.end);
        const Instr& in = R.prog->instrs[i];
        if (!is_op(in.type) || t.end == kNotRun) continue;
        const int s = static_cast<int>(in.stream);
        out.busy_s[s] += t.end - t.start;
        if (t.end <= t.start) continue;
        if (auto inner = inner_comm_span(in, t, cost_)) {  // async TP's collective-matmuls
          compute.emplace_back(t.start, inner->compute_end);
          out.compute_s += inner->compute_end - t.start;
          comm.emplace_back(inner->comm_begin, t.end);
          continue;
        }
        switch (op_activity(in)) {  // NOTE [Compute or communication] in program.h
          case OpActivity::kCompute:
            compute.emplace_back(t.start, t.end);
            out.compute_s += t.end - t.start;
            break;
          case OpActivity::kComm: comm.emplace_back(t.start, t.end); break;
          case OpActivity::kOther: break;
        }
      }
      out.end_s = end;
      out.comm_s = uncovered_seconds(comm, {});
      out.exposed_comm_s = uncovered_seconds(std::move(comm), std::move(compute));
      result_.makespan_s = std::max(result_.makespan_s, end);
    }
    if (!result_.completed) report_hangs();
  }

  std::string blocked_reason(uint32_t m, uint32_t k) const {
    const RankState& R = ranks_[m];
    const Program& p = programs_[m];
    if (k >= R.pc) {
      if (R.pc < p.instrs.size() && p.instrs[R.pc].type == InstrType::kSynchronize) {
        const Instr& sync = p.instrs[R.pc];
        const std::string_view name = instr_name(p, sync);
        return fmt::format(
            "is blocked: its host waits in synchronize{}{}{} on {} (instruction #{})",
            name.empty() ? "" : " '", name, name.empty() ? "" : "'",
            sync.event == 0 ? std::string("the device") : "event " + std::to_string(sync.event),
            R.pc);
      }
      return fmt::format("is blocked before issuing it (host at instruction #{})", R.pc);
    }
    const int s = static_cast<int>(p.instrs[k].stream);
    const uint32_t h = R.queue[s][R.head[s]];
    const Instr& hi = p.instrs[h];
    if (hi.type == InstrType::kCollective && !R.in_collective[s]) {
      if (const uint32_t j = previous_on_group(m, h); j != kNone && R.times->at(j).end == kNotRun) {
        const Instr& prev = p.instrs[j];
        return fmt::format(
            "is blocked: its {} stream's {} #{} is queued behind {} #{} on the same communicator "
            "(group {}), which never completes",
            sname(s), describe_collective(p, hi), world_.collective_seq[m][h],
            describe_collective(p, prev), world_.collective_seq[m][j],
            group_str(groups_[hi.group]));
      }
    }
    if (hi.type == InstrType::kCollective) {
      return fmt::format("is blocked: its {} stream is stuck in {} #{} on group {}", sname(s),
                         describe_collective(p, hi), world_.collective_seq[m][h],
                         group_str(groups_[hi.group]));
    }
    if (hi.type == InstrType::kWaitEvent && R.ref[h] != kNone) {
      const Instr& rec = p.instrs[R.ref[h]];
      return fmt::format(
          "is blocked: its {} stream waits for event {} recorded on the {} stream, which never "
          "completes",
          sname(s), hi.event, sname(static_cast<int>(rec.stream)));
    }
    return fmt::format("is blocked: its {} stream is stuck at instruction #{}", sname(s), h);
  }

  void report_hangs() {
    std::vector<uint64_t> keys;
    keys.reserve(pending_.size());
    for (const auto& [key, p] : pending_) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    for (uint64_t key : keys) {
      const Pending& p = pending_.at(key);
      const uint32_t g = static_cast<uint32_t>(key >> 32);
      const size_t pos = static_cast<size_t>(key & 0xffffffffu);
      std::vector<const Arrival*> arrived(programs_.size(), nullptr);
      for (const Arrival& a : p.arrivals) arrived[a.rank] = &a;
      std::vector<int> waiting;
      std::vector<std::pair<int, std::string>> absent;
      const Arrival* first = nullptr;  // the first waiting member in group order
      for (uint32_t m : world_.present[g]) {
        if (arrived[m]) {
          if (!first) first = arrived[m];
          waiting.push_back(programs_[m].rank);
        } else if (world_.collectives[m][g].size() <= pos) {
          absent.emplace_back(programs_[m].rank,
                              "never issues it (" + describe_program_end(programs_[m]) + ")");
        } else {
          absent.emplace_back(programs_[m].rank, blocked_reason(m, world_.collectives[m][g][pos]));
        }
      }
      const Program& wp = programs_[first->rank];
      result_.problems.push_back(missing_collective_problem(wp, wp.instrs[first->instr], groups_[g],
                                                            pos, waiting, absent));
    }
    if (keys.empty()) {  // unreachable with well-formed programs; say something anyway
      for (uint32_t r = 0; r < ranks_.size(); ++r) {
        if (result_.ranks[r].completed) continue;
        Problem pr;
        pr.kind = ProblemKind::kCollectiveHang;
        pr.ranks = {programs_[r].rank};
        pr.message = fmt::format("rank {} did not finish (host at instruction #{} of {})",
                                 programs_[r].rank, ranks_[r].pc, programs_[r].instrs.size());
        result_.problems.push_back(std::move(pr));
      }
    }
  }

  const std::vector<Program>& programs_;
  const std::vector<GroupInfo>& groups_;
  const CostModel& cost_;
  const WorldIndex world_;
  EngineResult& result_;
  std::vector<RankState> ranks_;
  std::priority_queue<QItem, std::vector<QItem>, Later> queue_;
  uint64_t next_seq_ = 0;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<RunningCollective> collectives_;
  std::vector<uint32_t> free_slots_;
  uint64_t stamp_ = 0;
};

}  // namespace

std::optional<InnerCommSpan> inner_comm_span(const Instr& op, const InstrTime& t,
                                             const CostModel& cost) {
  if (op.type != InstrType::kKernel || op_activity(op) != OpActivity::kCompute || t.end == kNotRun)
    return std::nullopt;
  const KernelComm inner = cost.kernel_comm(op);
  if (inner.comm_s <= 0) return std::nullopt;
  // The op may have run slower than priced (a collective beside it): scale to its span.
  const double priced = cost.kernel_seconds(op), span = t.end - t.start;
  const double f = priced > 0 ? span / priced : 1.0;
  InnerCommSpan s;
  s.compute_end = t.end - std::min(span, inner.exposed_s * f);
  s.comm_begin = t.end - std::min(span, std::max(inner.comm_s, inner.exposed_s) * f);
  return s;
}

EngineResult simulate(const std::vector<Program>& programs, const std::vector<GroupInfo>& groups,
                      const CostModel& cost, const EngineOptions& options) {
  EngineResult result;
  if (options.checks) {
    CheckOptions check = options.check;
    check.symmetric = options.symmetric;
    result.problems = check_programs(programs, groups, check);
  }
  const size_t structural = result.problems.size();
  Engine(programs, groups, cost, options, result).run();
  // A hang the structural checks already explained (same message) is reported once.
  for (size_t i = structural; i < result.problems.size();) {
    const bool dup =
        std::any_of(result.problems.begin(), result.problems.begin() + structural,
                    [&](const Problem& p) { return p.message == result.problems[i].message; });
    if (dup) {
      result.problems.erase(result.problems.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return result;
}

}  // namespace fullshard::sim

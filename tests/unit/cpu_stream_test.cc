// The CPU backend's streams: in-order execution, events across streams, failure propagation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/stream_worker.h"

using namespace fullshard::cpu;

TEST(StreamWorker, RunsTasksInOrder) {
  FailureState f;
  std::vector<int> seen;
  {
    StreamWorker s("compute", f);
    for (int i = 0; i < 100; ++i) s.enqueue([&seen, i] { seen.push_back(i); });
    s.drain();
    ASSERT_EQ(seen.size(), 100u);
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
}

TEST(StreamWorker, WaitOrdersWorkAcrossStreams) {
  FailureState f;
  StreamWorker producer("all_gather", f), consumer("compute", f);
  std::atomic<int> value{0};
  int observed = -1;
  auto e = std::make_shared<CpuEvent>();
  producer.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 42;
  });
  producer.record(e);
  consumer.wait(e);
  consumer.enqueue([&] { observed = value.load(); });
  consumer.drain();
  EXPECT_EQ(observed, 42);
  EXPECT_TRUE(e->done());
}

TEST(StreamWorker, AFailingTaskPoisonsEveryStreamButEventsStillComplete) {
  FailureState f;
  StreamWorker a("reduce_scatter", f), b("compute", f);
  std::atomic<int> ran{0};
  auto e = std::make_shared<CpuEvent>();
  a.enqueue([] { throw std::runtime_error("peer 1 closed the connection"); });
  a.enqueue([&] { ++ran; });  // skipped
  a.record(e);
  b.wait(e);                  // must not hang
  b.enqueue([&] { ++ran; });  // skipped: the backend failed
  b.drain();
  a.drain();
  EXPECT_EQ(ran.load(), 0);
  ASSERT_TRUE(f.failed());
  try {
    std::rethrow_exception(f.error());
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "peer 1 closed the connection");
  }
}

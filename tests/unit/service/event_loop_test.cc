// EventLoop on a fake clock: readers fire, timers fire in time order and can be re-armed or
// cancelled from their own callbacks, sources can be removed from inside a callback, Post wakes
// the loop from another thread, and signals arrive through the signalfd.
#include "lib/service/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "lib/ipc/sockets.h"
#include "tests/fakes/fake_clock.h"

namespace nodelet {
namespace {

using std::chrono::milliseconds;
using testing::FakeClock;

// Iterates until `done()` holds; fails after `limit` iterations of up to 100 ms each.
bool RunUntil(EventLoop& loop, const std::function<bool()>& done, int limit = 100) {
  for (int i = 0; i < limit && !done(); ++i) {
    EXPECT_TRUE(loop.RunOnce(milliseconds(100)).ok());
  }
  return done();
}

class Pipe {
 public:
  Pipe() { EXPECT_EQ(pipe2(fds_, O_CLOEXEC | O_NONBLOCK), 0); }
  ~Pipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  int read_end() const { return fds_[0]; }
  void Write() { ASSERT_EQ(write(fds_[1], "x", 1), 1); }
  void CloseWriteEnd() {
    close(fds_[1]);
    fds_[1] = -1;
  }
  void Drain() {
    char buf[64];
    while (read(fds_[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

TEST(EventLoopTest, FdReaderFiresWhenReadable) {
  FakeClock clock;
  EventLoop loop(clock);
  Pipe p;
  int fired = 0;
  auto h = loop.AddFd(p.read_end(), [&] {
    ++fired;
    p.Drain();
  });
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(fired, 0);
  p.Write();
  ASSERT_TRUE(RunUntil(loop, [&] { return fired == 1; }));
  h.Reset();
  p.Write();
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(fired, 1) << "a removed reader fired";
}

TEST(EventLoopTest, FdReaderSeesAHangUp) {
  FakeClock clock;
  EventLoop loop(clock);
  Pipe p;
  bool eof = false;
  EventLoop::Handle h;
  h = loop.AddFd(p.read_end(), [&] {
    char c;
    if (read(p.read_end(), &c, 1) == 0) {
      eof = true;
      h.Reset();  // a reader that did not stop at EOF would be called at every iteration
    }
  });
  p.CloseWriteEnd();
  ASSERT_TRUE(RunUntil(loop, [&] { return eof; }));
  EXPECT_FALSE(h.active());
}

TEST(EventLoopTest, SocketReaderFiresWhenAMessageArrives) {
  FakeClock clock;
  EventLoop loop(clock);
  zmq::context_t ctx;
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  pull.bind("inproc://event-loop-test");
  push.connect("inproc://event-loop-test");
  std::vector<std::string> got;
  auto h = loop.AddSocket(pull, [&] {
    zmq::message_t m;
    while (pull.recv(m, zmq::recv_flags::dontwait)) got.push_back(m.to_string());
  });
  push.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  ASSERT_TRUE(RunUntil(loop, [&] { return got.size() == 1; }));
  EXPECT_EQ(got[0], "hello");
  pull.set(zmq::sockopt::linger, 0);
  push.set(zmq::sockopt::linger, 0);
}

TEST(EventLoopTest, TimersFireInTimeOrderOnTheFakeClock) {
  FakeClock clock;
  EventLoop loop(clock);
  std::vector<std::string> order;
  auto late = loop.AddTimer([&] { order.push_back("late"); });
  auto early = loop.AddTimer([&] { order.push_back("early"); });
  auto never = loop.AddTimer([&] { order.push_back("never"); });
  late.ArmAfter(milliseconds(300));
  early.ArmAfter(milliseconds(100));
  EXPECT_TRUE(early.armed());
  EXPECT_FALSE(never.armed());
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_TRUE(order.empty());
  clock.Advance(milliseconds(100));
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"early"}));
  EXPECT_FALSE(early.armed()) << "a one-shot timer disarms when it fires";
  clock.Advance(milliseconds(1000));
  early.ArmAt(late.due() - milliseconds(50));  // both overdue; `early` is due first
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"early", "early", "late"}));
}

TEST(EventLoopTest, RepeatingTimerFiresEveryPeriod) {
  FakeClock clock;
  EventLoop loop(clock);
  int fired = 0;
  auto t = loop.AddTimer([&] { ++fired; });
  t.ArmRepeating(milliseconds(100));
  for (int i = 1; i <= 3; ++i) {
    clock.Advance(milliseconds(100));
    ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
    EXPECT_EQ(fired, i);
  }
  t.Cancel();
  clock.Advance(milliseconds(500));
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(fired, 3);
}

TEST(EventLoopTest, ATimerReArmedOrCancelledInsideACallback) {
  FakeClock clock;
  EventLoop loop(clock);
  int a_fired = 0, b_fired = 0;
  EventLoop::Timer b;
  EventLoop::Timer a = loop.AddTimer([&] {
    ++a_fired;
    if (a_fired < 3) a.ArmAfter(milliseconds(10));  // re-arms itself
    b.Cancel();                                     // cancels one due in the same iteration
  });
  b = loop.AddTimer([&] { ++b_fired; });
  a.ArmAfter(milliseconds(10));
  b.ArmAfter(milliseconds(20));
  for (int i = 0; i < 5; ++i) {
    clock.Advance(milliseconds(20));
    ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  }
  EXPECT_EQ(a_fired, 3);
  EXPECT_EQ(b_fired, 0);

  // A repeating timer cancelled from its own callback stops.
  int r_fired = 0;
  EventLoop::Timer r;
  r = loop.AddTimer([&] {
    ++r_fired;
    r.Cancel();
  });
  r.ArmRepeating(milliseconds(10));
  for (int i = 0; i < 3; ++i) {
    clock.Advance(milliseconds(10));
    ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  }
  EXPECT_EQ(r_fired, 1);
}

TEST(EventLoopTest, ATimerDestroyedByAnEarlierCallbackDoesNotFire) {
  FakeClock clock;
  EventLoop loop(clock);
  int second_fired = 0;
  auto second = std::make_unique<EventLoop::Timer>(loop.AddTimer([&] { ++second_fired; }));
  auto first = loop.AddTimer([&] { second.reset(); });
  first.ArmAfter(milliseconds(10));
  second->ArmAfter(milliseconds(20));
  clock.Advance(milliseconds(30));
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(second, nullptr);
  EXPECT_EQ(second_fired, 0);
}

TEST(EventLoopTest, ASourceRemovedInsideACallback) {
  FakeClock clock;
  EventLoop loop(clock);
  Pipe p, q;
  int p_fired = 0, q_fired = 0;
  EventLoop::Handle q_handle;
  // The first reader removes itself and the other one, both readable in the same iteration.
  EventLoop::Handle p_handle = loop.AddFd(p.read_end(), [&] {
    ++p_fired;
    p_handle.Reset();
    q_handle.Reset();
  });
  q_handle = loop.AddFd(q.read_end(), [&] { ++q_fired; });
  p.Write();
  q.Write();
  ASSERT_TRUE(RunUntil(loop, [&] { return p_fired + q_fired > 0; }));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  // Whichever ran first: p removes both, so p runs once and q at most once (if it came first).
  EXPECT_EQ(p_fired, 1);
  EXPECT_LE(q_fired, 1);
  EXPECT_FALSE(p_handle.active());
  EXPECT_FALSE(q_handle.active());
}

TEST(EventLoopTest, AfterIterationRunsLastInEveryIteration) {
  FakeClock clock;
  EventLoop loop(clock);
  std::vector<std::string> order;
  auto t = loop.AddTimer([&] { order.push_back("timer"); });
  EventLoop::Handle after = loop.AddAfterIteration([&] { order.push_back("after"); });
  t.ArmAfter(milliseconds(10));
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());  // nothing due: it still runs
  clock.Advance(milliseconds(10));
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(order, (std::vector<std::string>{"after", "timer", "after"}));
  after.Reset();
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(order.size(), 3u);
}

TEST(EventLoopTest, PostFromAnotherThreadWakesTheLoop) {
  FakeClock clock;
  EventLoop loop(clock);
  std::thread::id ran_on;
  std::atomic<bool> ran{false};
  std::thread t([&] {
    loop.Post([&] {
      ran_on = std::this_thread::get_id();
      ran = true;
    });
  });
  t.join();
  // No timer, no reader: only the post can end this wait before its 10 s.
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(loop.RunOnce(milliseconds(10000)).ok());
  EXPECT_TRUE(ran);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(EventLoopTest, PostWhileRunningAndStop) {
  FakeClock clock;
  EventLoop loop(clock);
  std::atomic<int> count{0};
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) loop.Post([&] { ++count; });
    loop.Post([&] { loop.Stop(); });
  });
  ASSERT_TRUE(loop.Run().ok());
  t.join();
  EXPECT_EQ(count.load(), 100);
  EXPECT_TRUE(loop.stopped());
}

TEST(EventLoopTest, SignalsArriveThroughTheSignalfd) {
  EventLoop::BlockSignals({SIGUSR1, SIGUSR2});
  FakeClock clock;
  EventLoop loop(clock);
  std::vector<uint32_t> got;
  auto h1 = loop.AddSignal(SIGUSR1, [&](const signalfd_siginfo& i) { got.push_back(i.ssi_signo); });
  auto h2 = loop.AddSignal(SIGUSR2, [&](const signalfd_siginfo& i) { got.push_back(i.ssi_signo); });
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  ASSERT_TRUE(RunUntil(loop, [&] { return got.size() == 1; }));
  EXPECT_EQ(got[0], static_cast<uint32_t>(SIGUSR1));
  h1.Reset();
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  ASSERT_TRUE(RunUntil(loop, [&] { return got.size() == 2; }));
  EXPECT_EQ(got[1], static_cast<uint32_t>(SIGUSR2));
  // SIGUSR1 stays blocked and pending once removed from the loop; take it back here.
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  int signo = 0;
  ASSERT_EQ(sigwait(&set, &signo), 0);
  EXPECT_EQ(signo, SIGUSR1);
  ASSERT_TRUE(loop.RunOnce(milliseconds(0)).ok());
  EXPECT_EQ(got.size(), 2u);
}

}  // namespace
}  // namespace nodelet

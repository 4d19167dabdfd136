// RuntimeEventWatcher against in-process gRPC runtimes on a unix socket: one that has CRI's
// GetContainerEvents (containerd 1.7+), whose stream is read and whose event types become
// containerd topics; one that answers it UNIMPLEMENTED (containerd 1.6), where containerd's own
// event service is read instead; and a cut stream, subscribed again with a relist asked for.
// Those run the watcher's loop on a thread of the test on the real clock; the back-off between
// subscriptions is tested on a FakeClock, the loop turned by the test.
#include "lib/cri/runtime_events.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/cri/api.grpc.pb.h"
#include "lib/cri/containerd_events.grpc.pb.h"
#include "lib/service/event_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"
#include "tests/testing/turn_loop.h"

namespace nodelet::cri {
namespace {

namespace events = ::containerd::services::events::v1;
namespace v1 = ::runtime::v1;
using std::chrono::milliseconds;
using Change = std::pair<std::string, std::string>;  // id, topic

constexpr milliseconds kWait{5000};

// A stream the test feeds: Push() queues a message, Cut() ends the stream with UNAVAILABLE.
template <typename Message>
class FedStream {
 public:
  void Push(Message m) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(m));
    cv_.notify_all();
  }
  void Cut() {
    std::lock_guard<std::mutex> lock(mu_);
    cut_ = true;
    cv_.notify_all();
  }
  bool WaitStreams(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return streams_ >= n; });
  }
  int streams() {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  // The server's side of one stream: until the client cancels, the test cuts it or the server
  // shuts down.
  grpc::Status Serve(grpc::ServerContext* ctx, grpc::ServerWriter<Message>* writer) {
    std::unique_lock<std::mutex> lock(mu_);
    ++streams_;
    cv_.notify_all();
    while (!ctx->IsCancelled()) {
      if (cut_) {
        cut_ = false;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut by the test");
      }
      while (!queue_.empty()) {
        Message m = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        writer->Write(m);
        lock.lock();
      }
      // IsCancelled is not a condition the cv hears of: look again at most 20 ms later.
      cv_.wait_for(lock, milliseconds(20), [&] { return cut_ || !queue_.empty(); });
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> queue_;
  bool cut_ = false;
  int streams_ = 0;
};

// CRI with GetContainerEvents (containerd 1.7+).
class EventedRuntime final : public v1::RuntimeService::Service {
 public:
  grpc::Status GetContainerEvents(grpc::ServerContext* ctx, const v1::GetEventsRequest*,
                                  grpc::ServerWriter<v1::ContainerEventResponse>* writer) override {
    return stream.Serve(ctx, writer);
  }
  FedStream<v1::ContainerEventResponse> stream;
};

// CRI without it: every method UNIMPLEMENTED, as the generated base answers.
class PlainRuntime final : public v1::RuntimeService::Service {};

// containerd's own event service.
class ContainerdEvents final : public events::Events::Service {
 public:
  grpc::Status Subscribe(grpc::ServerContext* ctx, const events::SubscribeRequest* request,
                         grpc::ServerWriter<events::Envelope>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      filters.assign(request->filters().begin(), request->filters().end());
    }
    return stream.Serve(ctx, writer);
  }
  std::mutex mu;
  std::vector<std::string> filters;
  FedStream<events::Envelope> stream;
};

class Server {
 public:
  Server(const std::string& socket, grpc::Service* runtime, grpc::Service* containerd) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(runtime);
    builder.RegisterService(containerd);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) throw std::runtime_error("cannot start the gRPC server");
  }
  ~Server() { server_->Shutdown(std::chrono::system_clock::now() + milliseconds(2000)); }

 private:
  std::unique_ptr<grpc::Server> server_;
};

// What the watcher reported.
class Changes {
 public:
  RuntimeEventWatcher::OnChange Callback() {
    return [this](const std::string& id, const std::string& topic) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.emplace_back(id, topic);
      cv_.notify_all();
    };
  }
  // The events (not the relists asked for) once `n` of them came; what came at the timeout.
  std::vector<Change> WaitEvents(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kWait, [&] { return EventsLocked().size() >= n; });
    return EventsLocked();
  }
  // How many relists were asked for (a subscription started), once at least `n`.
  size_t WaitRelists(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kWait, [&] { return RelistsLocked() >= n; });
    return RelistsLocked();
  }

 private:
  std::vector<Change> EventsLocked() const {
    std::vector<Change> out;
    for (const auto& c : seen_) {
      if (!(c.first.empty() && c.second.empty())) out.push_back(c);
    }
    return out;
  }
  size_t RelistsLocked() const { return seen_.size() - EventsLocked().size(); }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Change> seen_;
};

v1::ContainerEventResponse CriEvent(const std::string& id, int type) {
  v1::ContainerEventResponse e;
  e.set_container_id(id);
  e.set_container_event_type(static_cast<v1::ContainerEventType>(type));
  return e;
}

events::Envelope Envelope(const std::string& ns, const std::string& topic,
                          const std::string& payload) {
  events::Envelope e;
  e.set_namespace_(ns);
  e.set_topic(topic);
  e.mutable_event()->set_value(payload);
  return e;
}

std::string ExitOf(const std::string& container, const std::string& process) {
  events::TaskExitTarget e;
  e.set_container_id(container);
  e.set_id(process);
  return e.SerializeAsString();
}

// The watcher on a loop that a thread of the test runs on the real clock, from Watch() until
// the test ends; the watcher is destroyed once that thread is joined.
class RuntimeEventWatcherTest : public ::testing::Test {
 protected:
  ~RuntimeEventWatcherTest() override {
    if (loop_thread_.joinable()) {
      loop_.Post([this] { loop_.Stop(); });
      loop_thread_.join();
    }
    watcher_.reset();
  }
  RuntimeEventWatcher* Watch() {
    auto w = RuntimeEventWatcher::Create(loop_, "unix://" + dir_.Sub("cri.sock"), "k8s.io",
                                         changes_.Callback());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    watcher_ = std::move(w).value();
    watcher_->Start();
    loop_thread_ = std::thread([this] { EXPECT_TRUE(loop_.Run().ok()); });
    return watcher_.get();
  }
  nodelet::testing::TempDir dir_;
  Changes changes_;
  EventLoop loop_{RealClock::Get()};
  std::unique_ptr<RuntimeEventWatcher> watcher_;
  std::thread loop_thread_;
};

TEST(RuntimeEventTopicTest, EachCriEventTypeGetsTheContainerdTopicThatMeansTheSame) {
  EXPECT_EQ(TopicOfCriEvent(v1::CONTAINER_CREATED_EVENT), "/containers/create");
  EXPECT_EQ(TopicOfCriEvent(v1::CONTAINER_STARTED_EVENT), "/tasks/start");
  EXPECT_EQ(TopicOfCriEvent(v1::CONTAINER_STOPPED_EVENT), "/tasks/exit");
  EXPECT_EQ(TopicOfCriEvent(v1::CONTAINER_DELETED_EVENT), "/containers/delete");
  EXPECT_EQ(TopicOfCriEvent(42), "/cri/unknown");
}

TEST_F(RuntimeEventWatcherTest, ReadsCriEventsWhenTheRuntimeHasThem) {
  EventedRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  auto watcher = Watch();
  ASSERT_TRUE(runtime.stream.WaitStreams(1));
  EXPECT_EQ(changes_.WaitRelists(1), 1u);
  runtime.stream.Push(CriEvent("c1", v1::CONTAINER_STARTED_EVENT));
  runtime.stream.Push(CriEvent("c1", v1::CONTAINER_STOPPED_EVENT));
  runtime.stream.Push(CriEvent("s1", v1::CONTAINER_DELETED_EVENT));
  runtime.stream.Push(CriEvent("c2", v1::CONTAINER_CREATED_EVENT));
  const std::vector<Change> want = {{"c1", "/tasks/start"},
                                    {"c1", "/tasks/exit"},
                                    {"s1", "/containers/delete"},
                                    {"c2", "/containers/create"}};
  EXPECT_EQ(changes_.WaitEvents(want.size()), want);
  EXPECT_EQ(watcher->source(), RuntimeEventWatcher::Source::kCri);
  EXPECT_EQ(watcher->events(), 4u);
  EXPECT_EQ(watcher->cri_subscriptions(), 1u);
  EXPECT_EQ(watcher->stream_errors(), 0u);
  EXPECT_EQ(containerd.stream.streams(), 0) << "containerd's events were read beside CRI's";
  watcher->Stop();
}

TEST_F(RuntimeEventWatcherTest, FallsBackToContainerdsEventsWhenCriHasNone) {
  PlainRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  auto watcher = Watch();
  ASSERT_TRUE(containerd.stream.WaitStreams(1));
  {
    std::lock_guard<std::mutex> lock(containerd.mu);
    EXPECT_EQ(containerd.filters, std::vector<std::string>{"namespace==k8s.io"});
  }
  containerd.stream.Push(Envelope("k8s.io", "/tasks/exit", ExitOf("c1", "probe-3")));  // an exec
  containerd.stream.Push(Envelope("moby", "/tasks/exit", ExitOf("d1", "d1")));         // not CRI's
  containerd.stream.Push(Envelope("k8s.io", "/images/create", ""));                    // no change
  containerd.stream.Push(Envelope("k8s.io", "/tasks/exit", ExitOf("c1", "c1")));
  const std::vector<Change> want = {{"c1", "/tasks/exit"}};
  EXPECT_EQ(changes_.WaitEvents(want.size()), want);
  EXPECT_EQ(watcher->source(), RuntimeEventWatcher::Source::kContainerd);
  EXPECT_EQ(watcher->events(), 1u);
  // CRI's stream asked once, answered UNIMPLEMENTED: not an error, no back-off.
  EXPECT_EQ(watcher->cri_subscriptions(), 1u);
  EXPECT_EQ(watcher->subscriptions(), 2u);
  EXPECT_EQ(watcher->stream_errors(), 0u);
  EXPECT_GE(changes_.WaitRelists(1), 1u);
  watcher->Stop();
}

TEST_F(RuntimeEventWatcherTest, ACutStreamIsSubscribedAgainAndAsksForARelist) {
  EventedRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  auto watcher = Watch();
  ASSERT_TRUE(runtime.stream.WaitStreams(1));
  ASSERT_EQ(changes_.WaitRelists(1), 1u);
  runtime.stream.Cut();
  // Subscribed again after the first back-off, and a relist asked for what the gap hid.
  ASSERT_TRUE(runtime.stream.WaitStreams(2));
  EXPECT_EQ(changes_.WaitRelists(2), 2u);
  runtime.stream.Push(CriEvent("c3", v1::CONTAINER_STOPPED_EVENT));
  const std::vector<Change> want = {{"c3", "/tasks/exit"}};
  EXPECT_EQ(changes_.WaitEvents(want.size()), want);
  EXPECT_EQ(watcher->stream_errors(), 1u);
  EXPECT_EQ(watcher->cri_subscriptions(), 2u);
  EXPECT_EQ(watcher->source(), RuntimeEventWatcher::Source::kCri);
  watcher->Stop();
}

TEST_F(RuntimeEventWatcherTest, WaitsForARuntimeThatIsNotThereYet) {
  auto watcher = Watch();  // nothing listens on the socket yet
  // A second subscription began: the first failed.
  ASSERT_GE(changes_.WaitRelists(2), 2u);
  EXPECT_GE(watcher->stream_errors(), 1u);
  EventedRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  ASSERT_TRUE(runtime.stream.WaitStreams(1));
  runtime.stream.Push(CriEvent("c4", v1::CONTAINER_STARTED_EVENT));
  const std::vector<Change> want = {{"c4", "/tasks/start"}};
  EXPECT_EQ(changes_.WaitEvents(want.size()), want);
  EXPECT_EQ(watcher->source(), RuntimeEventWatcher::Source::kCri);
  watcher->Stop();
}

// The watcher on a FakeClock, its loop turned by the test: the time between two subscriptions
// is the fake clock's, so a back-off is seen to hold and then to pass without waiting for it.
// The streams' ends are real gRPC and are waited for (with a deadline).
class RuntimeEventBackoffTest : public ::testing::Test {
 protected:
  RuntimeEventWatcher& Watch() {
    auto w = RuntimeEventWatcher::Create(loop_, "unix://" + dir_.Sub("cri.sock"), "k8s.io",
                                         changes_.Callback());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    watcher_ = std::move(w).value();
    watcher_->Start();
    return *watcher_;
  }
  // Turns the loop (the fake clock still) until `done`.
  bool Turn(const std::function<bool()>& done) {
    return nodelet::testing::TurnLoopUntil(loop_, done, [] { return false; });
  }
  // Waits for the stream in progress to end and its end to be handled: the back-off is armed.
  bool WaitEnded() {
    return Turn([this] { return !watcher_->subscribed(); });
  }
  // Moves the fake clock by `d` and runs what became due: whether a subscription began.
  bool SubscribesAfter(Duration d) {
    clock_.Advance(d);
    for (int i = 0; i < 3; ++i) {
      if (!loop_.RunOnce(milliseconds(0)).ok()) return false;
    }
    return watcher_->subscribed();
  }
  nodelet::testing::TempDir dir_;
  Changes changes_;
  nodelet::testing::FakeClock clock_;
  EventLoop loop_{clock_};
  std::unique_ptr<RuntimeEventWatcher> watcher_;
};

TEST_F(RuntimeEventBackoffTest, TheBackOffDoublesAndAnEventResetsIt) {
  EventedRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  RuntimeEventWatcher& watcher = Watch();
  ASSERT_TRUE(runtime.stream.WaitStreams(1));

  // The first end: 100 ms before the next subscription, not a tick less.
  runtime.stream.Cut();
  ASSERT_TRUE(WaitEnded());
  EXPECT_EQ(watcher.stream_errors(), 1u);
  EXPECT_FALSE(SubscribesAfter(milliseconds(99)));
  EXPECT_EQ(runtime.stream.streams(), 1);
  EXPECT_TRUE(SubscribesAfter(milliseconds(1)));
  ASSERT_TRUE(runtime.stream.WaitStreams(2));
  EXPECT_EQ(changes_.WaitRelists(2), 2u);

  // A second end with no event between: 200 ms.
  runtime.stream.Cut();
  ASSERT_TRUE(WaitEnded());
  EXPECT_FALSE(SubscribesAfter(milliseconds(199)));
  EXPECT_TRUE(SubscribesAfter(milliseconds(1)));
  ASSERT_TRUE(runtime.stream.WaitStreams(3));

  // An event, then an end: back to 100 ms.
  runtime.stream.Push(CriEvent("c5", v1::CONTAINER_STARTED_EVENT));
  const std::vector<Change> want = {{"c5", "/tasks/start"}};
  EXPECT_EQ(changes_.WaitEvents(want.size()), want);
  runtime.stream.Cut();
  ASSERT_TRUE(WaitEnded());
  EXPECT_FALSE(SubscribesAfter(milliseconds(99)));
  EXPECT_TRUE(SubscribesAfter(milliseconds(1)));
  ASSERT_TRUE(runtime.stream.WaitStreams(4));
  EXPECT_EQ(watcher.stream_errors(), 3u);
  EXPECT_EQ(watcher.cri_subscriptions(), 4u);

  // Stopped with a stream open: it returns at once (no real-time wait for the server), and
  // nothing is subscribed after, however far the clock moves.
  const auto before = std::chrono::steady_clock::now();
  watcher.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  clock_.Advance(std::chrono::seconds(10));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loop_.RunOnce(milliseconds(10)).ok());
  EXPECT_EQ(watcher.subscriptions(), 4u);
  EXPECT_EQ(watcher.stream_errors(), 3u) << "the cancelled stream's end was handled";
  EXPECT_EQ(runtime.stream.streams(), 4);
}

TEST_F(RuntimeEventBackoffTest, TheSwitchToContainerdsStreamHasNoBackOff) {
  PlainRuntime runtime;
  ContainerdEvents containerd;
  Server server(dir_.Sub("cri.sock"), &runtime, &containerd);
  RuntimeEventWatcher& watcher = Watch();
  // The fake clock never moves: only the loop's turns take CRI's answer to the next stream.
  ASSERT_TRUE(Turn([&] { return containerd.stream.streams() == 1; }));
  EXPECT_EQ(watcher.source(), RuntimeEventWatcher::Source::kContainerd);
  EXPECT_EQ(watcher.stream_errors(), 0u);

  // containerd's stream ends: CRI's is asked first again, after the back-off.
  containerd.stream.Cut();
  ASSERT_TRUE(Turn([&] { return watcher.stream_errors() == 1 && !watcher.subscribed(); }));
  EXPECT_EQ(watcher.cri_subscriptions(), 1u);
  EXPECT_FALSE(SubscribesAfter(milliseconds(99)));
  EXPECT_TRUE(SubscribesAfter(milliseconds(1)));
  ASSERT_TRUE(Turn([&] { return containerd.stream.streams() == 2; }));
  EXPECT_EQ(watcher.cri_subscriptions(), 2u);
  watcher.Stop();
}

}  // namespace
}  // namespace nodelet::cri

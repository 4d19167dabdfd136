// RuntimeEventWatcher: the runtime's stream of changes, for plegd's evented relisting
// (docs/plegd.md, "Runtime events").
//
// It subscribes to one of two streams and calls `on_change(id, topic)` for every change it
// reports, with the id of the container or sandbox it names and a containerd event topic:
//
// - CRI's `RuntimeService/GetContainerEvents` (containerd 1.7+, CRI-O), asked first. Its four
//   event types are given the topic of the containerd event that means the same: created
//   "/containers/create", started "/tasks/start", stopped "/tasks/exit", deleted
//   "/containers/delete" (a type this code does not know: "/cri/unknown", a change of any kind).
//   The status fields of its events are not read: plegd asks CRI itself.
// - containerd's own event service (`containerd.services.events.v1.Events/Subscribe`, filtered
//   to one namespace: CRI's, k8s.io) when the runtime answers CRI's stream with UNIMPLEMENTED,
//   as Debian's containerd 1.6 does. Only the events that can change what CRI lists are passed
//   on (lib/cri/containerd_events.h).
//
// `on_change("", "")` comes each time a subscription starts, since changes made while there was
// none (the runtime restarting, the stream cut, plegd starting) were not seen.
//
// Scheduling lives on the owner's event loop: each subscription is one job on a one-thread
// BlockingExecutor, which reads the stream until it ends; the job's continuation, on the loop's
// thread, notes why it ended. After an end the next subscription waits for a back-off on a loop
// timer (100 ms, doubling to 5 s; reset by an event) and asks CRI's stream first again (the
// runtime may have come back as another version); the switch on UNIMPLEMENTED is submitted at
// once, with no back-off. No thread of the watcher waits for time. What an event means for the
// relists is plegd's to decide (svc-plegd/pleg_engine.h, ChangeOfTopic).
//
// `on_change` is called on the executor's thread, as each event is read, and must be quick and
// thread-safe (plegd's posts to its event loop).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "lib/common/status.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace nodelet::cri {

// The containerd topic given to a CRI ContainerEventType (runtime.v1.ContainerEventType).
std::string TopicOfCriEvent(int type);

class RuntimeEventWatcher {
 public:
  using OnChange = std::function<void(const std::string& id, const std::string& topic)>;
  // Which stream the watcher reads.
  enum class Source { kNone, kCri, kContainerd };

  // `loop`: the owner's loop, which schedules the subscriptions and must outlive the watcher;
  // `endpoint`: the CRI endpoint ("unix:///run/containerd/containerd.sock"); `ns`: the
  // containerd namespace of the fallback stream. On the loop's thread (or before it runs).
  static Result<std::unique_ptr<RuntimeEventWatcher>> Create(EventLoop& loop,
                                                             const std::string& endpoint,
                                                             std::string ns, OnChange on_change);
  // Stop(); on the loop's thread, or once the loop no longer runs.
  ~RuntimeEventWatcher();
  RuntimeEventWatcher(const RuntimeEventWatcher&) = delete;
  RuntimeEventWatcher& operator=(const RuntimeEventWatcher&) = delete;

  // Submits the first subscription. On the loop's thread (or before it runs), once.
  void Start();
  // Cancels the stream being read and waits for its job to return; nothing is subscribed and no
  // continuation runs afterwards. From any thread; again is harmless.
  void Stop();

  uint64_t events() const { return events_.load(); }                // that changed the runtime
  uint64_t subscriptions() const { return subscriptions_.load(); }  // streams started
  uint64_t cri_subscriptions() const { return cri_subscriptions_.load(); }  // of them CRI's
  uint64_t stream_errors() const { return stream_errors_.load(); }          // streams that ended
  // The stream being read (or, between two, the one last read).
  Source source() const { return source_.load(); }
  // Whether a subscription is on the executor (its stream read, or its end not yet handled on
  // the loop); false while the back-off runs. The loop's thread.
  bool subscribed() const { return subscribed_; }

 private:
  struct Stubs;
  // What one subscription's job reports to its continuation.
  struct Outcome {
    bool any = false;  // an event came
    bool unimplemented = false;
    std::string why;  // the stream's end, for the log
  };
  RuntimeEventWatcher(EventLoop& loop, std::string endpoint, std::string ns, OnChange on_change,
                      std::shared_ptr<grpc::Channel> channel);
  bool stopping() const;
  // The loop's thread: submits one subscription to CRI's stream (`cri`) or containerd's.
  void Subscribe(bool cri);
  // The loop's thread: the continuation of a subscription; schedules the next one.
  void Ended(bool cri, const Outcome& outcome);
  // The executor's thread: one subscription each, until the stream ends. `after`: why the
  // stream before ended (empty: it did not), logged at the first event.
  grpc::Status ReadCri(grpc::ClientContext& context, const std::string& after, bool& any);
  grpc::Status ReadContainerd(grpc::ClientContext& context, const std::string& after, bool& any);
  // Sets `any`; the first event after a stream ended says so in the log.
  static void FirstEvent(const std::string& after, bool& any);

  std::string endpoint_;
  std::string ns_;
  OnChange on_change_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stubs> stubs_;
  mutable std::mutex mu_;
  bool stopping_ = false;
  std::shared_ptr<grpc::ClientContext> context_;  // the stream in progress, to cancel it
  // The loop's thread: the next back-off, why the last stream ended, whether the switch to
  // containerd's stream was logged, whether a subscription is on the executor.
  std::chrono::milliseconds backoff_{100};
  std::string last_error_;
  bool told_fallback_ = false;
  bool subscribed_ = false;
  // The executor's thread: whether reading CRI's stream was logged.
  bool told_cri_ = false;
  std::atomic<Source> source_{Source::kNone};
  std::atomic<uint64_t> events_{0}, subscriptions_{0}, cri_subscriptions_{0}, stream_errors_{0};
  EventLoop::Timer backoff_timer_;  // the next subscription after a stream ended
  // Last: stopped (and its thread joined) before what its jobs and continuations use goes.
  BlockingExecutor executor_;
};

}  // namespace nodelet::cri

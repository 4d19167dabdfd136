// RuntimeEventWatcher: the runtime's stream of changes, for plegd's evented relisting
// (docs/plegd.md, "Runtime events").
//
// A thread subscribes to one of two streams and calls `on_change(id, topic)` for every change it
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
// none (the runtime restarting, the stream cut, plegd starting) were not seen. When a stream
// ends the watcher subscribes again after a back-off (100 ms, doubling to 5 s; reset by an
// event), asking CRI's stream first again (the runtime may have come back as another version);
// the switch on UNIMPLEMENTED has no back-off. What an event means for the relists is plegd's to
// decide (svc-plegd/pleg_engine.h, ChangeOfTopic). `on_change` runs on the watcher's thread and
// must be quick (plegd's: post to its event loop).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lib/common/status.h"

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

  // `endpoint`: the CRI endpoint ("unix:///run/containerd/containerd.sock"); `ns`: the
  // containerd namespace of the fallback stream.
  static Result<std::unique_ptr<RuntimeEventWatcher>> Create(const std::string& endpoint,
                                                             std::string ns, OnChange on_change);
  ~RuntimeEventWatcher();
  RuntimeEventWatcher(const RuntimeEventWatcher&) = delete;
  RuntimeEventWatcher& operator=(const RuntimeEventWatcher&) = delete;

  void Start();
  // Cancels the stream and joins the thread.
  void Stop();

  uint64_t events() const { return events_.load(); }                // that changed the runtime
  uint64_t subscriptions() const { return subscriptions_.load(); }  // streams started
  uint64_t cri_subscriptions() const { return cri_subscriptions_.load(); }  // of them CRI's
  uint64_t stream_errors() const { return stream_errors_.load(); }          // streams that ended
  // The stream being read (or, between two, the one last read).
  Source source() const { return source_.load(); }

 private:
  struct Stubs;
  RuntimeEventWatcher(std::string endpoint, std::string ns, OnChange on_change,
                      std::shared_ptr<grpc::Channel> channel);
  void Loop();
  // One subscription each, until the stream ends; `any`: an event came.
  grpc::Status ReadCri(grpc::ClientContext& context, bool& any);
  grpc::Status ReadContainerd(grpc::ClientContext& context, bool& any);
  // Sets `any`; the first event after a stream ended says so in the log.
  void FirstEvent(bool& any);

  std::string endpoint_;
  std::string ns_;
  OnChange on_change_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stubs> stubs_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<grpc::ClientContext> context_;  // the stream in progress, to cancel it
  std::thread thread_;
  // The watcher's thread only: why the last stream ended; whether CRI's stream was logged.
  std::string last_error_;
  bool told_cri_ = false;
  std::atomic<Source> source_{Source::kNone};
  std::atomic<uint64_t> events_{0}, subscriptions_{0}, cri_subscriptions_{0}, stream_errors_{0};
};

}  // namespace nodelet::cri

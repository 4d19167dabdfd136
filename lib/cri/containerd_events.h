// ContainerdEventWatcher: containerd's own event stream (Events/Subscribe, not CRI), for plegd's
// evented relisting (docs/plegd.md, "Runtime events").
//
// A thread subscribes to the events of one containerd namespace (k8s.io: CRI's) and calls
// `on_change(id, topic)` for every event that can change what a relist sees (topics under
// /tasks/, /containers/ and /sandboxes/: a task created, started, exited, OOM-killed or deleted,
// a container created or deleted; not an exec's process starting, exiting or deleted), with the
// id of the container (or sandbox: a CRI sandbox is a containerd container) it names and the
// event's topic, and `on_change("", "")` each time a subscription starts, since changes made
// while there was none (containerd restarting, the stream cut) were not seen. What an event
// means for the relists is plegd's to decide (svc-plegd/pleg_engine.h, ChangeOfTopic). When the
// stream ends it subscribes again after a back-off (100 ms, doubling to 5 s; reset by an event).
// `on_change` runs on the watcher's thread and must be quick (plegd's: wake the relist loop).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "lib/common/status.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace nodelet::cri {

// Whether an event of `topic` can change what CRI lists.
bool TopicChangesRuntime(const std::string& topic);
// The container (or sandbox) id an event's payload names ("" when it names none); nothing for
// a payload that is not protobuf, or an exec's exit or delete (/tasks/exit or /tasks/delete of
// a process that is not the container's own).
std::optional<std::string> EventContainerId(const std::string& topic, const std::string& payload);

class ContainerdEventWatcher {
 public:
  // `endpoint`: the CRI endpoint ("unix:///run/containerd/containerd.sock").
  static Result<std::unique_ptr<ContainerdEventWatcher>> Create(
      const std::string& endpoint, std::string ns,
      std::function<void(const std::string& id, const std::string& topic)> on_change);
  ~ContainerdEventWatcher();
  ContainerdEventWatcher(const ContainerdEventWatcher&) = delete;
  ContainerdEventWatcher& operator=(const ContainerdEventWatcher&) = delete;

  void Start();
  // Cancels the stream and joins the thread.
  void Stop();

  uint64_t events() const { return events_.load(); }                // that changed the runtime
  uint64_t subscriptions() const { return subscriptions_.load(); }  // streams started
  uint64_t stream_errors() const { return stream_errors_.load(); }  // streams that ended

 private:
  struct Stub;
  ContainerdEventWatcher(std::string ns,
                         std::function<void(const std::string&, const std::string&)> on_change,
                         std::shared_ptr<grpc::Channel> channel);
  void Loop();

  std::string ns_;
  std::function<void(const std::string&, const std::string&)> on_change_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<grpc::ClientContext> context_;  // the stream in progress, to cancel it
  std::thread thread_;
  std::atomic<uint64_t> events_{0}, subscriptions_{0}, stream_errors_{0};
};

}  // namespace nodelet::cri

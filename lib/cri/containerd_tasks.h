// ContainerdTasks: containerd's native task and containers services, for the repairs CRI cannot
// make.
//
// When a StartContainer call is cancelled (its caller died) after containerd created the task
// but before it read the task's pid, containerd's CRI plugin marks the container exited
// (StartError) but keeps the task: its runc init process stays in the container's cgroups, CRI's
// StopContainer skips an exited container, and every RemoveContainer or RemovePodSandbox fails
// with "cannot delete running task <id>" until containerd restarts. ContainerdTasks kills that
// task's processes and deletes the task through containerd's own API (same socket, namespace
// k8s.io), after which CRI removes the container normally.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace nodelet::cri {

// The container id in a CRI removal error caused by such a task ("... cannot delete running
// task <id>: failed precondition"), or nullopt for any other error.
std::optional<std::string> StuckTaskContainerId(const Status& removal_error);

class ContainerdTasks {
 public:
  // `endpoint`: the CRI endpoint ("unix:///run/containerd/containerd.sock"); `ns`: the
  // containerd namespace of CRI's containers; `clock` bounds KillAndDelete's wait for the exit.
  static Result<std::unique_ptr<ContainerdTasks>> Create(
      const std::string& endpoint, const Clock& clock, std::string ns = "k8s.io",
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~ContainerdTasks();

  // SIGKILL to every process of the container's task, then deletes the task (and with it the
  // task's cgroups and bundle). A task that is already gone is OK; `existed` (optional) tells
  // whether there was one.
  Status KillAndDelete(const std::string& container_id, bool* existed = nullptr);

  // Whether containerd holds a container record (its metadata, not CRI's view) of `id`: true,
  // false (NOT_FOUND), or the error of the call. containerd writes the record before it starts a
  // task's shim and deletes it only when the container is removed or its creation failed, so a
  // shim whose id has no record serves nothing containerd will ever reach again (see
  // svc-podworkerd/orphan_shims.h).
  Result<bool> ContainerKnown(const std::string& id);

 private:
  struct Stub;
  ContainerdTasks(const Clock& clock, std::string ns, std::chrono::milliseconds timeout,
                  std::shared_ptr<grpc::Channel> channel);
  const Clock& clock_;
  std::string ns_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace nodelet::cri

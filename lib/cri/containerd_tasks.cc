#include "lib/cri/containerd_tasks.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <utility>

#include "lib/cri/containerd_containers.grpc.pb.h"
#include "lib/cri/containerd_tasks.grpc.pb.h"
#include "lib/cri/grpc_cri_client.h"
#include "lib/cri/grpc_deadline.h"

namespace nodelet::cri {

namespace tasks = ::containerd::services::tasks::v1;
namespace containers = ::containerd::services::containers::v1;

std::optional<std::string> StuckTaskContainerId(const Status& removal_error) {
  if (removal_error.ok()) return std::nullopt;
  static const std::string kMarker = "cannot delete running task ";
  const std::string& m = removal_error.message();
  auto at = m.find(kMarker);
  if (at == std::string::npos) return std::nullopt;
  at += kMarker.size();
  auto end = m.find_first_not_of("0123456789abcdef", at);
  std::string id = m.substr(at, end == std::string::npos ? std::string::npos : end - at);
  if (id.size() != 64) return std::nullopt;  // containerd's ids are 64 hex digits
  return id;
}

struct ContainerdTasks::Stub {
  explicit Stub(const std::shared_ptr<grpc::Channel>& channel)
      : tasks(tasks::Tasks::NewStub(channel)),
        containers(containers::Containers::NewStub(channel)) {}
  std::unique_ptr<tasks::Tasks::Stub> tasks;
  std::unique_ptr<containers::Containers::Stub> containers;
};

Result<std::unique_ptr<ContainerdTasks>> ContainerdTasks::Create(
    const std::string& endpoint, const Clock& clock, std::string ns,
    std::chrono::milliseconds timeout) {
  auto path = ParseCriEndpoint(endpoint);
  if (!path.ok()) return path.status();
  if (ns.empty()) return InvalidArgument("containerd namespace must not be empty");
  auto channel = RuntimeChannel(*path);
  if (channel == nullptr)
    return Internal("endpoint '" + endpoint + "': cannot create a gRPC channel");
  return std::unique_ptr<ContainerdTasks>(
      new ContainerdTasks(clock, std::move(ns), timeout, std::move(channel)));
}

ContainerdTasks::ContainerdTasks(const Clock& clock, std::string ns,
                                 std::chrono::milliseconds timeout,
                                 std::shared_ptr<grpc::Channel> channel)
    : clock_(clock),
      ns_(std::move(ns)),
      timeout_(timeout),
      channel_(std::move(channel)),
      stub_(std::make_unique<Stub>(channel_)) {}

ContainerdTasks::~ContainerdTasks() = default;

Status ContainerdTasks::KillAndDelete(const std::string& container_id, bool* existed) {
  if (existed != nullptr) *existed = true;
  auto context = [this] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(GrpcDeadline(timeout_));
    c->AddMetadata("containerd-namespace", ns_);
    return c;
  };
  {
    tasks::KillRequest request;
    request.set_container_id(container_id);
    request.set_signal(SIGKILL);
    request.set_all(true);
    tasks::KillResponse response;
    auto c = context();
    Status s = GrpcCallStatus("containerd Tasks.Kill of " + container_id,
                              stub_->tasks->Kill(c.get(), request, &response));
    // No task: nothing to do. Any other refusal (processes already gone) still goes on to the
    // delete, whose answer is the one that counts.
    if (s.code() == StatusCode::kNotFound) {
      if (existed != nullptr) *existed = false;
      return Status::Ok();
    }
  }
  tasks::DeleteTaskRequest request;
  request.set_container_id(container_id);
  tasks::DeleteResponse response;
  auto remove = [&] {
    auto c = context();
    return GrpcCallStatus("containerd Tasks.Delete of " + container_id,
                          stub_->tasks->Delete(c.get(), request, &response));
  };
  const MonoTime deadline = clock_.Now() + timeout_;
  Status s = remove();
  if (s.ok() || s.code() == StatusCode::kNotFound) return Status::Ok();
  // The kill is asynchronous: until the shim has reaped the init process the delete is refused
  // ("cannot delete a running process", code UNKNOWN). Tasks.Wait answers when that process has
  // exited (at once if it has), within what is left of the deadline, also while containerd is
  // coming back; then the delete is made once more.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_.Now());
  if (left <= std::chrono::milliseconds(0)) return s;
  {
    tasks::WaitRequest wait;
    wait.set_container_id(container_id);
    tasks::WaitResponse exited;
    grpc::ClientContext c;
    c.set_deadline(GrpcDeadline(left));
    c.set_wait_for_ready(true);
    c.AddMetadata("containerd-namespace", ns_);
    Status w = GrpcCallStatus("containerd Tasks.Wait of " + container_id,
                              stub_->tasks->Wait(&c, wait, &exited));
    if (w.code() == StatusCode::kNotFound) return Status::Ok();  // deleted meanwhile
    if (!w.ok()) return s;  // not exited within the deadline: the delete's refusal stands
  }
  s = remove();
  if (s.ok() || s.code() == StatusCode::kNotFound) return Status::Ok();
  return s;
}

Result<bool> ContainerdTasks::ContainerKnown(const std::string& id) {
  grpc::ClientContext c;
  c.set_deadline(GrpcDeadline(timeout_));
  c.AddMetadata("containerd-namespace", ns_);
  containers::GetContainerRequest request;
  request.set_id(id);
  containers::GetContainerResponse response;
  Status s = GrpcCallStatus("containerd Containers.Get of " + id,
                            stub_->containers->Get(&c, request, &response));
  if (s.ok()) return true;
  if (s.code() == StatusCode::kNotFound) return false;
  return s;
}

}  // namespace nodelet::cri

// nodelet, nodelet-plegd and nodelet-podworkerd: one program under three names. The three
// processes that speak CRI link the same libraries (gRPC, protobuf and the CRI client, the IPC
// and service runtime, the pod model), so one executable lets them share those code pages in
// memory instead of each mapping a copy of its own (docs/bench.md, "Idle cost at 100 pods").
// Which one runs is the name it was started by (the last component of argv[0]); each is still a
// process of its own, with its own flags, restarted alone. statusd and volumed link none of
// that and stay programs of their own.
#include <string_view>

#include "lib/common/heap.h"
#include "supervisor/supervisor.h"
#include "svc-plegd/plegd_service.h"
#include "svc-podworkerd/podworkerd_service.h"

namespace {

int RunSupervisor(int argc, char** argv) {
  nodelet::UseOneMallocArena();  // before any thread (lib/common/heap.h)
  nodelet::supervisor::SupervisorOptions options;
  int rc = nodelet::supervisor::ParseSupervisorOptions(argc, argv, &options);
  if (rc >= 0) return rc;
  nodelet::supervisor::Supervisor supervisor(std::move(options));
  return supervisor.Run();
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view name = argc > 0 && argv[0] != nullptr ? argv[0] : "nodelet";
  if (auto slash = name.rfind('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  if (name == "nodelet-plegd") {
    return nodelet::RunService(nodelet::plegd::MakeSpec(), argc, argv);
  }
  if (name == "nodelet-podworkerd") {
    return nodelet::RunService(nodelet::podworkerd::MakeSpec(), argc, argv);
  }
  return RunSupervisor(argc, argv);
}

// nodelet: parses flags and runs the supervisor (all logic is in supervisor.cc and the
// libraries it uses).
#include "lib/common/heap.h"
#include "supervisor/supervisor.h"

int main(int argc, char** argv) {
  nodelet::UseOneMallocArena();  // before any thread (lib/common/heap.h)
  nodelet::supervisor::SupervisorOptions options;
  int rc = nodelet::supervisor::ParseSupervisorOptions(argc, argv, &options);
  if (rc >= 0) return rc;
  nodelet::supervisor::Supervisor supervisor(std::move(options));
  return supervisor.Run();
}

// What a reload of nodelet's configuration file applies in the supervisor (SIGHUP, `systemctl
// reload nodelet` or `nodelet-supervisor`): the log level, the manifest sources and the eviction
// manager's settings. Every other key that changed needs a restart and is named as such
// (lib/service/config_reload.h; docs/supervisor.md, "Reloading the configuration").
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/pod/eviction.h"
#include "lib/service/config_reload.h"
#include "supervisor/eviction_manager.h"
#include "supervisor/node_status.h"
#include "supervisor/pod_manager.h"
#include "supervisor/supervisor_options.h"

namespace nodelet::supervisor {

// The keys nodelet applies while it runs.
const std::set<std::string>& SupervisorLiveKeys();

struct EvictionReload {
  std::vector<pod::EvictionThreshold> thresholds;  // hard and soft
  std::chrono::milliseconds pressure_transition_period{};
  int64_t max_pod_grace_seconds = 0;
  std::chrono::milliseconds monitoring_period{};
};

// The new values of the keys `plan` applies, parsed and checked as at start; a key the file no
// longer gives goes back to its default. `running` gives the values of the keys that did not
// change (a threshold list is read from all four eviction keys together). `next` is updated to
// the options nodelet runs with once they are applied. An error names the file and the key.
struct SupervisorReload {
  std::optional<std::string> log_level;
  std::optional<PodManagerOptions> sources;  // the manifest_* fields
  std::optional<EvictionReload> eviction;
};
// `app`: nodelet's app (MakeSupervisorFlags), whose options give the defaults.
Result<SupervisorReload> ParseSupervisorReload(const ReloadPlan& plan, const FileSettings& after,
                                               const CLI::App& app,
                                               const SupervisorOptions& running,
                                               SupervisorOptions& next);

// On the supervisor's loop: the manifest sources started again, the eviction manager's and the
// Node's thresholds, the log level. An error (a new source that does not start) applies nothing.
Status ApplySupervisorReload(const SupervisorReload& reload, PodManager& pods,
                             NodeStatusManager& node, EvictionManager& eviction);

}  // namespace nodelet::supervisor

// What the private containerd's sources share (not an API: containerd.h is). containerd.cc
// starts and adopts an instance; containerd_config.cc writes its config; containerd_process.cc
// runs the daemon (spawn, restart, stop, its shims); containerd_network.cc sets up and cleans
// its pod network; containerd_cleanup.cc removes everything it ran.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "tests/testing/pod_network.h"

namespace nodelet::testing::containerd_internal {

// `s` without its leading blanks and its trailing blanks and carriage return.
std::string Trim(const std::string& s);

// A pidfd for `pid` (-1 when it cannot be opened).
int PidfdOpen(pid_t pid);

// The time left until `deadline`, never negative.
std::chrono::milliseconds Remaining(std::chrono::steady_clock::time_point deadline);

// NUL-separated argv of a process, or empty when it is gone.
std::vector<std::string> Cmdline(pid_t pid);

// The last `max_lines` lines of a log, for error messages.
std::string LogTail(const std::string& path, size_t max_lines = 15);

// The executable `name` on PATH (then in the sbin directories); `name` itself when it has a
// slash; "" when there is none.
std::string FindOnPath(const std::string& name);

// Starts containerd over `config_path` in its own session, so a terminal's ^C or the test's
// process group does not reach it; stdout and stderr to `log_path`, its pid into `pid_file`.
// `slot_fd`, when not -1, is handed down as descriptor kSlotFdInContainerd.
Result<pid_t> SpawnContainerd(const std::string& containerd, const std::string& config_path,
                              const std::string& log_path, const std::string& pid_file,
                              int slot_fd);

// The pod network of an instance being started in `dir`: the conf dir DIR/cni/net.d, emptied;
// with `pod_network`, a slot of its own (into `slot` and `network`), its IPAM dir, DIR/cni/slot,
// its FORWARD rule and, last, its conf list.
Status SetUpPodNetwork(const std::string& dir, bool pod_network, PodNetwork& network,
                       CniSlot& slot);
// Undoes SetUpPodNetwork for an instance that could not be started.
void UndoPodNetwork(const std::string& dir, const PodNetwork& network, CniSlot& slot);

}  // namespace nodelet::testing::containerd_internal

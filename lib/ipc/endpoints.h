// Every ZeroMQ endpoint nodelet uses, defined once. All are ipc:// sockets inside the run
// directory (mode 0700), so only the agent's user (or the configured group) can reach them.
#pragma once

#include <string>

namespace nodelet::ipc {

// A socket file name inside the run directory, and its ipc:// endpoint.
struct Endpoint {
  // e.g. "control.sock"
  const char* file;
  // "ipc:///run/nodelet/control.sock" for run_dir "/run/nodelet".
  std::string Uri(const std::string& run_dir) const { return "ipc://" + Path(run_dir); }
  std::string Path(const std::string& run_dir) const { return run_dir + "/" + file; }
};

// Supervisor ROUTER <- each service's DEALER: hello, heartbeats, commands (control.fbs).
inline constexpr Endpoint kControlEndpoint{"control.sock"};
// Supervisor ROUTER <- nodeletctl's DEALER: the operator API (ctl.fbs).
inline constexpr Endpoint kCtlEndpoint{"ctl.sock"};
// plegd PUB -> subscribers: lifecycle events and cache updates, sequenced.
inline constexpr Endpoint kPlegEventsEndpoint{"plegd-events.sock"};
// plegd ROUTER <- DEALER: snapshot requests (Clone pattern) and runtime queries.
inline constexpr Endpoint kPlegSnapshotEndpoint{"plegd-snapshot.sock"};
// statusd ROUTER <- DEALER: the status API.
inline constexpr Endpoint kStatusEndpoint{"statusd.sock"};
// statusd PUB -> subscribers: the watch stream of status changes.
inline constexpr Endpoint kStatusWatchEndpoint{"statusd-watch.sock"};
// volumed ROUTER <- DEALER: desired pods, volume readiness, queries.
inline constexpr Endpoint kVolumeEndpoint{"volumed.sock"};
// volumed PUB -> SUB (podworkerd): VolumesChanged events.
inline constexpr Endpoint kVolumeEventsEndpoint{"volumed-events.sock"};
// podworkerd ROUTER <- DEALER: pod updates from the supervisor's sync loop.
inline constexpr Endpoint kPodWorkerEndpoint{"podworkerd.sock"};

// Directory, under the run directory, holding the per-child NOTIFY_SOCKETs the supervisor binds.
inline constexpr const char* kNotifyDir = "notify";

// File, in the run directory, where the supervisor writes the HOST:PORT its HTTP endpoint
// listens on (absent when it is off), for `nodeletctl top`.
inline constexpr const char* kHttpAddressFile = "http-address";

}  // namespace nodelet::ipc

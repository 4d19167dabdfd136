// Watch events for the status sinks' tests (status_sink_test.cc, sink_worker_test.cc): a pod's
// status changed or removed at a version, and numbered as statusd's watch stream numbers it.
#pragma once

#include <cstdint>
#include <string>

#include "lib/status/pod_status.h"
#include "tests/unit/statusd/status_samples.h"

namespace nodelet::supervisor::sink_testing {

using status::WatchEvent;

inline WatchEvent Updated(const std::string& uid, uint64_t version) {
  status::PodStatusRecord r;
  r.pod = statusd::testing::SamplePod(uid);
  r.status = statusd::testing::RunningStatus("v" + std::to_string(version));
  r.version = version;
  WatchEvent e;
  e.kind = WatchEvent::Kind::kChanged;
  e.record = r;
  return e;
}

inline WatchEvent Removed(const std::string& uid, uint64_t version) {
  WatchEvent e = Updated(uid, version);
  e.kind = WatchEvent::Kind::kRemoved;
  return e;
}

// As the watch stream numbers it: statusd `incarnation`'s message `sequence`.
inline WatchEvent At(WatchEvent e, uint64_t sequence, uint64_t incarnation = 7, bool gap = false) {
  e.sequence = sequence;
  e.incarnation = incarnation;
  e.gap = gap;
  return e;
}

}  // namespace nodelet::supervisor::sink_testing

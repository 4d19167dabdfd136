// The systemd cgroup driver's calls (docs/resources.md, "The systemd driver"): pod, QoS and
// kubepods cgroups are transient slice units that systemd makes, limits and removes, as the
// kubelet's systemd driver has libcontainer do. SystemdSlices speaks org.freedesktop.systemd1
// over sd-bus on the system bus, each call bounded; unit tests use a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::podworkerd {

// What a slice is given. The v1 names (CPUShares, MemoryLimit) or the v2 ones (CPUWeight,
// MemoryMax) are sent as the host's hierarchy needs.
struct SliceLimits {
  uint64_t cpu_shares = 2;
  std::optional<uint64_t> cpu_quota_per_sec_usec;  // CPUQuotaPerSecUSec; none: no CFS quota
  std::optional<uint64_t> memory_bytes;            // none: no limit
  bool cgroup_v2 = false;
  bool operator==(const SliceLimits&) const = default;
};

class SliceManager {
 public:
  virtual ~SliceManager() = default;
  // Starts the transient slice `unit` with `limits` or, when it is already loaded, sets them on
  // it; returns once it is active (its cgroup exists), or an error naming the unit and why.
  virtual Status Ensure(const std::string& unit, const std::string& description,
                        const SliceLimits& limits) = 0;
  // Stops `unit` and returns once it is inactive or gone (systemd then removes its cgroup). OK
  // when it is not loaded.
  virtual Status Stop(const std::string& unit) = 0;
};

// Connects to the system bus ($DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket) and
// checks that systemd answers there. `deadline` bounds each call and each wait for a unit (on
// `clock`, which must outlive the manager).
Result<std::shared_ptr<SliceManager>> OpenSystemdSlices(const Clock& clock,
                                                        std::chrono::milliseconds deadline);

}  // namespace nodelet::podworkerd

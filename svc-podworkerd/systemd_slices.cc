#include "svc-podworkerd/systemd_slices.h"

#include <systemd/sd-bus.h>

#include <cstdlib>
#include <limits>
#include <mutex>

#include "lib/common/sd_bus_util.h"

namespace nodelet::podworkerd {
namespace {

using sdbus::BusError;
using sdbus::MessageRef;

constexpr uint64_t kInfinity = std::numeric_limits<uint64_t>::max();
constexpr const char* kNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit";
constexpr const char* kUnitExists = "org.freedesktop.systemd1.UnitExists";

// cgroup v2's cpu.weight for v1 cpu shares, as the kubelet converts them.
uint64_t SharesToWeight(uint64_t shares) {
  if (shares < 2) shares = 2;
  return 1 + ((shares - 2) * 9999) / 262142;
}

int AppendProperty(sd_bus_message* m, const char* name, const char* type, uint64_t value) {
  if (type[0] == 'b') return sd_bus_message_append(m, "(sv)", name, "b", static_cast<int>(value));
  return sd_bus_message_append(m, "(sv)", name, "t", value);
}

// The resource properties libcontainer gives a slice: accounting on, shares or weight, the CFS
// quota per second and the memory limit (infinity when none).
int AppendLimits(sd_bus_message* m, const SliceLimits& limits) {
  int r = 0;
  for (const char* accounting : {"CPUAccounting", "MemoryAccounting", "TasksAccounting"}) {
    if (r >= 0) r = AppendProperty(m, accounting, "b", 1);
  }
  if (r < 0) return r;
  r = limits.cgroup_v2 ? AppendProperty(m, "CPUWeight", "t", SharesToWeight(limits.cpu_shares))
                       : AppendProperty(m, "CPUShares", "t", limits.cpu_shares);
  if (r >= 0) {
    r = AppendProperty(m, "CPUQuotaPerSecUSec", "t",
                       limits.cpu_quota_per_sec_usec.value_or(kInfinity));
  }
  if (r >= 0) {
    r = AppendProperty(m, limits.cgroup_v2 ? "MemoryMax" : "MemoryLimit", "t",
                       limits.memory_bytes.value_or(kInfinity));
  }
  return r;
}

class SystemdSlices : public SliceManager {
 public:
  SystemdSlices(const Clock& clock, std::chrono::milliseconds deadline)
      : clock_(clock),
        deadline_(deadline),
        timeout_usec_(static_cast<uint64_t>(deadline.count()) * 1000) {}
  ~SystemdSlices() override {
    sd_bus_slot_unref(job_removed_);
    sd_bus_flush_close_unref(bus_);
  }

  Status Ensure(const std::string& unit, const std::string& description,
                const SliceLimits& limits) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status s = Connect(); !s.ok()) return s;
    const std::string what = "Failed to start slice " + unit;
    MessageRef call;
    int r = sd_bus_message_new_method_call(bus_, &call.m, sdbus::kDestination, sdbus::kManagerPath,
                                           sdbus::kManagerInterface, "StartTransientUnit");
    if (r >= 0) r = sd_bus_message_append(call.m, "ss", unit.c_str(), "replace");
    if (r >= 0) r = sd_bus_message_open_container(call.m, 'a', "(sv)");
    if (r >= 0) {
      r = sd_bus_message_append(call.m, "(sv)", "Description", "s", description.c_str());
    }
    // As libcontainer: no implicit dependencies on shutdown.target and the like.
    if (r >= 0) r = AppendProperty(call.m, "DefaultDependencies", "b", 0);
    if (r >= 0) r = AppendLimits(call.m, limits);
    if (r >= 0) r = sd_bus_message_close_container(call.m);
    if (r >= 0) r = sd_bus_message_append(call.m, "a(sa(sv))", 0);
    if (r < 0) return BusError(what, r, nullptr);
    MessageRef reply;
    std::string error;
    Status started = sdbus::SendCall(bus_, call.m, timeout_usec_, what, &reply.m, &error);
    if (!started.ok()) {
      if (error != kUnitExists) return started;
      // Already there (made earlier, or by a podworkerd before this one): its limits are set
      // again, and it is started if it had stopped.
      if (Status s = SetLimits(unit, limits); !s.ok()) return s;
      MessageRef job;
      if (Status s =
              sdbus::CallSystemd(bus_, timeout_usec_, sdbus::kManagerPath, sdbus::kManagerInterface,
                                 "StartUnit", what, &job.m, nullptr, "ss", unit.c_str(), "replace");
          !s.ok()) {
        return s;
      }
    }
    return WaitUntil(unit, true);
  }

  Status Stop(const std::string& unit) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status s = Connect(); !s.ok()) return s;
    MessageRef job;
    std::string error;
    Status s = sdbus::CallSystemd(
        bus_, timeout_usec_, sdbus::kManagerPath, sdbus::kManagerInterface, "StopUnit",
        "Failed to stop slice " + unit, &job.m, &error, "ss", unit.c_str(), "replace");
    if (!s.ok()) return error == kNoSuchUnit ? Status::Ok() : s;
    return WaitUntil(unit, false);
  }

  // Connects (again, when the bus went away) and subscribes to systemd's JobRemoved signal, so
  // that WaitUntil wakes when a job on a slice ends instead of polling.
  Status Connect() {
    if (bus_ != nullptr && sd_bus_is_open(bus_) > 0) return Status::Ok();
    sd_bus_slot_unref(job_removed_);
    job_removed_ = nullptr;
    sd_bus_flush_close_unref(bus_);
    bus_ = nullptr;
    int r = sd_bus_open_system(&bus_);
    if (r < 0) return BusError("Failed to connect to the system bus", r, nullptr);
    r = sd_bus_match_signal(
        bus_, &job_removed_, sdbus::kDestination, sdbus::kManagerPath, sdbus::kManagerInterface,
        "JobRemoved", [](sd_bus_message*, void*, sd_bus_error*) { return 0; }, nullptr);
    if (r < 0) return BusError("Failed to watch systemd's JobRemoved", r, nullptr);
    // Without Subscribe systemd does not emit job signals at all.
    MessageRef reply;
    return sdbus::CallSystemd(bus_, timeout_usec_, sdbus::kManagerPath, sdbus::kManagerInterface,
                              "Subscribe", "systemd does not answer on the system bus", &reply.m,
                              nullptr, nullptr);
  }

 private:
  Status SetLimits(const std::string& unit, const SliceLimits& limits) {
    const std::string what = "Failed to set the limits of slice " + unit;
    MessageRef call;
    int r = sd_bus_message_new_method_call(bus_, &call.m, sdbus::kDestination, sdbus::kManagerPath,
                                           sdbus::kManagerInterface, "SetUnitProperties");
    if (r >= 0) r = sd_bus_message_append(call.m, "sb", unit.c_str(), 1);
    if (r >= 0) r = sd_bus_message_open_container(call.m, 'a', "(sv)");
    if (r >= 0) r = AppendLimits(call.m, limits);
    if (r >= 0) r = sd_bus_message_close_container(call.m);
    if (r < 0) return BusError(what, r, nullptr);
    MessageRef reply;
    return sdbus::SendCall(bus_, call.m, timeout_usec_, what, &reply.m);
  }

  // The unit's ActiveState; "" when it is not loaded.
  Result<std::string> ActiveState(const std::string& unit) {
    MessageRef reply;
    std::string error;
    Status s = sdbus::CallSystemd(bus_, timeout_usec_, sdbus::kManagerPath,
                                  sdbus::kManagerInterface, "GetUnit", "Failed to find " + unit,
                                  &reply.m, &error, "s", unit.c_str());
    if (!s.ok()) {
      if (error == kNoSuchUnit) return std::string();
      return s;
    }
    const char* path = nullptr;
    int r = sd_bus_message_read(reply.m, "o", &path);
    if (r < 0) return BusError("Failed to read GetUnit's reply for " + unit, r, nullptr);
    sdbus::ErrorRef err;
    char* state = nullptr;
    r = sd_bus_get_property_string(bus_, sdbus::kDestination, path, sdbus::kUnitInterface,
                                   "ActiveState", &err.e, &state);
    if (r < 0) return BusError("Failed to read the state of " + unit, r, &err.e);
    std::string out = state;
    free(state);
    return out;
  }

  // Waits for the unit to be active (`active`) or inactive/gone, within the deadline.
  Status WaitUntil(const std::string& unit, bool active) {
    const MonoTime deadline = clock_.Now() + deadline_;
    std::string last;
    while (true) {
      auto state = ActiveState(unit);
      if (!state.ok()) return state.status();
      last = *state;
      if (active && last == "active") return Status::Ok();
      if (!active && (last.empty() || last == "inactive")) return Status::Ok();
      if (!active && last == "failed") {
        // A failed transient unit stays loaded until its failure is cleared.
        MessageRef reply;
        return sdbus::CallSystemd(
            bus_, timeout_usec_, sdbus::kManagerPath, sdbus::kManagerInterface, "ResetFailedUnit",
            "Failed to reset-failed " + unit, &reply.m, nullptr, "s", unit.c_str());
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock_.Now());
      if (left.count() <= 0) break;
      // Until the next message from the bus (a JobRemoved, a property change) or the deadline;
      // what is queued is dispatched first, so the wait never sleeps past a signal.
      int r = 0;
      while ((r = sd_bus_process(bus_, nullptr)) > 0) {
      }
      if (r < 0) return BusError("Failed to read from the system bus", r, nullptr);
      r = sd_bus_wait(bus_, static_cast<uint64_t>(left.count()));
      if (r < 0) return BusError("Failed to wait on the system bus", r, nullptr);
    }
    return DeadlineExceeded("slice " + unit + " is " + (last.empty() ? "not loaded" : last) +
                            ", not " + (active ? "active" : "stopped") + ", after " +
                            std::to_string(deadline_.count()) + " ms");
  }

  const Clock& clock_;
  std::mutex mu_;
  sd_bus* bus_ = nullptr;
  sd_bus_slot* job_removed_ = nullptr;
  std::chrono::milliseconds deadline_;
  uint64_t timeout_usec_;
};

}  // namespace

Result<std::shared_ptr<SliceManager>> OpenSystemdSlices(const Clock& clock,
                                                        std::chrono::milliseconds deadline) {
  auto slices = std::make_shared<SystemdSlices>(clock, deadline);
  // systemd must answer there now, not at the first pod.
  if (Status s = slices->Connect(); !s.ok()) return s;
  return std::shared_ptr<SliceManager>(slices);
}

}  // namespace nodelet::podworkerd

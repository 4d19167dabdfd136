#include "supervisor/systemd_bus.h"

#include <poll.h>
#include <systemd/sd-bus.h>

#include <cstring>
#include <map>

#include "lib/common/sd_bus_util.h"

namespace nodelet::supervisor {
namespace {

using sdbus::BusError;
using sdbus::kDestination;
using sdbus::kManagerInterface;
using sdbus::kManagerPath;
using sdbus::kUnitInterface;
using sdbus::MessageRef;
constexpr const char* kServiceInterface = "org.freedesktop.systemd1.Service";

class SystemdBusImpl : public SystemdBus {
 public:
  SystemdBusImpl(sd_bus* bus, std::chrono::milliseconds timeout)
      : bus_(bus), timeout_usec_(static_cast<uint64_t>(timeout.count()) * 1000) {}
  ~SystemdBusImpl() override {
    for (sd_bus_slot* slot : slots_) sd_bus_slot_unref(slot);
    sd_bus_flush_close_unref(bus_);
  }

  Status Watch(const std::vector<std::string>& units, Listener* listener) override {
    listener_ = listener;
    sd_bus_slot* slot = nullptr;
    int r = sd_bus_match_signal(bus_, &slot, kDestination, kManagerPath, kManagerInterface,
                                "JobRemoved", &SystemdBusImpl::OnJobRemoved, this);
    if (r < 0) return BusError("Failed to watch systemd's JobRemoved", r, nullptr);
    slots_.push_back(slot);
    for (const auto& unit : units) {
      auto path = LoadUnit(unit);
      if (!path.ok()) return path.status();
      paths_[*path] = unit;
      slot = nullptr;
      r = sd_bus_match_signal(bus_, &slot, kDestination, path->c_str(),
                              "org.freedesktop.DBus.Properties", "PropertiesChanged",
                              &SystemdBusImpl::OnPropertiesChanged, this);
      if (r < 0) return BusError("Failed to watch " + unit, r, nullptr);
      slots_.push_back(slot);
    }
    // Without Subscribe systemd does not emit unit and job signals at all.
    MessageRef reply;
    return Call(kManagerPath, kManagerInterface, "Subscribe", "Failed to subscribe to systemd",
                &reply.m, nullptr);
  }

  Result<UnitStatus> GetUnitStatus(const std::string& unit) override {
    auto path = LoadUnit(unit);
    if (!path.ok()) return path.status();
    UnitStatus st;
    if (Status s = GetAll(*path, kUnitInterface, unit, &st); !s.ok()) return s;
    // A unit file that does not exist has no Service interface.
    if (st.load_state == "not-found") return st;
    if (Status s = GetAll(*path, kServiceInterface, unit, &st); !s.ok()) return s;
    return st;
  }

  Result<std::string> StartUnit(const std::string& unit) override { return Job("StartUnit", unit); }
  Result<std::string> StopUnit(const std::string& unit) override { return Job("StopUnit", unit); }
  Result<std::string> RestartUnit(const std::string& unit) override {
    return Job("RestartUnit", unit);
  }

  Status ResetFailedUnit(const std::string& unit) override {
    MessageRef reply;
    return Call(kManagerPath, kManagerInterface, "ResetFailedUnit",
                "Failed to reset-failed " + unit, &reply.m, "s", unit.c_str());
  }

  zmq::pollitem_t PollItem() override {
    int events = sd_bus_get_events(bus_);
    short zevents = 0;
    if (events > 0 && (events & POLLIN)) zevents |= ZMQ_POLLIN;
    if (events > 0 && (events & POLLOUT)) zevents |= ZMQ_POLLOUT;
    return {nullptr, sd_bus_get_fd(bus_), zevents, 0};
  }

  void Process() override {
    // Bounded: a flood of signals never starves the rest of the loop.
    for (int i = 0; i < 256; ++i) {
      if (sd_bus_process(bus_, nullptr) <= 0) break;
    }
  }

 private:
  // Calls a method on systemd with the given arguments (one or none), bounded by the timeout.
  template <typename... Args>
  Status Call(const char* path, const char* interface, const char* member, const std::string& what,
              sd_bus_message** reply, const char* types, Args... args) {
    return sdbus::CallSystemd(bus_, timeout_usec_, path, interface, member, what, reply, nullptr,
                              types, args...);
  }

  Result<std::string> LoadUnit(const std::string& unit) {
    MessageRef reply;
    if (Status s = Call(kManagerPath, kManagerInterface, "LoadUnit", "Failed to load " + unit,
                        &reply.m, "s", unit.c_str());
        !s.ok()) {
      return s;
    }
    const char* path = nullptr;
    int r = sd_bus_message_read(reply.m, "o", &path);
    if (r < 0) return BusError("Failed to read LoadUnit's reply for " + unit, r, nullptr);
    return std::string(path);
  }

  Result<std::string> Job(const char* method, const std::string& unit) {
    MessageRef reply;
    if (Status s = Call(kManagerPath, kManagerInterface, method,
                        std::string("Failed to ") + method + " " + unit, &reply.m, "ss",
                        unit.c_str(), "replace");
        !s.ok()) {
      return s;
    }
    const char* job = nullptr;
    int r = sd_bus_message_read(reply.m, "o", &job);
    if (r < 0) return BusError(std::string("Failed to read ") + method + "'s reply", r, nullptr);
    return std::string(job);
  }

  // Properties.GetAll on one interface; picks the properties UnitStatus holds, skips the rest.
  Status GetAll(const std::string& path, const char* interface, const std::string& unit,
                UnitStatus* st) {
    MessageRef reply;
    const std::string what = std::string("Failed to read ") + interface + " of " + unit;
    MessageRef call;
    int r = sd_bus_message_new_method_call(bus_, &call.m, kDestination, path.c_str(),
                                           "org.freedesktop.DBus.Properties", "GetAll");
    if (r >= 0) r = sd_bus_message_append(call.m, "s", interface);
    if (r < 0) return BusError(what, r, nullptr);
    if (Status s = sdbus::SendCall(bus_, call.m, timeout_usec_, what, &reply.m); !s.ok()) return s;

    std::map<std::string, std::string*> strings = {{"LoadState", &st->load_state},
                                                   {"ActiveState", &st->active_state},
                                                   {"SubState", &st->sub_state},
                                                   {"Result", &st->result}};
    r = sd_bus_message_enter_container(reply.m, 'a', "{sv}");
    while (r >= 0 && (r = sd_bus_message_enter_container(reply.m, 'e', "sv")) > 0) {
      const char* key = nullptr;
      r = sd_bus_message_read(reply.m, "s", &key);
      if (r < 0) break;
      const std::string k = key;
      if (auto it = strings.find(k); it != strings.end()) {
        const char* v = nullptr;
        r = sd_bus_message_read(reply.m, "v", "s", &v);
        if (r >= 0) *it->second = v;
      } else if (k == "MainPID") {
        uint32_t v = 0;
        r = sd_bus_message_read(reply.m, "v", "u", &v);
        st->main_pid = static_cast<pid_t>(v);
      } else if (k == "NRestarts") {
        r = sd_bus_message_read(reply.m, "v", "u", &st->n_restarts);
      } else if (k == "ActiveEnterTimestampMonotonic") {
        r = sd_bus_message_read(reply.m, "v", "t", &st->active_enter_monotonic_usec);
      } else if (k == "StateChangeTimestamp") {
        r = sd_bus_message_read(reply.m, "v", "t", &st->state_change_usec);
      } else if (k == "ExecMainCode") {
        r = sd_bus_message_read(reply.m, "v", "i", &st->exec_main_code);
      } else if (k == "ExecMainStatus") {
        r = sd_bus_message_read(reply.m, "v", "i", &st->exec_main_status);
      } else {
        r = sd_bus_message_skip(reply.m, "v");
      }
      if (r < 0) break;
      r = sd_bus_message_exit_container(reply.m);
    }
    if (r >= 0) r = sd_bus_message_exit_container(reply.m);
    if (r < 0) return BusError(what + " (bad reply)", r, nullptr);
    return Status::Ok();
  }

  static int OnJobRemoved(sd_bus_message* m, void* userdata, sd_bus_error*) {
    auto* self = static_cast<SystemdBusImpl*>(userdata);
    uint32_t id = 0;
    const char* job = nullptr;
    const char* unit = nullptr;
    const char* result = nullptr;
    // A signal we cannot read is dropped; the periodic refresh catches up.
    if (sd_bus_message_read(m, "uoss", &id, &job, &unit, &result) < 0) return 0;
    if (self->listener_ != nullptr) self->listener_->OnJobRemoved(job, unit, result);
    return 0;
  }

  static int OnPropertiesChanged(sd_bus_message* m, void* userdata, sd_bus_error*) {
    auto* self = static_cast<SystemdBusImpl*>(userdata);
    const char* path = sd_bus_message_get_path(m);
    if (path == nullptr || self->listener_ == nullptr) return 0;
    auto it = self->paths_.find(path);
    if (it != self->paths_.end()) self->listener_->OnUnitChanged(it->second);
    return 0;
  }

  sd_bus* bus_;
  uint64_t timeout_usec_;
  Listener* listener_ = nullptr;
  std::vector<sd_bus_slot*> slots_;
  std::map<std::string, std::string> paths_;  // unit object path -> unit name
};

}  // namespace

Result<std::unique_ptr<SystemdBus>> OpenSystemdBus(std::chrono::milliseconds call_timeout) {
  sd_bus* bus = nullptr;
  int r = sd_bus_open_system(&bus);
  if (r < 0) return BusError("Failed to connect to the system bus", r, nullptr);
  return std::unique_ptr<SystemdBus>(std::make_unique<SystemdBusImpl>(bus, call_timeout));
}

}  // namespace nodelet::supervisor

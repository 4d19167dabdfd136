// The plumbing of a method call to systemd over sd-bus, shared by the supervisor's systemd mode
// (supervisor/systemd_bus.h) and podworkerd's systemd cgroup driver (svc-podworkerd/
// systemd_slices.h): owners that free a message and an error, an error as a Status, and a
// bounded call. Header-only.
#pragma once

#include <systemd/sd-bus.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "lib/common/status.h"

namespace nodelet::sdbus {

inline constexpr const char* kDestination = "org.freedesktop.systemd1";
inline constexpr const char* kManagerPath = "/org/freedesktop/systemd1";
inline constexpr const char* kManagerInterface = "org.freedesktop.systemd1.Manager";
inline constexpr const char* kUnitInterface = "org.freedesktop.systemd1.Unit";

// Frees an sd_bus_message / sd_bus_error when it goes out of scope.
struct MessageRef {
  sd_bus_message* m = nullptr;
  MessageRef() = default;
  MessageRef(const MessageRef&) = delete;
  MessageRef& operator=(const MessageRef&) = delete;
  ~MessageRef() { sd_bus_message_unref(m); }
};
struct ErrorRef {
  sd_bus_error e = SD_BUS_ERROR_NULL;
  ErrorRef() = default;
  ErrorRef(const ErrorRef&) = delete;
  ErrorRef& operator=(const ErrorRef&) = delete;
  ~ErrorRef() { sd_bus_error_free(&e); }
};

// "WHAT: the bus error's message" (or strerror of r).
inline Status BusError(const std::string& what, int r, const sd_bus_error* error) {
  std::string why = (error != nullptr && sd_bus_error_is_set(error) && error->message != nullptr)
                        ? error->message
                        : std::strerror(r < 0 ? -r : r);
  return Unavailable(what + ": " + why);
}

// Sends `call` and waits up to `timeout_usec` for the reply. `error` (optional) keeps the bus
// error's name for callers that act on it (for example org.freedesktop.systemd1.NoSuchUnit).
inline Status SendCall(sd_bus* bus, sd_bus_message* call, uint64_t timeout_usec,
                       const std::string& what, sd_bus_message** reply,
                       std::string* error_name = nullptr) {
  ErrorRef error;
  int r = sd_bus_call(bus, call, timeout_usec, &error.e, reply);
  if (r < 0) {
    if (error_name != nullptr && error.e.name != nullptr) *error_name = error.e.name;
    return BusError(what, r, &error.e);
  }
  return Status::Ok();
}

// Calls `member` of `interface` on systemd's object `path` with the given arguments (described
// by `types`, or none when it is null).
template <typename... Args>
Status CallSystemd(sd_bus* bus, uint64_t timeout_usec, const char* path, const char* interface,
                   const char* member, const std::string& what, sd_bus_message** reply,
                   std::string* error_name, const char* types, Args... args) {
  MessageRef call;
  int r = sd_bus_message_new_method_call(bus, &call.m, kDestination, path, interface, member);
  if (r < 0) return BusError(what, r, nullptr);
  if (types != nullptr) {
    r = sd_bus_message_append(call.m, types, args...);
    if (r < 0) return BusError(what, r, nullptr);
  }
  return SendCall(bus, call.m, timeout_usec, what, reply, error_name);
}

}  // namespace nodelet::sdbus

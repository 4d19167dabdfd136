// sd_notify(3) for nodelet's binaries: READY=1, STATUS=, WATCHDOG=1, STOPPING=1. Works the
// same under systemd (Type=notify) and under the supervisor, which gives each child its own
// NOTIFY_SOCKET. Nothing is sent when NOTIFY_SOCKET is unset. Sending never blocks: a datagram
// the receiver's queue has no room for is dropped (libsystemd's sd_notify blocks instead, and a
// notify socket nobody reads stalled the supervisor's loop).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "lib/common/clock.h"

namespace nodelet {

class SystemdNotifier {
 public:
  virtual ~SystemdNotifier() = default;
  // Sends one datagram with the given newline-separated KEY=VALUE assignments, without
  // waiting. False when it was not sent (no NOTIFY_SOCKET, or its queue is full).
  virtual bool Notify(const std::string& state) = 0;
};

// Sends to $NOTIFY_SOCKET (a path, or "@name" in the abstract namespace) with MSG_DONTWAIT.
class SystemdNotifierImpl : public SystemdNotifier {
 public:
  bool Notify(const std::string& state) override;
};

// The same for an explicit socket address (as $NOTIFY_SOCKET would give it).
bool NotifySocketSend(const std::string& address, const std::string& state);

// The watchdog interval systemd (or the supervisor) asked for through WATCHDOG_USEC (and
// WATCHDOG_PID, when set, naming this process); nullopt when no watchdog is wanted.
std::optional<std::chrono::microseconds> WatchdogInterval();

// Sends WATCHDOG=1 at half the watchdog interval, and only when Tick() is called: call it from
// the main loop, so a stuck loop stops the pings and the watchdog fires.
class WatchdogPinger {
 public:
  WatchdogPinger(SystemdNotifier& notifier, const Clock& clock,
                 std::optional<std::chrono::microseconds> interval);
  // Pings when half the interval has passed since the last ping.
  void Tick();
  // The latest time by which Tick() should be called again (for poll timeouts); far future
  // when there is no watchdog.
  MonoTime NextDue() const;
  bool enabled() const { return interval_.has_value(); }

 private:
  SystemdNotifier& notifier_;
  const Clock& clock_;
  std::optional<std::chrono::microseconds> interval_;
  MonoTime last_{};
};

}  // namespace nodelet

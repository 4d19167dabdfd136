#include "lib/common/systemd_notify.h"

#include <systemd/sd-daemon.h>

namespace nodelet {

void SystemdNotifierImpl::Notify(const std::string& state) {
  // Errors are ignored on purpose: a missing or full notify socket must never stop the service.
  sd_notify(0, state.c_str());
}

std::optional<std::chrono::microseconds> WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec);
}

WatchdogPinger::WatchdogPinger(SystemdNotifier& notifier, const Clock& clock,
                               std::optional<std::chrono::microseconds> interval)
    : notifier_(notifier), clock_(clock), interval_(interval) {}

void WatchdogPinger::Tick() {
  if (!interval_) return;
  auto now = clock_.Now();
  if (last_ != MonoTime{} && now - last_ < *interval_ / 2) return;
  notifier_.Notify("WATCHDOG=1");
  last_ = now;
}

MonoTime WatchdogPinger::NextDue() const {
  if (!interval_) return MonoTime::max();
  if (last_ == MonoTime{}) return clock_.Now();
  return last_ + std::chrono::duration_cast<Duration>(*interval_ / 2);
}

}  // namespace nodelet

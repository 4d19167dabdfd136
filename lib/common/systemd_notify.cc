#include "lib/common/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "lib/common/unique_fd.h"

namespace nodelet {

bool NotifySocketSend(const std::string& address, const std::string& state) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (address.size() < 2 || address.size() >= sizeof addr.sun_path) return false;
  if (address[0] != '/' && address[0] != '@') return false;  // vsock and others: not supported
  std::memcpy(addr.sun_path, address.data(), address.size());
  if (address[0] == '@') addr.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size() +
                                               (address[0] == '/' ? 1 : 0));
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  // The kernel adds our credentials when the receiver asked for them (SO_PASSCRED), as systemd
  // and the supervisor do.
  ssize_t n = sendto(fd.get(), state.data(), state.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&addr), len);
  return n == static_cast<ssize_t>(state.size());
}

bool SystemdNotifierImpl::Notify(const std::string& state) {
  // Errors are ignored on purpose: a missing or full notify socket must never stop the service.
  const char* address = std::getenv("NOTIFY_SOCKET");
  if (address == nullptr) return false;
  return NotifySocketSend(address, state);
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

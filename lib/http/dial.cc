// lib/http's TCP dial and socket waits (dial.h).
#include "lib/http/dial.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

namespace nodelet::http {
namespace {

// A failed dial: `message` is `context` and `reason`, `dial_reason` the reason alone.
UniqueFd FailDial(Error& error, ErrorKind kind, const std::string& context,
                  const std::string& reason, bool unresolved = false) {
  error.kind = kind;
  error.message = context + reason;
  error.dial_reason = reason;
  error.unresolved = unresolved;
  return UniqueFd();
}

}  // namespace

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

WaitResult WaitFd(const Clock& clock, int fd, short events, MonoTime deadline,
                  std::chrono::milliseconds io_timeout) {
  const bool idle_limit = io_timeout.count() > 0;
  const MonoTime idle_end = clock.Now() + io_timeout;
  for (;;) {
    const MonoTime now = clock.Now();
    if (now >= deadline) return WaitResult::kDeadline;
    if (idle_limit && now >= idle_end) return WaitResult::kTimeout;
    const MonoTime end = idle_limit ? std::min(idle_end, deadline) : deadline;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count();
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 1 << 30)));
    if (rc > 0) return WaitResult::kReady;
    // rc == 0: re-check the clock (poll may wake early).
    if (rc < 0 && errno != EINTR) return WaitResult::kFailed;
  }
}

UniqueFd DialTcp(const Clock& clock, const std::string& host, int port, MonoTime deadline,
                 std::chrono::milliseconds io_timeout, Error& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      rc != 0 || found == nullptr) {
    return FailDial(error, ErrorKind::kConnect, "dial tcp: lookup " + host + ": ", gai_strerror(rc),
                    /*unresolved=*/true);
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
  const std::string where = "dial tcp " + HostPort(host, port) + ": ";
  // Each address in turn; a wait that runs out ends the attempt, any other failure moves on to
  // the next address.
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = std::strerror(errno);
        continue;
      }
      switch (WaitFd(clock, fd.get(), POLLOUT, deadline, io_timeout)) {
        case WaitResult::kReady:
          break;
        case WaitResult::kTimeout:
          return FailDial(error, ErrorKind::kTimeout, where, "i/o timeout");
        case WaitResult::kDeadline:
          return FailDial(error, ErrorKind::kDeadline, where, "i/o timeout");
        case WaitResult::kFailed:
          return FailDial(error, ErrorKind::kIo, "", std::string("poll: ") + std::strerror(errno));
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
    }
    return fd;
  }
  return FailDial(error, ErrorKind::kConnect, where, why);
}

}  // namespace nodelet::http

// HttpProbe: one httpGet probe attempt, as the kubelet's prober makes it (pkg/probe/http), on a
// plain socket with one deadline for the whole attempt: connect, request, headers and body,
// redirects included. A container's server is hostile input: it may hang, trickle a byte at a
// time or stream without end, so
//   - nothing waits past the deadline (`timeoutSeconds`), however the bytes arrive;
//   - at most kMaxProbeBodyBytes of body are read (the kubelet's 10 KiB; the verdict is the
//     status code) and at most kMaxProbeHeaderBytes of status line and headers;
//   - redirects follow the kubelet's rules: one to the same host name is followed (at most
//     kMaxProbeRedirects), one to another host ends the probe as a success with a warning
//     ("Probe terminated redirects"), as the kubelet does unless told to follow non-local ones.
// 200-399 is a success, anything else a failure. Every connection says `Connection: close`.
// HTTPS (`tls`) runs TLS (1.2 or later, OpenSSL) on the same non-blocking socket under the same
// deadline, without checking the server's certificate, as the kubelet's prober does; redirects
// may switch between http and https on the same host. The transport (socket, TLS, caps,
// deadline) is lib/http's http::Exchange; what is here is the prober's rules.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/clock.h"

namespace nodelet::podworkerd {

inline constexpr size_t kMaxProbeBodyBytes = 10 * 1024;
inline constexpr size_t kMaxProbeHeaderBytes = 64 * 1024;
inline constexpr int kMaxProbeRedirects = 10;

struct HttpProbeRequest {
  std::string host;  // an IP or a name (resolved once per request)
  int port = 80;
  std::string path = "/";
  std::vector<std::pair<std::string, std::string>> headers;  // a "Host" entry overrides Host
  std::chrono::milliseconds timeout{1000};                   // the whole attempt
  bool tls = false;  // HTTPS: TLS without a certificate check (the kubelet's prober)
};

struct HttpProbeResult {
  bool success = false;
  bool warning = false;   // success, but with a message (a redirect to another host)
  int status = 0;         // the final response's status code; 0 when none arrived
  std::string message;    // why it failed, or the warning
  size_t body_bytes = 0;  // body bytes read from the final response (≤ kMaxProbeBodyBytes)
  int redirects = 0;      // redirects followed
};

// `clock` measures the attempt's deadline (request.timeout).
HttpProbeResult DoHttpProbe(const Clock& clock, const HttpProbeRequest& request);

}  // namespace nodelet::podworkerd

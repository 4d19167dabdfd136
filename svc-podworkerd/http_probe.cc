#include "svc-podworkerd/http_probe.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "lib/http/http_client.h"

namespace nodelet::podworkerd {
namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Target {
  std::string host;
  int port = 80;
  std::string path = "/";
  bool tls = false;  // https
};

struct Response {
  int status = 0;
  std::string location;
  size_t body_bytes = 0;
};

// Host names compare as the kubelet's URL.Hostname() does: without port and brackets, ignoring
// case.
std::string HostName(std::string host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return Lower(host.substr(1, close == std::string::npos ? std::string::npos : close - 1));
  }
  return Lower(host);
}

// Where a Location header points, relative to `base`. nullopt with `error` set when it cannot
// be followed (bad URL, a scheme other than http and https).
std::optional<Target> Resolve(const Target& base, const std::string& location, std::string& error) {
  Target t = base;
  std::string rest;
  bool absolute = false;
  const std::string lower = Lower(location);
  if (lower.rfind("http://", 0) == 0) {
    rest = location.substr(7);
    t.tls = false;
    absolute = true;
  } else if (lower.rfind("https://", 0) == 0) {
    rest = location.substr(8);
    t.tls = true;
    absolute = true;
  } else if (location.rfind("//", 0) == 0) {
    rest = location.substr(2);
  } else if (!location.empty() && location.front() == '/') {
    t.path = location;
    return t;
  } else if (location.find(':') != std::string::npos && location.find(':') < location.find('/')) {
    error = "redirect to an unsupported URL: " + location;
    return std::nullopt;
  } else {
    // Relative to the current path's directory.
    std::string dir = base.path.substr(0, base.path.rfind('/') + 1);
    t.path = (dir.empty() ? "/" : dir) + location;
    return t;
  }
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  std::string port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) {
      error = "redirect to a bad URL: " + location;
      return std::nullopt;
    }
    t.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':')
      port = authority.substr(close + 2);
  } else {
    auto colon = authority.rfind(':');
    t.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
        std::stoi(port) == 0 || std::stoi(port) > 65535) {
      error = "redirect to a bad port: " + location;
      return std::nullopt;
    }
    t.port = std::stoi(port);
  } else if (absolute || location.rfind("//", 0) == 0) {
    t.port = t.tls ? 443 : 80;
  }
  if (t.host.empty()) {
    error = "redirect to a URL without a host: " + location;
    return std::nullopt;
  }
  return t;
}

// One request/response on a fresh connection (lib/http): at most kMaxProbeBodyBytes of body
// are read, the rest is left unread. Returns false with `error` set when no complete answer
// arrived in time.
bool Exchange(const Clock& clock, MonoTime deadline, const Target& target,
              const HttpProbeRequest& req, Response& out, std::string& error) {
  http::Limits limits;
  limits.deadline = deadline;
  limits.max_header_bytes = kMaxProbeHeaderBytes;
  http::Exchange exchange(clock, limits);
  http::Request request;
  request.host = target.host;
  request.port = target.port;
  request.tls.enabled = target.tls;  // no certificate check, as the kubelet's prober
  request.path = target.path;
  request.headers = req.headers;
  request.user_agent = "kube-probe/nodelet";
  http::ResponseHead head;
  if (!exchange.Start(request, head) ||
      !exchange.ReadBody(kMaxProbeBodyBytes, [](const char*, size_t) { return true; })) {
    error = exchange.error().message;
    return false;
  }
  out.status = head.status;
  out.location = head.Header("Location");
  out.body_bytes = exchange.body_bytes();
  return true;
}

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

}  // namespace

HttpProbeResult DoHttpProbe(const Clock& clock, const HttpProbeRequest& request) {
  const MonoTime deadline = clock.Now() + request.timeout;
  HttpProbeResult result;
  Target target{request.host, request.port, request.path.empty() ? "/" : request.path, request.tls};
  if (target.path.front() != '/') target.path = "/" + target.path;
  if (target.path.find_first_of("\r\n ") != std::string::npos) {
    result.message = "probe path contains whitespace or a line break";
    return result;
  }
  const std::string first_host = HostName(target.host);
  for (int attempt = 0;; ++attempt) {
    Response response;
    std::string error;
    if (!Exchange(clock, deadline, target, request, response, error)) {
      result.message = std::string("Get \"") + (target.tls ? "https://" : "http://") +
                       http::HostPort(target.host, target.port) + target.path + "\": " + error;
      return result;
    }
    result.status = response.status;
    result.body_bytes = response.body_bytes;
    if (IsRedirect(response.status) && !response.location.empty()) {
      auto next = Resolve(target, response.location, error);
      if (!next) {
        result.message = error;
        return result;
      }
      if (HostName(next->host) != first_host) {
        // Another host: the kubelet does not follow it and reports the redirect itself.
        result.success = true;
        result.warning = true;
        result.message =
            "Probe terminated redirects, Response status: " + std::to_string(response.status);
        return result;
      }
      if (attempt + 1 >= kMaxProbeRedirects) {
        result.message = "stopped after " + std::to_string(kMaxProbeRedirects) + " redirects";
        return result;
      }
      if (next->path.find_first_of("\r\n ") != std::string::npos) {
        result.message = "redirect to a path with whitespace";
        return result;
      }
      ++result.redirects;
      target = *next;
      continue;
    }
    if (response.status >= 200 && response.status < 400) {
      result.success = true;
      if (response.status >= 300) {
        result.warning = true;
        result.message =
            "Probe terminated redirects, Response status: " + std::to_string(response.status);
      }
      return result;
    }
    result.message = "HTTP probe failed with statuscode: " + std::to_string(response.status);
    return result;
  }
}

}  // namespace nodelet::podworkerd

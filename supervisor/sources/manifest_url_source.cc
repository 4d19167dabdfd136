// The `--manifest-url` source: the URL and header flags, one fetch and its response under the
// limits, and the fetches' schedule on the loop (manifest_url_source.h).
#include "supervisor/sources/manifest_url_source.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <utility>

#include "lib/common/check.h"
#include "lib/http/http_client.h"

namespace nodelet::supervisor {

Result<UrlParts> ParseHttpUrl(const std::string& url) {
  std::string scheme;
  for (const char* s : {"http://", "https://"}) {
    if (url.rfind(s, 0) == 0) scheme = s;
  }
  if (scheme.empty()) {
    return InvalidArgument("manifest URL '" + url + "' must start with http:// or https://");
  }
  if (url.find_first_of(" \r\n\t") != std::string::npos) {
    return InvalidArgument("manifest URL '" + url + "' contains whitespace");
  }
  auto end = url.find_first_of("/?#", scheme.size());
  UrlParts p;
  p.tls = scheme == "https://";
  p.scheme_host_port = url.substr(0, end);
  p.authority = p.scheme_host_port.substr(scheme.size());
  if (p.authority.empty()) {
    return InvalidArgument("manifest URL '" + url + "' has no host");
  }
  if (p.authority.find('@') != std::string::npos) {
    return InvalidArgument("manifest URL '" + url +
                           "' holds credentials: send them with --manifest-url-header");
  }
  std::string port;
  if (p.authority.front() == '[') {
    auto close = p.authority.find(']');
    if (close == std::string::npos) return InvalidArgument("manifest URL '" + url + "': bad host");
    p.host = p.authority.substr(1, close - 1);
    port = p.authority.substr(close + 1);
  } else {
    auto colon = p.authority.find(':');
    p.host = p.authority.substr(0, colon);
    if (colon != std::string::npos) port = p.authority.substr(colon);
  }
  if (p.host.empty()) return InvalidArgument("manifest URL '" + url + "' has no host");
  p.port = p.tls ? 443 : 80;
  if (!port.empty()) {
    if (port.size() < 2 || port.size() > 6 || port[0] != ':' ||
        !std::all_of(port.begin() + 1, port.end(), ::isdigit) || std::stoi(port.substr(1)) == 0 ||
        std::stoi(port.substr(1)) > 65535) {
      return InvalidArgument("manifest URL '" + url + "' has a bad port");
    }
    p.port = std::stoi(port.substr(1));
  }
  // The path and query as the request line carries them: no fragment, bytes outside printable
  // ASCII %-encoded.
  std::string rest = end == std::string::npos ? "" : url.substr(end, url.find('#', end) - end);
  if (rest.empty() || rest.front() != '/') rest = "/" + rest;
  static const char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : rest) {
    if (c < 0x21 || c > 0x7e) {
      p.path += {'%', kHex[c >> 4], kHex[c & 15]};
    } else {
      p.path += static_cast<char>(c);
    }
  }
  return p;
}

Result<std::pair<std::string, std::string>> ParseHeaderFlag(const std::string& flag) {
  auto colon = flag.find(':');
  if (colon == std::string::npos) {
    return InvalidArgument("--manifest-url-header '" + flag + "': want 'Name: value'");
  }
  auto trim = [](std::string v) {
    size_t b = v.find_first_not_of(" \t");
    size_t e = v.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
  };
  std::string name = trim(flag.substr(0, colon));
  std::string value = trim(flag.substr(colon + 1));
  static const std::string kTokenPunct = "!#$%&'*+-.^_`|~";
  if (name.empty()) return InvalidArgument("--manifest-url-header '" + flag + "': empty name");
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && kTokenPunct.find(c) == std::string::npos) {
      return InvalidArgument("--manifest-url-header '" + flag + "': bad character in the name");
    }
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') {
      return InvalidArgument("--manifest-url-header '" + flag + "': line break in the value");
    }
  }
  return std::make_pair(name, value);
}

ManifestUrlSource::ManifestUrlSource(EventLoop& loop, std::string url, UrlSourceOptions options)
    : clock_(loop.clock()),
      url_(std::move(url)),
      options_(std::move(options)),
      timer_(loop.AddTimer([this] { Fetch(); })),
      executor_(loop, 1) {}

ManifestUrlSource::~ManifestUrlSource() { Stop(); }

Status ManifestUrlSource::Start() {
  NODELET_CHECK(options_.on_snapshot) << "ManifestUrlSource::Start needs on_snapshot";
  auto parts = ParseHttpUrl(url_);
  if (!parts.ok()) return parts.status();
  parts_ = *parts;
  Fetch();
  return Status::Ok();
}

void ManifestUrlSource::RequestStop() {
  stopping_ = true;
  timer_.Cancel();
}

void ManifestUrlSource::Stop() {
  RequestStop();
  executor_.Stop();
}

std::optional<SourceSnapshot> ManifestUrlSource::Poll() {
  return std::exchange(ready_, std::nullopt);
}

void ManifestUrlSource::Fetch() {
  if (stopping_ || running_) return;
  running_ = true;
  // Filled on the executor's thread, read on the loop's once the fetch has returned.
  auto snapshot = std::make_shared<SourceSnapshot>();
  executor_.Submit(
      [this, snapshot] {
        auto result = FetchOnce();
        if (result.ok()) {
          *snapshot = std::move(result).value();
          return;
        }
        // Nothing read: the pod manager keeps the pods served last and reports why.
        snapshot->source = "http";
        snapshot->failure =
            SourceFailure{failure_reason_.empty() ? "fetch" : failure_reason_, result.status()};
      },
      [this, snapshot] {
        running_ = false;
        if (stopping_) return;
        ready_ = std::move(*snapshot);
        // The period counts from the end of this fetch.
        timer_.ArmAfter(options_.period);
        options_.on_snapshot();
      });
}

Result<SourceSnapshot> ManifestUrlSource::FetchOnce() {
  if (parts_.scheme_host_port.empty()) {
    auto parts = ParseHttpUrl(url_);
    if (!parts.ok()) return parts.status();
    parts_ = *parts;
  }
  ++fetches_;
  failure_reason_.clear();
  http::Request request;
  request.host = parts_.host;
  request.port = parts_.port;
  request.path = parts_.path;
  request.host_header = parts_.authority;
  // Verified always (chain and host name); the system's CAs unless a bundle is given.
  request.tls = {parts_.tls, /*verify=*/true, options_.ca_file};
  request.headers = options_.headers;
  if (!etag_.empty()) request.headers.emplace_back("If-None-Match", etag_);
  // The body goes to the parser as it arrives, under the size limit: no compressed answers.
  if (std::none_of(request.headers.begin(), request.headers.end(), [](const auto& h) {
        return h.first.size() == 15 && strncasecmp(h.first.c_str(), "Accept-Encoding", 15) == 0;
      })) {
    request.headers.emplace_back("Accept-Encoding", "identity");
  }
  const MonoTime started = clock_.Now();
  const MonoTime deadline = started + options_.deadline;
  http::Exchange exchange(clock_, {deadline, options_.timeout});
  UrlResponse response(url_, options_.max_bytes, deadline);
  http::ResponseHead head;
  // Only a 200's body is worth reading: any other status fails the fetch whatever it carries.
  const bool answered =
      exchange.Start(request, head) &&
      (head.status != 200 || exchange.ReadBody(SIZE_MAX, [&](const char* data, size_t len) {
        return response.OnData(data, len, clock_.Now());
      }));
  const http::Error& error = exchange.error();
  if (!answered && error.kind == http::ErrorKind::kDeadline) response.OnDeadline();
  auto outcome = answered ? response.Finish("", head.status, head.Header("ETag"), have_last_)
                          : response.Finish(error.message, 0, "", have_last_);
  if (!outcome.ok()) {
    switch (outcome.status().code()) {
      case StatusCode::kResourceExhausted:
        failure_reason_ = "too_large";
        break;
      case StatusCode::kDeadlineExceeded:
        failure_reason_ = "timeout";
        break;
      case StatusCode::kFailedPrecondition:
        failure_reason_ = "http_status";
        break;
      default:
        failure_reason_ = error.kind == http::ErrorKind::kTls       ? "tls"
                          : error.kind == http::ErrorKind::kTimeout ? "timeout"
                                                                    : "fetch";
    }
    return outcome.status();
  }
  if (outcome->kind == UrlResponse::Outcome::Kind::kNotModified) {
    ++not_modified_;
    return last_;
  }
  etag_ = std::move(outcome->etag);
  last_ = std::move(outcome->snapshot);
  have_last_ = true;
  return last_;
}

bool UrlResponse::OnData(const char* data, size_t len, Time now) {
  if (now > deadline_) {
    too_late_ = true;
    return false;
  }
  if (len > max_bytes_ - body_.size()) {
    too_large_ = true;
    return false;  // abort the transfer: nothing more is read
  }
  body_.append(data, len);
  return true;
}

Result<UrlResponse::Outcome> UrlResponse::Finish(const std::string& transport_error, int status,
                                                 std::string etag, bool have_previous) {
  // The limits first: an aborted transfer also shows up as a transport error.
  if (too_large_) {
    return ResourceExhausted("manifest URL '" + url_ + "' returned more than " +
                             std::to_string(max_bytes_) + " bytes");
  }
  if (too_late_) {
    return DeadlineExceeded("manifest URL '" + url_ + "' did not finish its answer in time");
  }
  if (!transport_error.empty()) {
    return Unavailable("Failed to fetch manifest URL '" + url_ + "': " + transport_error);
  }
  Outcome out;
  if (status == 304 && have_previous) {
    out.kind = Outcome::Kind::kNotModified;
    return out;
  }
  if (status != 200) {
    return FailedPrecondition("manifest URL '" + url_ + "' answered HTTP " +
                              std::to_string(status));
  }
  out.etag = std::move(etag);
  out.snapshot.source = "http";
  // An empty body means "no pods" (the kubelet treats it the same way).
  if (!body_.empty()) {
    out.snapshot.manifests.push_back(ManifestFile{url_, std::move(body_), Status::Ok(), 0});
  }
  return out;
}

}  // namespace nodelet::supervisor

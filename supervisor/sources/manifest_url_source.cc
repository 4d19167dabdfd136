#include "supervisor/sources/manifest_url_source.h"

#include <httplib.h>

#include <cctype>

#include "lib/common/check.h"

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
  auto slash = url.find('/', scheme.size());
  UrlParts p;
  p.scheme_host_port = url.substr(0, slash);
  p.path = slash == std::string::npos ? "/" : url.substr(slash);
  if (p.scheme_host_port.size() == scheme.size()) {
    return InvalidArgument("manifest URL '" + url + "' has no host");
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

ManifestUrlSource::ManifestUrlSource(const Clock& clock, std::string url, UrlSourceOptions options)
    : clock_(clock), url_(std::move(url)), options_(std::move(options)) {}

ManifestUrlSource::~ManifestUrlSource() { Stop(); }

Status ManifestUrlSource::Start() {
  NODELET_CHECK(options_.on_snapshot) << "ManifestUrlSource::Start needs on_snapshot";
  auto parts = ParseHttpUrl(url_);
  if (!parts.ok()) return parts.status();
  parts_ = *parts;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ManifestUrlSource::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<SourceSnapshot> ManifestUrlSource::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  auto out = std::move(ready_);
  ready_.reset();
  return out;
}

Result<SourceSnapshot> ManifestUrlSource::FetchOnce() {
  if (parts_.scheme_host_port.empty()) {
    auto parts = ParseHttpUrl(url_);
    if (!parts.ok()) return parts.status();
    parts_ = *parts;
  }
  ++fetches_;
  failure_reason_.clear();
  httplib::Client client(parts_.scheme_host_port);
  if (parts_.scheme_host_port.rfind("https://", 0) == 0) {
    // Verified always (chain and host name); the system's CAs unless a bundle is given.
    client.enable_server_certificate_verification(true);
    if (!options_.ca_file.empty()) client.set_ca_cert_path(options_.ca_file.c_str());
  }
  auto secs = [](std::chrono::milliseconds ms) {
    return std::make_pair(static_cast<time_t>(ms.count() / 1000),
                          static_cast<time_t>((ms.count() % 1000) * 1000));
  };
  auto [cs, cus] = secs(options_.timeout);
  client.set_connection_timeout(cs, cus);
  client.set_read_timeout(cs, cus);
  client.set_write_timeout(cs, cus);
  httplib::Headers headers;
  for (const auto& [name, value] : options_.headers) headers.emplace(name, value);
  if (!etag_.empty()) headers.emplace("If-None-Match", etag_);
  const MonoTime started = clock_.Now();
  UrlResponse response(url_, options_.max_bytes, started + options_.deadline);
  auto res = client.Get(
      parts_.path.c_str(), headers, [](const httplib::Response&) { return true; },
      [&](const char* data, size_t len) { return response.OnData(data, len, clock_.Now()); });
  auto outcome = res ? response.Finish("", res->status, res->get_header_value("ETag"), have_last_)
                     : response.Finish(httplib::to_string(res.error()), 0, "", have_last_);
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
        if (res) {
          failure_reason_ = "fetch";
        } else if (res.error() == httplib::Error::SSLConnection ||
                   res.error() == httplib::Error::SSLServerVerification ||
                   res.error() == httplib::Error::SSLLoadingCerts) {
          failure_reason_ = "tls";
        } else if (res.error() == httplib::Error::ConnectionTimeout ||
                   (res.error() == httplib::Error::Read &&
                    clock_.Now() - started >= options_.timeout)) {
          // httplib says Read for a read that timed out: told apart by the time it took.
          failure_reason_ = "timeout";
        } else {
          failure_reason_ = "fetch";
        }
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
    out.snapshot.manifests.push_back(ManifestFile{url_, std::move(body_), Status::Ok()});
  }
  return out;
}

void ManifestUrlSource::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    auto result = FetchOnce();
    lock.lock();
    if (result.ok()) {
      ready_ = std::move(result).value();
    } else {
      // Nothing read: the pod manager keeps the pods served last and reports why.
      SourceSnapshot snap;
      snap.source = "http";
      snap.failure =
          SourceFailure{failure_reason_.empty() ? "fetch" : failure_reason_, result.status()};
      ready_ = std::move(snap);
    }
    lock.unlock();
    options_.on_snapshot();
    lock.lock();
    cv_.wait_for(lock, options_.period, [this] { return stopping_; });
  }
}

}  // namespace nodelet::supervisor

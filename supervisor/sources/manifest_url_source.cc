#include "supervisor/sources/manifest_url_source.h"

#include <httplib.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace nodelet::supervisor {

Result<UrlParts> ParseHttpUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return InvalidArgument("manifest URL '" + url + "' must start with http://");
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

ManifestUrlSource::ManifestUrlSource(std::string url, UrlSourceOptions options)
    : url_(std::move(url)), options_(options) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

ManifestUrlSource::~ManifestUrlSource() {
  Stop();
  if (event_fd_ >= 0) close(event_fd_);
}

Status ManifestUrlSource::Start() {
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
  uint64_t n = 0;
  (void)!read(event_fd_, &n, sizeof n);
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
  httplib::Client client(parts_.scheme_host_port);
  auto secs = [](std::chrono::milliseconds ms) {
    return std::make_pair(static_cast<time_t>(ms.count() / 1000),
                          static_cast<time_t>((ms.count() % 1000) * 1000));
  };
  auto [cs, cus] = secs(options_.timeout);
  client.set_connection_timeout(cs, cus);
  client.set_read_timeout(cs, cus);
  client.set_write_timeout(cs, cus);
  httplib::Headers headers;
  if (!etag_.empty()) headers.emplace("If-None-Match", etag_);
  std::string body;
  bool too_large = false;
  auto res = client.Get(
      parts_.path.c_str(), headers, [](const httplib::Response&) { return true; },
      [&](const char* data, size_t len) {
        if (body.size() + len > options_.max_bytes) {
          too_large = true;
          return false;  // abort the transfer
        }
        body.append(data, len);
        return true;
      });
  if (too_large) {
    return ResourceExhausted("manifest URL '" + url_ + "' returned more than " +
                             std::to_string(options_.max_bytes) + " bytes");
  }
  if (!res) {
    return Unavailable("Failed to fetch manifest URL '" + url_ + "': " +
                       httplib::to_string(res.error()));
  }
  if (res->status == 304 && have_last_) {
    ++not_modified_;
    return last_;
  }
  if (res->status != 200) {
    return Unavailable("manifest URL '" + url_ + "' answered HTTP " + std::to_string(res->status));
  }
  etag_ = res->get_header_value("ETag");
  SourceSnapshot snap;
  snap.source = "http";
  // An empty body means "no pods" (the kubelet treats it the same way).
  if (!body.empty()) snap.manifests.push_back(ManifestFile{url_, std::move(body), Status::Ok()});
  last_ = snap;
  have_last_ = true;
  return snap;
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
      // Keep the previous pods; report the error as a manifest error so it is logged once by
      // the pod config and shown to the operator.
      SourceSnapshot snap = have_last_ ? last_ : SourceSnapshot{"http", {}};
      snap.manifests.push_back(ManifestFile{url_, "", result.status()});
      ready_ = std::move(snap);
    }
    uint64_t one = 1;
    (void)!write(event_fd_, &one, sizeof one);
    cv_.wait_for(lock, options_.period, [this] { return stopping_; });
  }
}

}  // namespace nodelet::supervisor

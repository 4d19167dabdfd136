// ManifestUrlSource: the `--manifest-url` source. It fetches the URL at start and then one poll
// period (20 s, the kubelet's default) after each fetch ends, timed by a timer on the supervisor's
// loop; the fetch runs on the source's own one-thread executor, with If-None-Match so an unchanged
// document costs a 304, a connect and read deadline plus a deadline for the whole fetch so a
// hanging or trickling server only delays this source, and a size limit so a server that returns
// gigabytes is cut off (the transfer is aborted) with a clear error; the size limit is the
// parser's (pod::kMaxManifestBytes), so a body that arrives whole is never refused for its size
// later. https is verified against the system's CAs or `ca_file` (host name included); `headers`
// are sent with every request. The client is lib/http's (one connection per fetch); a redirect is
// not followed (it fails as its status), and only a 200's body is read. A fetch that fails in any
// way yields a snapshot with `failure` (and no manifests): the pods the URL served last stay.
// Each fetch's snapshot is kept on the loop's thread for Poll, and `on_snapshot` says so.
// UrlResponse is the network-free half of one fetch (body collection under the limits, the status
// code, the snapshot), fuzzed by fuzz/url_response.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/pod/manifest_parser.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "supervisor/sources/manifest_source.h"

namespace nodelet::supervisor {

struct UrlParts {
  std::string scheme_host_port;  // "http://127.0.0.1:8080" or "https://host"
  std::string path;              // "/pods.yaml", with the query; bytes outside ASCII %-encoded
  std::string authority;         // "127.0.0.1:8080" or "host": what Host says
  std::string host;              // "127.0.0.1", "host", "::1" (no brackets)
  int port = 80;                 // the URL's, or the scheme's (80, 443)
  bool tls = false;              // https
};

// Splits an http:// or https:// URL (no user:password@; --manifest-url-header carries
// credentials).
Result<UrlParts> ParseHttpUrl(const std::string& url);

// Parses one `--manifest-url-header` value, "Name: value". The name must be an HTTP token and
// neither part may hold a line break (no header injection).
Result<std::pair<std::string, std::string>> ParseHeaderFlag(const std::string& flag);

struct UrlSourceOptions {
  std::chrono::milliseconds period{20000};
  std::chrono::milliseconds timeout{10000};   // connect, and each read
  std::chrono::milliseconds deadline{30000};  // the whole fetch (a trickling server)
  size_t max_bytes = pod::kMaxManifestBytes;
  std::string ca_file;  // https: PEM bundle to verify the server with; empty: the system's CAs
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request
  // Called on the loop's thread after each fetch, when Poll() has its snapshot. Required by
  // Start(); FetchOnce() does without.
  std::function<void()> on_snapshot;
};

// The response half of one fetch: the body is collected piece by piece under the size limit and
// the fetch deadline, then Finish turns the outcome into a snapshot or an error naming the URL.
class UrlResponse {
 public:
  using Time = MonoTime;
  UrlResponse(std::string url, size_t max_bytes, Time deadline)
      : url_(std::move(url)), max_bytes_(max_bytes), deadline_(deadline) {}
  // One piece of the body arriving at `now`; false to abort the transfer (too large, too late).
  bool OnData(const char* data, size_t len, Time now);
  // The deadline passed while the transfer waited for the server (no piece arrived to say so).
  void OnDeadline() { too_late_ = true; }
  // The transfer ended: `transport_error` is empty when a response arrived, else why not (then
  // `status` is ignored). `have_previous`: a 304 may answer a conditional request.
  struct Outcome {
    enum class Kind { kSnapshot, kNotModified } kind = Kind::kSnapshot;
    SourceSnapshot snapshot;  // kSnapshot only
    std::string etag;         // kSnapshot only: the validator for the next request
  };
  Result<Outcome> Finish(const std::string& transport_error, int status, std::string etag,
                         bool have_previous);
  size_t body_bytes() const { return body_.size(); }

 private:
  std::string url_;
  size_t max_bytes_;
  Time deadline_;
  std::string body_;
  bool too_large_ = false;
  bool too_late_ = false;
};

// Start, Stop, RequestStop, Poll and fetch_running are called on the loop's thread.
class ManifestUrlSource {
 public:
  // The loop's clock measures the period and each fetch's deadline.
  ManifestUrlSource(EventLoop& loop, std::string url, UrlSourceOptions options);
  ~ManifestUrlSource();
  ManifestUrlSource(const ManifestUrlSource&) = delete;
  ManifestUrlSource& operator=(const ManifestUrlSource&) = delete;

  // Starts the first fetch; `on_snapshot` must be set.
  Status Start();
  // RequestStop, then waits for a fetch in flight (it ends within its deadline).
  void Stop();
  // No fetch starts and no snapshot is delivered afterwards; a fetch in flight is not waited
  // for (Stop or the destructor waits for it).
  void RequestStop();
  // The newest snapshot not yet taken, if any.
  std::optional<SourceSnapshot> Poll();
  // A fetch is on the executor (its snapshot not yet kept).
  bool fetch_running() const { return running_; }
  uint64_t fetches() const { return fetches_.load(); }
  uint64_t not_modified() const { return not_modified_.load(); }

  // One fetch, on the calling thread: the snapshot, or an error when the URL could not be read
  // (in which case the previous snapshot stays in force). Exposed for tests.
  Result<SourceSnapshot> FetchOnce();
  // The metric label of the last FetchOnce's failure (SourceFailure::reason).
  const std::string& last_failure_reason() const { return failure_reason_; }

 private:
  // Submits one fetch to the executor; its snapshot comes back to the loop, which arms the timer
  // for the next one.
  void Fetch();

  const Clock& clock_;
  std::string url_;
  UrlParts parts_;
  UrlSourceOptions options_;
  std::string etag_;
  SourceSnapshot last_;
  bool have_last_ = false;
  std::string failure_reason_;
  std::atomic<uint64_t> fetches_{0}, not_modified_{0};

  // The loop's state.
  bool stopping_ = false;
  bool running_ = false;
  std::optional<SourceSnapshot> ready_;
  EventLoop::Timer timer_;
  // Last: stopped (its fetch waited for) before the members the fetch uses go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::supervisor

// The manifest directory and URL sources. The URL source's fetches are checked on a loop: the
// one-shot fetches (ETag, limits, deadlines, TLS, failure labels) on the real clock, the schedule
// (first fetch at start, the next a period after each, a failed fetch tried again a period later,
// a stop with a fetch in flight) on a FakeClock that moves only when a test advances it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "lib/service/event_loop.h"
#include "supervisor/sources/manifest_dir_source.h"
#include "supervisor/sources/manifest_url_source.h"
#include "tests/fakes/fake_clock.h"
#include "tests/testing/harness.h"
#include "tests/testing/httplib_listen.h"

namespace nodelet::supervisor {
namespace {

using nodelet::testing::FakeClock;
using nodelet::testing::TempDir;
using namespace std::chrono_literals;

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path) << content;
}

bool WaitReadable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) > 0;
}

// Turns `loop` (a fetch's snapshot comes back through it) until `done()` holds, at most 5 s of
// real time; a fake clock does not move meanwhile.
bool RunUntil(EventLoop& loop, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (!loop.RunOnce(10ms).ok()) return false;
  }
  return true;
}

TEST(ManifestDirSourceTest, FirstPollReadsEverythingAndSkipsDotFiles) {
  TempDir dir;
  WriteFile(dir.Sub("a.yaml"), "kind: Pod");
  WriteFile(dir.Sub(".a.yaml.swp"), "junk");
  mkdir(dir.Sub("sub").c_str(), 0755);
  FakeClock clock;
  ManifestDirSource src(dir.path(), clock);
  ASSERT_TRUE(src.Start().ok());
  auto snap = src.Poll();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->source, "file");
  ASSERT_EQ(snap->manifests.size(), 1u);
  EXPECT_EQ(snap->manifests[0].origin, dir.Sub("a.yaml"));
  EXPECT_EQ(snap->manifests[0].content, "kind: Pod");
  // Nothing changed, resync not due: no snapshot.
  EXPECT_FALSE(src.Poll());
}

TEST(ManifestDirSourceTest, InotifyWakesOnNewFileAndRemoval) {
  TempDir dir;
  FakeClock clock;
  ManifestDirSource src(dir.path(), clock);
  ASSERT_TRUE(src.Start().ok());
  ASSERT_TRUE(src.Poll());
  WriteFile(dir.Sub("b.yaml"), "kind: Pod");
  ASSERT_TRUE(WaitReadable(src.fd(), 5000));
  auto snap = src.Poll();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->manifests.size(), 1u);
  unlink(dir.Sub("b.yaml").c_str());
  ASSERT_TRUE(WaitReadable(src.fd(), 5000));
  snap = src.Poll();
  ASSERT_TRUE(snap);
  EXPECT_TRUE(snap->manifests.empty());
}

TEST(ManifestDirSourceTest, PeriodicResyncAndOversizedFileError) {
  TempDir dir;
  WriteFile(dir.Sub("big.yaml"), std::string(2000, 'x'));
  FakeClock clock;
  ManifestDirSource src(dir.path(), clock, std::chrono::seconds(20), /*max_file_bytes=*/1000);
  ASSERT_TRUE(src.Start().ok());
  auto snap = src.Poll();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->manifests.size(), 1u);
  EXPECT_FALSE(snap->manifests[0].error.ok());
  EXPECT_NE(snap->manifests[0].error.message().find("big.yaml"), std::string::npos);
  EXPECT_FALSE(src.Poll());
  clock.Advance(std::chrono::seconds(21));
  EXPECT_TRUE(src.Poll());
}

TEST(ManifestDirSourceTest, MissingDirectoryIsEmptyThenPickedUp) {
  TempDir dir;
  FakeClock clock;
  ManifestDirSource src(dir.Sub("later"), clock);
  ASSERT_TRUE(src.Start().ok());
  auto snap = src.Poll();
  ASSERT_TRUE(snap);
  EXPECT_TRUE(snap->manifests.empty());
  mkdir(dir.Sub("later").c_str(), 0755);
  WriteFile(dir.Sub("later/p.yaml"), "kind: Pod");
  clock.Advance(std::chrono::seconds(21));
  snap = src.Poll();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->manifests.size(), 1u);
}

class UrlServer {
 public:
  UrlServer() {
    server_.Get("/pods", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      ++hits_;
      if (hang_) cv_.wait(lock, [this] { return !hang_; });
      if (req.get_header_value("If-None-Match") == etag_) {
        res.status = 304;
        return;
      }
      res.set_header("ETag", etag_);
      res.set_content(body_, "application/yaml");
    });
    // Gigabytes: an endless chunked body; counts what it managed to write.
    server_.Get("/endless", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/yaml", [this](size_t, httplib::DataSink& sink) {
        static const std::string chunk(64 * 1024, '#');
        if (streamed_.load() > (uint64_t{4} << 30) || !sink.write(chunk.data(), chunk.size())) {
          return false;  // the client went away (or 4 GiB, a runaway test)
        }
        streamed_ += chunk.size();
        return true;
      });
    });
    // A trickle: one byte every 20 ms, forever (each read is quick, the whole never ends).
    server_.Get("/trickle", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/yaml", [this](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stopping_; })) {
          return false;
        }
        return sink.write("#", 1);
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = nodelet::testing::ListenInThread(server_);
  }
  ~UrlServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    Release();
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path = "/pods") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  uint64_t streamed() const { return streamed_.load(); }
  int hits() {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
  }
  void Set(std::string body, std::string etag) {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = std::move(body);
    etag_ = std::move(etag);
  }
  void Hang() {
    std::lock_guard<std::mutex> lock(mu_);
    hang_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hang_ = false;
    cv_.notify_all();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string body_ = "kind: Pod";
  std::string etag_ = "\"v1\"";
  bool hang_ = false;
  bool stopping_ = false;
  int hits_ = 0;
  std::atomic<uint64_t> streamed_{0};
};

TEST(ManifestUrlSourceTest, FetchesAndHonoursETag) {
  UrlServer server;
  EventLoop loop(RealClock::Get());
  ManifestUrlSource src(loop, server.url(), {});
  auto first = src.FetchOnce();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->manifests.size(), 1u);
  EXPECT_EQ(first->manifests[0].content, "kind: Pod");
  auto second = src.FetchOnce();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(src.not_modified(), 1u);
  EXPECT_EQ(second->manifests[0].content, "kind: Pod");
  server.Set("kind: Pod\nmetadata: {name: b}", "\"v2\"");
  auto third = src.FetchOnce();
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->manifests[0].content.find("name: b"), std::string::npos);
}

TEST(ManifestUrlSourceTest, OversizedBodyIsCutOff) {
  UrlServer server;
  server.Set(std::string(100000, 'x'), "\"big\"");
  UrlSourceOptions opts;
  opts.max_bytes = 1000;
  EventLoop loop(RealClock::Get());
  ManifestUrlSource src(loop, server.url(), opts);
  auto r = src.FetchOnce();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("more than 1000 bytes"), std::string::npos);
}

TEST(ManifestUrlSourceTest, HangingServerHitsTheDeadline) {
  UrlServer server;
  server.Hang();
  UrlSourceOptions opts;
  opts.timeout = std::chrono::milliseconds(300);
  EventLoop loop(RealClock::Get());
  ManifestUrlSource src(loop, server.url(), opts);
  auto r = src.FetchOnce();
  server.Release();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

// A server that would send gigabytes: the transfer is aborted at the limit (the server sees the
// connection go away), memory holds the limit and no more, and the error names URL and limit.
TEST(ManifestUrlSourceTest, GigabyteAnswerIsAbortedEarly) {
  UrlServer server;
  UrlSourceOptions opts;
  opts.max_bytes = 1 << 20;
  EventLoop loop(RealClock::Get());
  ManifestUrlSource src(loop, server.url("/endless"), opts);
  auto r = src.FetchOnce();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "manifest URL '" + server.url("/endless") + "' returned more than 1048576 bytes");
  // Socket buffers hold a few MiB at most; without the abort this would be gigabytes.
  EXPECT_LT(server.streamed(), uint64_t{64} << 20);
}

// A server that answers one byte at a time, each well within the read timeout: the deadline
// for the whole fetch ends it.
TEST(ManifestUrlSourceTest, TricklingServerHitsTheFetchDeadline) {
  UrlServer server;
  UrlSourceOptions opts;
  opts.timeout = std::chrono::milliseconds(2000);
  opts.deadline = std::chrono::milliseconds(500);
  EventLoop loop(RealClock::Get());
  ManifestUrlSource src(loop, server.url("/trickle"), opts);
  const auto start = std::chrono::steady_clock::now();
  auto r = src.FetchOnce();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("did not finish its answer in time"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The URL source on a loop driven by the test, on a FakeClock: snapshots are counted as the
// source says they are ready.
class UrlScheduleTest : public ::testing::Test {
 protected:
  std::unique_ptr<ManifestUrlSource> Make(const std::string& url, UrlSourceOptions opts) {
    opts.on_snapshot = [this] { ++snapshots_; };
    return std::make_unique<ManifestUrlSource>(loop_, url, std::move(opts));
  }
  // Turns the loop until the source has no fetch in flight and `snapshots` have come.
  bool Settle(ManifestUrlSource& src, int snapshots) {
    return RunUntil(loop_, [&] { return !src.fetch_running() && snapshots_ >= snapshots; });
  }

  UrlServer server_;
  FakeClock clock_;
  EventLoop loop_{clock_};
  int snapshots_ = 0;
};

// Nothing else is disturbed: after a good fetch, a URL turned hostile (gigabytes) leaves the
// previous pods in force, with the error alongside for the operator.
TEST_F(UrlScheduleTest, HostileAnswerKeepsThePreviousSnapshot) {
  UrlSourceOptions opts;
  opts.max_bytes = 4096;
  opts.period = std::chrono::milliseconds(20);
  auto src = Make(server_.url(), opts);
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(Settle(*src, 1));
  auto good = src->Poll();
  ASSERT_TRUE(good && good->manifests.size() == 1u && good->manifests[0].error.ok());
  server_.Set(std::string(1 << 20, '#'), "\"big\"");
  clock_.Advance(opts.period);
  ASSERT_TRUE(Settle(*src, 2));
  std::optional<SourceSnapshot> bad;
  if (auto snap = src->Poll(); snap && snap->failure) bad = std::move(snap);
  src->Stop();
  ASSERT_TRUE(bad) << "no snapshot carried the failure";
  // Nothing read: no manifests (the pod manager keeps what the URL served last), and why.
  EXPECT_TRUE(bad->manifests.empty());
  EXPECT_EQ(bad->failure->reason, "too_large");
  EXPECT_EQ(bad->failure->error.code(), StatusCode::kResourceExhausted);
}

// Each way a fetch fails has its metric label.
TEST(ManifestUrlSourceTest, FailureReasons) {
  UrlServer server;
  UrlSourceOptions opts;
  opts.timeout = std::chrono::milliseconds(300);
  EventLoop loop(RealClock::Get());
  {
    ManifestUrlSource src(loop, server.url("/nosuch"), opts);
    EXPECT_FALSE(src.FetchOnce().ok());
    EXPECT_EQ(src.last_failure_reason(), "http_status");
  }
  {
    server.Hang();
    ManifestUrlSource src(loop, server.url(), opts);
    EXPECT_FALSE(src.FetchOnce().ok());
    server.Release();
    EXPECT_EQ(src.last_failure_reason(), "timeout");
  }
  {
    ManifestUrlSource src(loop, "http://127.0.0.1:1/pods", opts);
    EXPECT_FALSE(src.FetchOnce().ok());
    EXPECT_EQ(src.last_failure_reason(), "fetch");
  }
  ManifestUrlSource src(loop, server.url(), opts);
  EXPECT_TRUE(src.FetchOnce().ok());
  EXPECT_EQ(src.last_failure_reason(), "");
}

TEST_F(UrlScheduleTest, StartDeliversASnapshotOnTheLoop) {
  auto src = Make(server_.url(), {});
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(Settle(*src, 1));
  auto snap = src->Poll();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->source, "http");
  src->Stop();
}

// The first fetch comes at start; the next one a whole period after it ended, not before.
TEST_F(UrlScheduleTest, NothingIsFetchedBeforeThePeriod) {
  UrlSourceOptions opts;
  opts.period = 20s;
  auto src = Make(server_.url(), opts);
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(Settle(*src, 1));
  EXPECT_EQ(src->fetches(), 1u);
  EXPECT_EQ(server_.hits(), 1);
  ASSERT_TRUE(src->Poll());
  for (int i = 0; i < 19; ++i) {
    clock_.Advance(1s);
    ASSERT_TRUE(loop_.RunOnce(0ms).ok());
  }
  clock_.Advance(999ms);
  ASSERT_TRUE(loop_.RunOnce(20ms).ok());
  EXPECT_FALSE(src->fetch_running());
  EXPECT_EQ(src->fetches(), 1u) << "fetched before the period";
  EXPECT_EQ(server_.hits(), 1);
  EXPECT_FALSE(src->Poll());
  clock_.Advance(1ms);
  ASSERT_TRUE(Settle(*src, 2));
  EXPECT_EQ(src->fetches(), 2u);
  EXPECT_EQ(server_.hits(), 2);
  auto snap = src->Poll();
  ASSERT_TRUE(snap);
  EXPECT_FALSE(snap->failure);
  EXPECT_EQ(src->not_modified(), 1u) << "the second fetch asks with the ETag";
}

// A fetch that fails is reported, and the URL is read again one period later (not sooner): then
// its pods come.
TEST_F(UrlScheduleTest, AFailedFetchIsTriedAgainAfterThePeriod) {
  server_.Set(std::string(8192, '#'), "\"big\"");
  UrlSourceOptions opts;
  opts.max_bytes = 4096;
  opts.period = 20s;
  auto src = Make(server_.url(), opts);
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(Settle(*src, 1));
  auto failed = src->Poll();
  ASSERT_TRUE(failed && failed->failure);
  EXPECT_EQ(failed->failure->reason, "too_large");
  server_.Set("kind: Pod", "\"v2\"");
  clock_.Advance(19s);
  ASSERT_TRUE(loop_.RunOnce(20ms).ok());
  EXPECT_EQ(src->fetches(), 1u) << "tried again before the period";
  clock_.Advance(1s);
  ASSERT_TRUE(Settle(*src, 2));
  EXPECT_EQ(src->fetches(), 2u);
  auto good = src->Poll();
  ASSERT_TRUE(good);
  EXPECT_FALSE(good->failure);
  ASSERT_EQ(good->manifests.size(), 1u);
  EXPECT_EQ(good->manifests[0].content, "kind: Pod");
}

// A stop with a fetch in flight returns within that fetch's timeout, and nothing is delivered
// after RequestStop, even when the fetch then completes.
TEST_F(UrlScheduleTest, StopEndsPromptlyWithAFetchInFlight) {
  server_.Hang();
  UrlSourceOptions opts;
  opts.timeout = 300ms;
  auto src = Make(server_.url(), opts);
  ASSERT_TRUE(src->Start().ok());
  ASSERT_TRUE(RunUntil(loop_, [&] { return server_.hits() == 1; }));
  EXPECT_TRUE(src->fetch_running());
  src->RequestStop();
  server_.Release();
  const auto start = std::chrono::steady_clock::now();
  src->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(loop_.RunOnce(10ms).ok());
  clock_.Advance(opts.period);
  ASSERT_TRUE(loop_.RunOnce(10ms).ok());
  EXPECT_EQ(snapshots_, 0);
  EXPECT_FALSE(src->Poll());
  EXPECT_EQ(server_.hits(), 1);
}

TEST(ManifestUrlSourceTest, UrlsAndHeaderFlags) {
  EXPECT_TRUE(ParseHttpUrl("https://example.com/x").ok());
  EXPECT_FALSE(ParseHttpUrl("ftp://example.com/x").ok());
  EXPECT_FALSE(ParseHttpUrl("http:///x").ok());
  EXPECT_FALSE(ParseHttpUrl("http://a/b c").ok());
  auto p = ParseHttpUrl("http://127.0.0.1:1234");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->path, "/");
  auto h = ParseHeaderFlag("Authorization:  Bearer abc ");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->first, "Authorization");
  EXPECT_EQ(h->second, "Bearer abc");
  EXPECT_FALSE(ParseHeaderFlag("no colon").ok());
  EXPECT_FALSE(ParseHeaderFlag(": empty name").ok());
  EXPECT_FALSE(ParseHeaderFlag("Bad Name: x").ok());
  EXPECT_FALSE(ParseHeaderFlag("X-A: b\r\nInjected: 1").ok());
}

// https: verified against the CA given with --manifest-url-ca (chain and the address it names);
// without it, the system's CAs do not know a self-signed server and the fetch fails as tls.
// The --manifest-url-header values go with every request.
TEST(ManifestUrlSourceTest, HttpsIsVerifiedAndHeadersAreSent) {
  TempDir dir;
  const std::string key = dir.Sub("key.pem"), cert = dir.Sub("cert.pem");
  auto made = nodelet::testing::RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
       "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
       "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert},
      std::chrono::seconds(20));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  httplib::SSLServer server(cert.c_str(), key.c_str());
  ASSERT_TRUE(server.is_valid());
  std::mutex mu;
  std::string auth;
  server.Get("/pods", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    auth = req.get_header_value("Authorization");
    res.set_content("kind: Pod", "application/yaml");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread t = nodelet::testing::ListenInThread(server);
  const std::string url = "https://127.0.0.1:" + std::to_string(port) + "/pods";

  UrlSourceOptions opts;
  opts.ca_file = cert;
  opts.headers = {{"Authorization", "Bearer s3cret"}};
  EventLoop loop(RealClock::Get());
  ManifestUrlSource good(loop, url, opts);
  auto r = good.FetchOnce();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) {
    EXPECT_EQ(r->manifests.at(0).content, "kind: Pod");
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(auth, "Bearer s3cret");
  }
  ManifestUrlSource unknown(loop, url, {});
  EXPECT_FALSE(unknown.FetchOnce().ok());
  EXPECT_EQ(unknown.last_failure_reason(), "tls");
  server.stop();
  t.join();
}

}  // namespace
}  // namespace nodelet::supervisor

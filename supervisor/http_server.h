// HttpServer: the small HTTP/1.1 server behind the supervisor's endpoint (/healthz, /metrics,
// /pods, /node). Anyone who can reach the port is a client, so no client can take the server
// from the others:
//   - one event thread accepts (accept4, CLOEXEC) and reads every connection's request head
//     without blocking; a connection costs an fd, not a thread, until its request is complete;
//   - each request must arrive whole (request line and headers, at most kMaxRequestHeadBytes)
//     within `request_deadline` of the accept, or the connection is closed;
//   - at most `max_connections` are open; one over the cap is closed at once;
//   - complete requests go to a small pool of `workers`, which run the handler and write the
//     response under `write_deadline`; every response closes its connection.
// Only GET and HEAD are served; the query string is ignored.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::supervisor {

inline constexpr size_t kMaxRequestHeadBytes = 16 * 1024;

struct HttpServerOptions {
  int workers = 4;
  size_t max_connections = 256;
  std::chrono::milliseconds request_deadline{5000};
  std::chrono::milliseconds write_deadline{5000};
};

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;
  // `clock` measures the request and write deadlines.
  explicit HttpServer(const Clock& clock, HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Listen: the handler of GET/HEAD `path`.
  void Get(const std::string& path, Handler handler);
  // Binds HOST:PORT (port 0: any free port) and starts the threads; returns the port.
  Result<int> Listen(const std::string& host, int port);
  void Stop();

  // For tests and metrics.
  size_t open_connections() const { return open_.load(); }
  uint64_t refused() const { return refused_.load(); }
  uint64_t timed_out() const { return timed_out_.load(); }

 private:
  struct Conn {
    int fd = -1;
    std::string head;
    MonoTime deadline;
  };
  struct Job {
    int fd = -1;
    std::string method, path;
  };
  void EventLoop();
  void WorkerLoop();
  void Serve(const Job& job);
  void CloseConn(int fd);

  const Clock& clock_;
  HttpServerOptions options_;
  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> refused_{0}, timed_out_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::thread event_thread_;
  std::vector<std::thread> workers_;
};

}  // namespace nodelet::supervisor

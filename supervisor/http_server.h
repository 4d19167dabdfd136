// HttpServer: the small HTTP/1.1 server behind the supervisor's endpoint (/healthz, /metrics,
// /pods, /node). Anyone who can reach the port is a client, so no client can take the server
// from the others:
//   - the process's EventLoop accepts (accept4, CLOEXEC) and reads every connection's request
//     head without blocking, on the loop's thread: the listening socket and each connection's
//     fd are sources of the loop, and Beast's parser reads the head (http_request.h); a
//     connection costs an fd, not a thread, until its request is complete;
//   - each request must arrive whole (request line and headers, at most kMaxRequestHeadBytes)
//     within `request_deadline` of the accept, or the connection is closed (a loop timer per
//     connection);
//   - at most `max_connections` are open, and at most `max_connections_per_peer` from one
//     peer address; one over either cap is closed at once (counted in refused());
//   - complete requests leave the loop and go to a small pool of `workers`, which run the
//     handler and write the response under `write_deadline` (a client that does not read is
//     closed when it passes; the response is one string, never more); every response closes
//     its connection; a head that is not HTTP/1.x is answered 400 there;
//   - a request that waited in the queue longer than `queue_deadline` is answered 503 without
//     running its handler (counted in expired()): a backlog drains at once instead of serving
//     answers nobody waits for any more;
//   - the paths registered with GetUrgent (/healthz) have a lane of their own, one thread that
//     runs nothing else, so they are never queued behind slow handlers or slow clients;
//   - a reply that streams (HttpReply::stream: a followed container log) is written from a
//     thread of its own, at most `max_streams` at once (503 beyond), so that streams never hold
//     the workers; each write has `write_deadline`, and Stop() tells the streams to end
//     (HttpStream::stopping) and joins them. HTTP/1.1 clients get it chunked, HTTP/1.0 clients
//     until the connection closes.
// Only GET and HEAD are served. Handlers are found by the exact path, else by the longest
// registered prefix (GetPrefix); the query string is split into parameters.
//
// Threads: Get*, Listen and Stop (and the destructor) are called on the loop's thread, or while
// no thread runs the loop (before Run, or after it returned); the handlers run on the workers,
// the urgent lane and the stream threads; the counters may be read from any thread. Stop joins
// the workers: a handler that waits for the loop (a snapshot posted to it) waits in vain while
// Stop runs on the loop's thread, so such a handler must wait with a time limit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/service/event_loop.h"
#include "supervisor/http_request.h"

namespace nodelet::supervisor {

struct HttpServerOptions {
  int workers = 4;
  size_t max_connections = 1024;
  size_t max_connections_per_peer = 256;
  std::chrono::milliseconds request_deadline{5000};
  std::chrono::milliseconds write_deadline{5000};
  std::chrono::milliseconds queue_deadline{5000};

  size_t max_streams = 8;
};

struct HttpRequest {
  std::string method;
  std::string path;                          // without the query, not decoded
  std::map<std::string, std::string> query;  // decoded (%XX, '+')
  bool http10 = false;
};

// The writer of a streamed reply, on the stream's own thread.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Sends `data` (a chunk); false when the client is gone or too slow (write deadline).
  virtual bool Write(std::string_view data) = 0;
  // The client's socket, to notice that it went away (poll for POLLRDHUP); never read or write it.
  virtual int client_fd() const = 0;
  // True once the server stops: end the stream.
  virtual bool stopping() const = 0;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  // When set, the body is ignored: after the head, this runs on a stream thread and writes the
  // body through HttpStream; the reply ends when it returns.
  std::function<void(HttpStream&)> stream;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply()>;
  using RequestHandler = std::function<HttpReply(const HttpRequest&)>;
  // Serves on `loop` (which must outlive the server); the loop's clock measures the request,
  // queue and write deadlines.
  explicit HttpServer(EventLoop& loop, HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before Listen: the handler of GET/HEAD `path`.
  void Get(const std::string& path, Handler handler);
  // Before Listen: the handler of every GET/HEAD path that starts with `prefix` (and of no path
  // that has an exact handler).
  void GetPrefix(const std::string& prefix, RequestHandler handler);
  // Before Listen: as Get, served on the urgent lane (a thread of its own). For handlers that
  // answer quickly and small (/healthz): a slow one would hold the lane.
  void GetUrgent(const std::string& path, Handler handler);
  // Binds HOST:PORT (port 0: any free port), adds the socket to the loop and starts the
  // workers; returns the port.
  Result<int> Listen(const std::string& host, int port);
  // Closes the socket and every connection, answers nothing more, ends the streams and joins
  // every thread; the second call does nothing.
  void Stop();

  // For tests and metrics.
  size_t open_connections() const { return open_.load(); }
  uint64_t refused() const { return refused_.load(); }
  uint64_t timed_out() const { return timed_out_.load(); }
  uint64_t expired() const { return expired_.load(); }
  // Requests waiting for a worker (both lanes).
  size_t queued() const;
  // Requests whose handler threw: each was answered 500 and logged.
  uint64_t handler_errors() const { return handler_errors_.load(); }
  size_t active_streams() const;

 private:
  // A connection whose head is being read, on the loop's thread.
  struct Conn {
    std::string head;
    RequestHeadParser parser;
    EventLoop::Handle readable;
    EventLoop::Timer deadline;
  };
  struct Job {
    int fd = -1;
    std::string method, path, query;
    bool http10 = false;
    MonoTime queued;
  };
  struct StreamThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  // The loop's callbacks: the listening socket is readable; connection `fd` is; its request
  // deadline passed.
  void OnAccept();
  void OnReadable(int fd);
  void OnDeadline(int fd);
  // Removes `fd` from the loop; `close`: closes it too (CloseConn).
  void DropConn(int fd, bool close);
  // Hands a connection whose head was read to the workers.
  void Enqueue(int fd, const RequestLine& line);
  // `urgent`: the lane of GetUrgent's paths, else the pool of `workers`.
  void WorkerLoop(bool urgent);
  void Serve(const Job& job);
  // Writes `reply` (not a stream) under the write deadline and closes the connection.
  void Reply(const Job& job, const HttpReply& reply);
  // The handler's reply (404 without one); may throw, Serve catches.
  HttpReply Dispatch(const Job& job);
  void CloseConn(int fd);
  // Starts `reply.stream` on a thread of its own (false: too many streams).
  bool StartStream(int fd, bool http10, bool head, HttpReply reply);
  void ReapStreams(bool all);

  EventLoop& loop_;
  const Clock& clock_;
  HttpServerOptions options_;
  std::map<std::string, Handler> handlers_;
  std::set<std::string> urgent_paths_;  // their handlers are in handlers_
  std::map<std::string, RequestHandler> prefix_handlers_;
  int listen_fd_ = -1;
  EventLoop::Handle listening_;
  std::map<int, std::unique_ptr<Conn>> conns_;  // on the loop's thread
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> refused_{0}, timed_out_{0}, expired_{0};
  std::atomic<uint64_t> handler_errors_{0};
  // Open connections by peer address, and each open fd's peer (closed from any thread).
  std::mutex peers_mu_;
  std::map<std::string, size_t> per_peer_;
  std::map<int, std::string> peer_of_;
  mutable std::mutex mu_;
  std::condition_variable cv_, urgent_cv_;
  std::deque<Job> jobs_, urgent_jobs_;
  std::vector<std::thread> workers_;
  mutable std::mutex streams_mu_;
  std::vector<StreamThread> streams_;
};

}  // namespace nodelet::supervisor

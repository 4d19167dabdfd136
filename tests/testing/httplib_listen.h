// ListenInThread: runs an httplib server's listen_after_bind() on a thread of its own and
// returns that thread once the server listens. httplib's stop() stops only a server whose
// listen loop has begun: one called before that (a test that never connects, on a loaded
// machine) is lost, and the loop, with the test's join of its thread, never ends.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace nodelet::testing {

template <typename Server>
std::thread ListenInThread(Server& server,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  std::thread thread([&server] { server.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // httplib tells no one when its loop begins; is_running() turns true there. Look each
  // millisecond, until the deadline.
  while (!server.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      // The thread holds a reference to the server: nothing safe is left but to end here.
      std::fprintf(stderr, "httplib server did not begin listening within %lld ms\n",
                   static_cast<long long>(timeout.count()));
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return thread;
}

}  // namespace nodelet::testing

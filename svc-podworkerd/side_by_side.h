// RunSideBySide: n calls at once, for the stops of a pod's containers, whose grace periods must
// run together (the kubelet stops them in parallel). Call 0 runs on the caller's thread, each
// other on a short-lived thread of its own; it returns once every call has returned. A thread
// that cannot be had runs its call on the caller's thread instead.
#pragma once

#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace nodelet::podworkerd {

template <typename Call>
void RunSideBySide(size_t n, const Call& call) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back([&call, i] { call(i); });
    } catch (const std::system_error&) {
      call(i);
    }
  }
  if (n > 0) call(0);
  for (auto& t : threads) t.join();
}

}  // namespace nodelet::podworkerd

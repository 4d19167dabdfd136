// What the etcd-client suite's two files (etcd_client_test.cc, etcd_client_failover_test.cc)
// both use: a key prefix of the test's own, the time since a start, a client connected (a test
// failure when it cannot be), and the events a watch delivers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/etcd/etcd_client.h"

namespace nodelet::etcd {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

inline std::string TestPrefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("/nodelet-test/") + info->test_suite_name() + "." + info->name() + "/";
}

inline milliseconds Since(Steady::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Steady::now() - start);
}

inline std::unique_ptr<Client> Connect(ClientOptions o) {
  auto c = Client::Connect(std::move(o), RealClock::Get());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// Reads batches until `want` events came (or the deadline): the events, in order.
inline std::vector<Watch::Event> Collect(Watch& watch, size_t want, milliseconds timeout) {
  std::vector<Watch::Event> got;
  const auto deadline = Steady::now() + timeout;
  while (got.size() < want && Steady::now() < deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    auto batch = watch.Next(std::max(left, milliseconds(1)));
    if (!batch.ok()) {
      EXPECT_EQ(batch.status().code(), StatusCode::kDeadlineExceeded) << batch.status().ToString();
      break;
    }
    for (auto& e : batch->events) got.push_back(std::move(e));
  }
  return got;
}

}  // namespace nodelet::etcd

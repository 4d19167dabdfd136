// FakeSupervisor: the supervisor's side of the control socket (a ROUTER bound at the control
// endpoint of a run directory), for integration tests that run one service binary without the
// supervisor and need to read its heartbeats. Header-only; link ipc_dep.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "control_generated.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"

namespace nodelet::testing {

class FakeSupervisor {
 public:
  FakeSupervisor(ipc::Context& ctx, const std::string& run_dir) : router_(ctx) {
    std::filesystem::create_directories(run_dir);
    EXPECT_TRUE(router_.Bind(ipc::kControlEndpoint.Uri(run_dir)).ok());
  }
  // Waits for a heartbeat with this health; returns its reason, or nullopt at the deadline.
  std::optional<std::string> WaitForHealth(ipc::control::Health health,
                                           std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto in = router_.Receive(std::chrono::milliseconds(100));
      if (!in.ok()) continue;
      auto m = ipc::DecodeMessage<ipc::control::ControlMessage>(
          in->payload.data(), in->payload.size(), ipc::control::ControlMessageIdentifier());
      if (!m.ok() || (*m)->body_type() != ipc::control::Body::Heartbeat) continue;
      const auto* hb = (*m)->body_as_Heartbeat();
      last_reason_ = hb->reason() ? hb->reason()->str() : "";
      if (hb->health() == health) return last_reason_;
    }
    return std::nullopt;
  }
  const std::string& last_reason() const { return last_reason_; }

 private:
  ipc::RouterServer router_;
  std::string last_reason_;
};

}  // namespace nodelet::testing

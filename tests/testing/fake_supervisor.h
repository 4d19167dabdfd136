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
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"

namespace nodelet::testing {

class FakeSupervisor {
 public:
  FakeSupervisor(ipc::Context& ctx, const std::string& run_dir) : router_(ctx) {
    std::filesystem::create_directories(run_dir);
    EXPECT_TRUE(router_.Bind(ipc::kControlEndpoint.Uri(run_dir)).ok());
  }
  // The next heartbeat (hellos and other messages are skipped), or nullopt at the deadline.
  struct Beat {
    std::string peer;
    ipc::control::Health health;
    std::string reason;
    bool has_counters = false;
    size_t counters = 0;
  };
  std::optional<Beat> NextHeartbeat(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto in = router_.Receive(std::chrono::milliseconds(100));
      if (!in.ok()) continue;
      auto m = ipc::DecodeMessage<ipc::control::ControlMessage>(
          in->payload.data(), in->payload.size(), ipc::control::ControlMessageIdentifier());
      if (!m.ok() || (*m)->body_type() != ipc::control::Body::Heartbeat) continue;
      const auto* hb = (*m)->body_as_Heartbeat();
      return Beat{in->peer, hb->health(), hb->reason() ? hb->reason()->str() : "",
                  hb->counters() != nullptr, hb->counters() ? hb->counters()->size() : 0};
    }
    return std::nullopt;
  }

  // Waits for a heartbeat with this health; returns its reason, or nullopt at the deadline.
  std::optional<std::string> WaitForHealth(ipc::control::Health health,
                                           std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (auto now = std::chrono::steady_clock::now(); now < end;
         now = std::chrono::steady_clock::now()) {
      auto beat = NextHeartbeat(std::chrono::duration_cast<std::chrono::milliseconds>(end - now));
      if (!beat) break;
      last_reason_ = beat->reason;
      if (beat->health == health) return last_reason_;
    }
    return std::nullopt;
  }
  const std::string& last_reason() const { return last_reason_; }

  // Asks `peer` to say hello again, as the supervisor does after it restarts.
  bool AskHello(const std::string& peer) {
    flatbuffers::FlatBufferBuilder fbb(128);
    auto cmd = ipc::control::CreateCommand(fbb, 1, ipc::control::CommandKind::Hello);
    return ipc::SendMessage(router_, peer, fbb, envelope_, ipc::control::Body::Command, cmd.Union())
        .ok();
  }

 private:
  ipc::RouterServer router_;
  ipc::EnvelopeWriter envelope_{ipc::ServiceId::Supervisor, ipc::NewIncarnation()};
  std::string last_reason_;
};

}  // namespace nodelet::testing

// IPC benchmark: request/reply round trip over the control pattern (DEALER -> ROUTER over an
// ipc:// socket, FlatBuffers envelopes, every frame verified on receipt) and one-way message
// throughput with heartbeat-sized messages. Prints a table and writes JSON.
//
//   ipc-bench [--round-trips N] [--messages N] [--json FILE]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_report.h"
#include "control_generated.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"

using namespace nodelet::bench;

namespace {

using namespace nodelet::ipc;
using Clock = std::chrono::steady_clock;

// A heartbeat like the services send: health, reason and a dozen counters (~400 bytes).
void BuildHeartbeat(flatbuffers::FlatBufferBuilder& fbb, EnvelopeWriter& w) {
  fbb.Clear();
  auto h = w.Write(fbb);
  std::vector<flatbuffers::Offset<control::Counter>> cs;
  static const char* kNames[] = {
      "events_published",     "inspections", "inspection_errors", "ipc_bad_messages",
      "ipc_control_messages", "pods",        "relist_errors",     "relists",
      "snapshot_requests",    "containers",  "sandboxes",         "subscribers"};
  for (const char* n : kNames) cs.push_back(control::CreateCounterDirect(fbb, n, 123456));
  auto hb = control::CreateHeartbeat(fbb, control::Health::Ok, fbb.CreateString(""), 987654,
                                     fbb.CreateVector(cs));
  fbb.Finish(control::CreateControlMessage(fbb, h, control::Body::Heartbeat, hb.Union()),
             control::ControlMessageIdentifier());
}

bool Verify(const zmq::message_t& m) {
  return DecodeMessage<control::ControlMessage>(m.data(), m.size(),
                                                control::ControlMessageIdentifier())
      .ok();
}

}  // namespace

int main(int argc, char** argv) {
  int round_trips = 20000;
  int messages = 500000;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--round-trips" && i + 1 < argc)
      round_trips = std::atoi(argv[++i]);
    else if (a == "--messages" && i + 1 < argc)
      messages = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: ipc-bench [--round-trips N] [--messages N] [--json FILE]\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/nodelet-ipc-bench.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::string dir = tmpl;
  // Removed at exit, after the context (declared below, so destroyed first) closed the sockets,
  // on every return.
  struct RemoveAtExit {
    std::string path;
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  const std::string rr_uri = "ipc://" + dir + "/rr.sock";
  const std::string tp_uri = "ipc://" + dir + "/tp.sock";

  Context ctx;
  size_t msg_size = 0;

  // --- round trip ---
  std::vector<double> rtt_us;
  rtt_us.reserve(static_cast<size_t>(round_trips));
  {
    RouterServer server(ctx);
    if (!server.Bind(rr_uri).ok()) return 1;
    std::thread echo([&] {
      EnvelopeWriter w(ServiceId::Supervisor, NewIncarnation());
      flatbuffers::FlatBufferBuilder fbb(256);
      for (int i = 0; i < round_trips + 1; ++i) {
        auto in = server.Receive(std::chrono::milliseconds(5000));
        if (!in.ok() || !Verify(in->payload)) return;
        fbb.Clear();
        auto h = w.Write(fbb);
        auto r = control::CreateReply(fbb, static_cast<uint64_t>(i), true);
        fbb.Finish(control::CreateControlMessage(fbb, h, control::Body::Reply, r.Union()),
                   control::ControlMessageIdentifier());
        (void)server.Send(in->peer, fbb.GetBufferPointer(), fbb.GetSize());
      }
    });
    DealerClient client(ctx);
    (void)client.Connect(rr_uri);
    EnvelopeWriter w(ServiceId::Plegd, NewIncarnation());
    flatbuffers::FlatBufferBuilder fbb(1024);
    for (int i = 0; i < round_trips + 1; ++i) {
      auto t0 = Clock::now();
      BuildHeartbeat(fbb, w);
      msg_size = fbb.GetSize();
      // The first send may race the connection (ZMQ_IMMEDIATE): retry until queued.
      while (!client.Send(fbb.GetBufferPointer(), fbb.GetSize()).ok()) std::this_thread::yield();
      auto reply = client.Receive(std::chrono::milliseconds(5000));
      if (!reply.ok() || !Verify(*reply)) {
        std::fprintf(stderr, "round trip %d failed\n", i);
        return 1;
      }
      auto t1 = Clock::now();
      if (i > 0) rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    echo.join();
  }

  // --- one-way throughput ---
  double throughput = 0;
  {
    RouterServer server(ctx);
    if (!server.Bind(tp_uri).ok()) return 1;
    int received = 0;
    Clock::time_point first, last;
    std::thread sink([&] {
      for (;;) {
        auto in = server.Receive(std::chrono::milliseconds(5000));
        if (!in.ok()) return;
        if (!Verify(in->payload)) return;
        if (received == 0) first = Clock::now();
        ++received;
        last = Clock::now();
        if (received == messages) return;
      }
    });
    DealerClient client(ctx);
    (void)client.Connect(tp_uri);
    client.raw().set(zmq::sockopt::sndhwm, 10000);
    client.raw().set(zmq::sockopt::immediate, 0);
    EnvelopeWriter w(ServiceId::Plegd, NewIncarnation());
    flatbuffers::FlatBufferBuilder fbb(1024);
    auto t0 = Clock::now();
    for (int i = 0; i < messages; ++i) {
      BuildHeartbeat(fbb, w);
      client.raw().send(zmq::const_buffer(fbb.GetBufferPointer(), fbb.GetSize()),
                        zmq::send_flags::none);
    }
    sink.join();
    auto secs = std::chrono::duration<double>(last - t0).count();
    throughput = received / secs;
    if (received != messages) {
      std::fprintf(stderr, "throughput: received %d of %d\n", received, messages);
      return 1;
    }
  }

  double p50 = Percentile(rtt_us, 50), p99 = Percentile(rtt_us, 99);
  std::printf("%-36s %12s %10s\n", "figure", "value", "goal");
  std::printf("%-36s %9.1f us %10s\n", "ipc round trip p50", p50, "");
  std::printf("%-36s %9.1f us %10s\n", "ipc round trip p99", p99, "< 200 us");
  std::printf("%-36s %9.0f /s %10s\n", "ipc one-way throughput", throughput, "> 200000");
  std::printf("(message size %zu bytes, %d round trips, %d one-way messages)\n", msg_size,
              round_trips, messages);
  std::vector<Figure> figures;
  figures.push_back(Distribution("IPC round trip (heartbeat → reply)", "us", rtt_us));
  SetGoal(figures.back(), "p99", "<", 200);
  figures.back().note = std::to_string(msg_size) + "-byte message";
  figures.push_back(
      Value("IPC one-way throughput", "messages/s", throughput, static_cast<size_t>(messages)));
  SetGoal(figures.back(), "value", ">", 200000);
  figures.back().note = std::to_string(msg_size) + "-byte messages";
  WriteReport(json_path, figures, {{"message_bytes", msg_size}});
  return 0;
}

// volumed: a pod's ADD (DesiredPods received) → "volumes ready" (VolumesChanged published), for
// one pod with 5 volumes (emptyDir, emptyDir Memory, hostPath, downwardAPI, configMap) repeated,
// and for 100 such pods at once. Runs a real nodelet-volumed with its own temporary root; real
// mounts (run as root).
//
//   volume-bench --bin-dir DIR [--rounds N] [--json FILE]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/sockets.h"
#include "lib/pod/pod_flatbuffers.h"
#include "podwork_generated.h"
#include "svc-volumed/volume_manager.h"
#include "tests/testing/harness.h"
#include "volume_generated.h"

using namespace nodelet;
using namespace nodelet::testing;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

pod::Pod FiveVolumePod(const std::string& uid, const std::string& host_dir) {
  pod::Pod p;
  p.metadata.name = "v" + uid;
  p.metadata.namespace_name = "default";
  p.metadata.uid = uid;
  p.metadata.labels = {{"app", "bench"}};
  pod::Volume a;
  a.name = "scratch";
  a.empty_dir = pod::EmptyDirVolumeSource{};
  pod::Volume b;
  b.name = "mem";
  b.empty_dir = pod::EmptyDirVolumeSource{"Memory", std::nullopt};
  pod::Volume c;
  c.name = "host";
  c.host_path = pod::HostPathVolumeSource{host_dir + "/" + uid, "DirectoryOrCreate"};
  pod::Volume d;
  d.name = "info";
  d.downward_api = pod::DownwardApiVolumeSource{};
  pod::DownwardApiVolumeFile f;
  f.path = "labels";
  f.field_ref = pod::ObjectFieldSelector{"v1", "metadata.labels"};
  d.downward_api->items.push_back(f);
  pod::Volume e;
  e.name = "config";
  e.config_map = pod::ConfigMapVolumeSource{};
  e.config_map->name = "settings";
  p.spec.volumes = {a, b, c, d, e};
  pod::Container ctr;
  ctr.name = "app";
  ctr.image = "busybox";
  p.spec.containers = {ctr};
  return p;
}

class Driver {
 public:
  Driver(ipc::Context& ctx, const std::string& run_dir)
      : dealer_(ctx), events_(ctx, ipc::kVolumeEvents) {
    (void)dealer_.Connect(ipc::kVolumeEndpoint.Uri(run_dir));
    (void)events_.Connect(ipc::kVolumeEventsEndpoint.Uri(run_dir));
    (void)dealer_.WaitWritable(milliseconds(5000));
  }
  void Send(const std::vector<pod::Pod>& pods) {
    flatbuffers::FlatBufferBuilder fbb(64 * 1024);
    std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>> list;
    for (const auto& p : pods) {
      list.push_back(ipc::podwork::CreateDesiredPod(fbb, pod::PodToFlatBuffer(fbb, p),
                                                    fbb.CreateString("file"), 0));
    }
    std::string value = "fast";
    auto entry = ipc::podwork::CreateConfigEntry(
        fbb, fbb.CreateString("mode"),
        fbb.CreateVector(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
    std::vector<flatbuffers::Offset<ipc::podwork::ConfigEntry>> entries = {entry};
    auto cm = ipc::podwork::CreateConfigObject(
        fbb, fbb.CreateString("default"), fbb.CreateString("settings"), fbb.CreateVector(entries));
    std::vector<flatbuffers::Offset<ipc::podwork::ConfigObject>> cms = {cm};
    // No podworkerd here: nothing is in use but what is desired, so a pod sent away goes.
    auto desired = ipc::podwork::CreateDesiredPods(fbb, ++generation_, fbb.CreateVector(list), true,
                                                   0, fbb.CreateVector(cms), 0, 0, true);
    auto header = envelope_.Write(fbb);
    fbb.Finish(ipc::podwork::CreatePodWorkMessage(fbb, header, ipc::podwork::Body::DesiredPods,
                                                  desired.Union()),
               ipc::podwork::PodWorkMessageIdentifier());
    (void)dealer_.Send(fbb.GetBufferPointer(), fbb.GetSize());
  }
  // Waits for VolumesChanged(ready) of each uid; returns ms since t0 per uid.
  std::map<std::string, double> WaitReady(const std::set<std::string>& uids,
                                          SteadyClock::time_point t0) {
    std::map<std::string, double> out;
    auto end = SteadyClock::now() + std::chrono::seconds(60);
    while (out.size() < uids.size() && SteadyClock::now() < end) {
      auto frame = events_.Receive(milliseconds(500));
      if (!frame.ok()) continue;
      auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(
          frame->data(), frame->size(), ipc::volume::VolumeMessageIdentifier());
      if (!m.ok()) continue;
      const auto* ev = (*m)->body_as_VolumesChanged();
      if (!ev || !ev->ready() || !ev->pod_uid()) continue;
      std::string uid = ev->pod_uid()->str();
      if (uids.count(uid) && !out.count(uid)) {
        out[uid] = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
      }
    }
    // Drain the acks.
    while (dealer_.Readable()) (void)dealer_.Receive(milliseconds(0));
    return out;
  }

  // Reads (and drops) events for up to `ms`.
  void Drain(milliseconds ms) { (void)events_.Receive(ms); }

 private:
  ipc::DealerClient dealer_;
  ipc::Subscriber events_;
  ipc::EnvelopeWriter envelope_{ipc::ServiceId::Supervisor, ipc::NewIncarnation()};
  uint64_t generation_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, json_path;
  int rounds = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: volume-bench --bin-dir DIR [--rounds N] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty()) return 2;
  if (geteuid() != 0) {
    std::fprintf(stderr, "volume-bench mounts tmpfs volumes: run it as root\n");
    return 1;
  }
  TempDir dir;
  NotifyListener notify(dir.Sub("notify.sock"));
  Subprocess volumed({bin_dir + "/nodelet-volumed", "--root-dir", dir.Sub("root"), "--run-dir",
                      dir.Sub("run"), "--log-dir", dir.Sub("log")},
                     {{"NOTIFY_SOCKET", notify.path()}}, dir.Sub("volumed.log"));
  if (!notify.WaitFor("READY=1", milliseconds(10000))) {
    std::fprintf(stderr, "volumed did not become ready\n");
    return 1;
  }
  ipc::Context ctx;
  Driver driver(ctx, dir.Sub("run"));
  driver.Send({});  // volumed starts reconciling once it has a desired state
  driver.Drain(milliseconds(200));

  std::vector<double> one;
  for (int r = 0; r < rounds; ++r) {
    std::string uid = "one" + std::to_string(r);
    auto t0 = SteadyClock::now();
    driver.Send({FiveVolumePod(uid, dir.Sub("host"))});
    auto got = driver.WaitReady({uid}, t0);
    if (!got.count(uid)) {
      std::fprintf(stderr, "pod %s never became ready\n", uid.c_str());
      return 1;
    }
    one.push_back(got[uid]);
    driver.Send({});  // removed: torn down before the next round
  }
  std::vector<pod::Pod> many;
  std::set<std::string> uids;
  for (int i = 0; i < 100; ++i) {
    many.push_back(FiveVolumePod("many" + std::to_string(i), dir.Sub("host")));
    uids.insert("many" + std::to_string(i));
  }
  auto t0 = SteadyClock::now();
  driver.Send(many);
  auto got = driver.WaitReady(uids, t0);
  if (got.size() != uids.size()) {
    std::fprintf(stderr, "only %zu of 100 pods became ready\n", got.size());
    return 1;
  }
  std::vector<double> hundred;
  for (const auto& [_, ms] : got) hundred.push_back(ms);
  driver.Send({});
  // Wait for the teardown of every mount before leaving.
  auto end = SteadyClock::now() + std::chrono::seconds(30);
  while (!volumed::MountsUnder(dir.Sub("root")).empty() && SteadyClock::now() < end) {
    driver.Drain(milliseconds(200));
  }
  volumed.Signal(SIGTERM);
  volumed.Wait(milliseconds(5000));

  std::printf("%-48s %9s %9s %9s\n", "volumed ADD → volumes ready (5 volumes)", "p50", "p99",
              "goal p99");
  std::printf("  %-46s %6.1f ms %6.1f ms %9s\n",
              ("one pod (" + std::to_string(rounds) + " rounds)").c_str(), Percentile(one, 50),
              Percentile(one, 99), "< 50 ms");
  std::printf("  %-46s %6.1f ms %6.1f ms\n", "100 pods at once", Percentile(hundred, 50),
              Percentile(hundred, 99));
  std::vector<Figure> figures;
  figures.push_back(
      Distribution("volume readiness, 1 pod with 5 volumes (ADD → ready)", "ms", one));
  SetGoal(figures.back(), "p99", "<", 50);
  figures.push_back(
      Distribution("volume readiness, 100 pods at once (ADD → each ready)", "ms", hundred));
  WriteReport(json_path, figures, {{"rounds", rounds}});
  return 0;
}

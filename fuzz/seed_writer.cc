// Writes the seed corpora for the fuzz targets (valid messages of each kind), so a fresh clone
// start from valid messages (`./dev fuzz` runs it into each target's fresh corpus).
#include <filesystem>
#include <fstream>
#include <string>

#include "control_generated.h"
#include "ctl_generated.h"
#include "lib/ipc/codec.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "tests/unit/pod/test_manifests.h"

namespace {

void Write(const std::string& path, flatbuffers::FlatBufferBuilder& fbb) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

void WriteText(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Seeds for lib/pod's targets: manifests (YAML, JSON, several documents, a few broken ones),
// quantities, and encoded pods.
void WritePodSeeds(const std::string& dir) {
  using namespace nodelet::pod;
  std::filesystem::create_directories(dir + "/manifest");
  std::filesystem::create_directories(dir + "/quantity");
  std::filesystem::create_directories(dir + "/pod");
  const std::pair<const char*, std::string> manifests[] = {
      {"full.yaml", testing::kFullPodYaml},
      {"small.json", testing::kSmallPodJson},
      {"minimal.yaml", testing::kMinimalPodYaml},
      {"multi.yaml", std::string(testing::kMinimalPodYaml) +
                         "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
                         "---\n" + testing::kSmallPodJson},
      {"anchors.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: &l {x: y}}\n"
                       "spec: {containers: [{name: c, image: i, env: [{name: A, value: *l}]}]}\n"},
      {"badkind.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"},
      {"badqty.yaml", std::string(testing::kMinimalPodYaml) +
                          "    resources: {limits: {memory: 12xyz}}\n"},
  };
  for (const auto& [name, text] : manifests) WriteText(dir + "/manifest/" + name, text);
  const char* quantities[] = {"100m", "0.5", "64Mi", "1Gi", "1e3", "500k", "-1.5E-3", ".5",
                              "12xyz", "1Ei", "0.0000000001"};
  int i = 0;
  for (const char* q : quantities) WriteText(dir + "/quantity/q" + std::to_string(i++), q);
  StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/full.yaml";
  origin.node_name = "node1";
  auto loaded = LoadStaticPods(testing::kFullPodYaml, origin);
  for (const PodDocument& doc : loaded.pods) {
    auto buf = EncodePod(doc.pod);
    WriteText(dir + "/pod/full", std::string_view(reinterpret_cast<const char*>(buf.data()),
                                                  buf.size()));
  }
  auto empty = EncodePod(Pod{});
  WriteText(dir + "/pod/empty",
            std::string_view(reinterpret_cast<const char*>(empty.data()), empty.size()));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nodelet::ipc;
  std::string dir = argc > 1 ? argv[1] : "fuzz/corpus";
  std::filesystem::create_directories(dir + "/control");
  std::filesystem::create_directories(dir + "/ctl");
  EnvelopeWriter w(ServiceId::Plegd, 7);
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = w.Write(fbb);
    auto body = control::CreateHelloDirect(fbb, "plegd", 1234, "0.1.0", 1000);
    fbb.Finish(control::CreateControlMessage(fbb, h, control::Body::Hello, body.Union()),
               control::ControlMessageIdentifier());
    Write(dir + "/control/hello", fbb);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = w.Write(fbb);
    std::vector<flatbuffers::Offset<control::Counter>> cs = {
        control::CreateCounterDirect(fbb, "relists", 10),
        control::CreateCounterDirect(fbb, "events", 3)};
    auto body = control::CreateHeartbeat(fbb, control::Health::Failing,
                                         fbb.CreateString("runtime down"), 5000,
                                         fbb.CreateVector(cs));
    fbb.Finish(control::CreateControlMessage(fbb, h, control::Body::Heartbeat, body.Union()),
               control::ControlMessageIdentifier());
    Write(dir + "/control/heartbeat", fbb);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = w.Write(fbb);
    auto body = control::CreateReplyDirect(fbb, 3, false, "reload failed");
    fbb.Finish(control::CreateControlMessage(fbb, h, control::Body::Reply, body.Union()),
               control::ControlMessageIdentifier());
    Write(dir + "/control/reply", fbb);
  }
  EnvelopeWriter c(ServiceId::Ctl, 9);
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = c.Write(fbb);
    std::vector<std::string> names = {"plegd", "statusd"};
    auto body = ctl::CreateCtlRequest(fbb, ctl::RequestKind::Restart,
                                      fbb.CreateVectorOfStrings(names));
    fbb.Finish(ctl::CreateCtlMessage(fbb, h, ctl::Body::CtlRequest, body.Union()),
               ctl::CtlMessageIdentifier());
    Write(dir + "/ctl/request", fbb);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = c.Write(fbb);
    std::vector<flatbuffers::Offset<ctl::ServiceStatus>> ss = {ctl::CreateServiceStatusDirect(
        fbb, "plegd", ctl::ProcessState::Running, 1234, 62000, "pid 1234, uptime 0:01:02", 1,
        "ok", "/var/log/nodelet/plegd.log", 1700000000)};
    auto body = ctl::CreateCtlReply(fbb, true, 0, fbb.CreateVector(ss));
    fbb.Finish(ctl::CreateCtlMessage(fbb, h, ctl::Body::CtlReply, body.Union()),
               ctl::CtlMessageIdentifier());
    Write(dir + "/ctl/reply", fbb);
  }
  WritePodSeeds(dir);
  return 0;
}

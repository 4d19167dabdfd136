// Writes the seed corpora of the fuzz targets (valid messages of each kind, manifests, quantities,
// URL responses) into DIR/<target>/ (default fuzz/corpus). The corpora are committed under
// fuzz/corpus/; run this after a schema change to refresh them:
//   ninja -C build-fuzz fuzz/fuzz-seeds && build-fuzz/fuzz/fuzz-seeds fuzz/corpus
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "control_generated.h"
#include "ctl_generated.h"
#include "lib/ipc/codec.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/static_pod.h"
#include "pleg_generated.h"
#include "podwork_generated.h"
#include "status_generated.h"
#include "tests/unit/pod/test_manifests.h"
#include "volume_generated.h"

namespace {

void Write(const std::string& path, flatbuffers::FlatBufferBuilder& fbb) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

void WriteText(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// A YAML tree as JSON (scalars that read as numbers or booleans become those).
nlohmann::json ToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = n.begin(); it != n.end(); ++it)
      out[it->first.as<std::string>()] = ToJson(it->second);
    return out;
  }
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (auto it = n.begin(); it != n.end(); ++it) out.push_back(ToJson(*it));
    return out;
  }
  if (n.IsNull()) return nullptr;
  const std::string s = n.Scalar();
  if (n.Tag() != "!") {  // plain scalars only: quoted ones stay strings
    if (s == "true" || s == "false") return s == "true";
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return i;
  }
  return s;
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
                         "---\n" +
                         testing::kSmallPodJson},
      {"anchors.yaml",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: &l {x: y}}\n"
       "spec: {containers: [{name: c, image: i, env: [{name: A, value: *l}]}]}\n"},
      {"badkind.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"},
      {"secrets.yaml",
       "apiVersion: v1\nkind: Secret\nmetadata: {name: pull, namespace: team}\ntype: "
       "kubernetes.io/dockerconfigjson\ndata: {.dockerconfigjson: "
       "eyJhdXRocyI6IHsicmVnLmlvIjogeyJhdXRoIjogImRYTmxjanB3WVhOeiJ9fX0=}\nstringData: {note: "
       "text}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: bin}\nbinaryData: {b: "
       "AP8=}\n"},
      {"badqty.yaml",
       std::string(testing::kMinimalPodYaml) + "    resources: {limits: {memory: 12xyz}}\n"},
  };
  for (const auto& [name, text] : manifests) WriteText(dir + "/manifest/" + name, text);
  const char* quantities[] = {"100m",    "0.5", "64Mi",  "1Gi", "1e3",         "500k",
                              "-1.5E-3", ".5",  "12xyz", "1Ei", "0.0000000001"};
  int i = 0;
  for (const char* q : quantities) WriteText(dir + "/quantity/q" + std::to_string(i++), q);
  StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/full.yaml";
  origin.node_name = "node1";
  auto loaded = LoadStaticPods(testing::kFullPodYaml, origin);
  for (const PodDocument& doc : loaded.pods) {
    auto buf = EncodePod(doc.pod);
    WriteText(dir + "/pod/full",
              std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()));
  }
  auto empty = EncodePod(Pod{});
  WriteText(dir + "/pod/empty",
            std::string_view(reinterpret_cast<const char*>(empty.data()), empty.size()));
}

// A message of root type Root built with the object API, with a valid envelope.
template <typename Root, typename RootT>
void WriteObject(const std::string& path, RootT& message, const char* identifier) {
  message.header = std::make_unique<nodelet::ipc::EnvelopeT>();
  message.header->schema_version = nodelet::ipc::kSchemaVersion;
  message.header->sender = nodelet::ipc::ServiceId::Supervisor;
  message.header->incarnation = 42;
  message.header->sequence = 7;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(Root::Pack(fbb, &message), identifier);
  Write(path, fbb);
}

void WritePlegSeeds(const std::string& dir) {
  using namespace nodelet::ipc::pleg;
  std::filesystem::create_directories(dir);
  auto record = [](const std::string& uid) {
    auto p = std::make_unique<PodRecordT>();
    p->uid = uid;
    p->name = "web";
    p->namespace_ = "default";
    auto sb = std::make_unique<SandboxRecordT>();
    sb->id = "sb-" + uid;
    sb->ip = "10.0.0.2";
    p->sandboxes.push_back(std::move(sb));
    auto c = std::make_unique<ContainerRecordT>();
    c->id = "c-" + uid;
    c->name = "app";
    c->exit_code = 1;
    c->reason = "Error";
    c->image = "busybox";
    p->containers.push_back(std::move(c));
    return p;
  };
  {
    PlegMessageT m;
    PodUpdateT u;
    u.pod = record("u1");
    auto ev = std::make_unique<EventT>();
    ev->pod_uid = "u1";
    ev->id = "c-u1";
    ev->container_name = "app";
    u.events.push_back(std::move(ev));
    m.body.Set(std::move(u));
    WriteObject<PlegMessage>(dir + "/update", m, PlegMessageIdentifier());
  }
  {
    PlegMessageT m;
    SnapshotT snap;
    snap.request_id = 3;
    snap.pods.push_back(record("u1"));
    snap.pods.push_back(record("u2"));
    m.body.Set(std::move(snap));
    WriteObject<PlegMessage>(dir + "/snapshot", m, PlegMessageIdentifier());
  }
  {
    PlegMessageT m;
    RelistDoneT done;
    done.relist = 9;
    done.error = "runtime down";
    m.body.Set(std::move(done));
    WriteObject<PlegMessage>(dir + "/relist", m, PlegMessageIdentifier());
  }
}

void WriteVolumeSeeds(const std::string& dir) {
  using namespace nodelet::ipc::volume;
  std::filesystem::create_directories(dir);
  {
    VolumeMessageT m;
    PodVolumesRequestT r;
    r.request_id = 1;
    r.pod_uid = "u1";
    m.body.Set(std::move(r));
    WriteObject<VolumeMessage>(dir + "/request", m, VolumeMessageIdentifier());
  }
  {
    VolumeMessageT m;
    PodVolumesT v;
    v.request_id = 1;
    v.pod_uid = "u1";
    v.known = v.ready = true;
    auto path = std::make_unique<VolumePathT>();
    path->name = "data";
    path->host_path = "/var/lib/nodelet/pods/u1/volumes/empty-dir/data";
    path->plugin = "empty-dir";
    v.volumes.push_back(std::move(path));
    m.body.Set(std::move(v));
    WriteObject<VolumeMessage>(dir + "/volumes", m, VolumeMessageIdentifier());
  }
  {
    VolumeMessageT m;
    VolumesQueryT q;
    q.request_id = 2;
    m.body.Set(std::move(q));
    WriteObject<VolumeMessage>(dir + "/query", m, VolumeMessageIdentifier());
  }
}

void WritePodworkSeeds(const std::string& dir) {
  using namespace nodelet::ipc::podwork;
  std::filesystem::create_directories(dir);
  nodelet::pod::StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/full.yaml";
  origin.node_name = "node1";
  auto loaded = nodelet::pod::LoadStaticPods(nodelet::pod::testing::kFullPodYaml, origin);
  {
    PodWorkMessageT m;
    DesiredPodsT d;
    d.generation = 4;
    d.sources_ready = true;
    for (const auto& doc : loaded.pods) {
      auto buf = nodelet::pod::EncodePod(doc.pod);
      auto dp = std::make_unique<DesiredPodT>();
      dp->pod.reset(flatbuffers::GetRoot<nodelet::ipc::pod::Pod>(buf.data())->UnPack());
      dp->source = "file";
      d.pods.push_back(std::move(dp));
    }
    auto rejected = std::make_unique<RejectedPodT>();
    rejected->uid = "u9";
    rejected->reason = "invalid";
    d.rejected.push_back(std::move(rejected));
    auto cm = std::make_unique<ConfigObjectT>();
    cm->namespace_name = "default";
    cm->name = "settings";
    auto entry = std::make_unique<ConfigEntryT>();
    entry->key = "a";
    entry->value = {'b'};
    cm->data.push_back(std::move(entry));
    d.config_maps.push_back(std::move(cm));
    m.body.Set(std::move(d));
    WriteObject<PodWorkMessage>(dir + "/desired", m, PodWorkMessageIdentifier());
  }
  {
    PodWorkMessageT m;
    WorkAckT ack;
    ack.generation = 4;
    ack.workers = 1;
    m.body.Set(std::move(ack));
    WriteObject<PodWorkMessage>(dir + "/ack", m, PodWorkMessageIdentifier());
  }
}

void WriteStatusSeeds(const std::string& dir) {
  using namespace nodelet::ipc::status;
  std::filesystem::create_directories(dir);
  auto identity = [] {
    auto p = std::make_unique<PodIdentityT>();
    p->namespace_ = "default";
    p->name = "web";
    p->uid = "u1";
    p->creation_time_unix_s = 1700000000;
    p->container_count = 1;
    return p;
  };
  {
    StatusMessageT m;
    SetPodStatusRequestT r;
    r.request_id = 1;
    r.pod = identity();
    r.status = std::make_unique<PodStatusT>();
    r.status->pod_ip = "10.0.0.2";
    auto c = std::make_unique<ContainerStatusT>();
    c->name = "app";
    c->container_id = "containerd://abc";
    c->ready = true;
    r.status->container_statuses.push_back(std::move(c));
    m.body.Set(std::move(r));
    WriteObject<StatusMessage>(dir + "/set", m, StatusMessageIdentifier());
  }
  {
    StatusMessageT m;
    GetPodStatusRequestT r;
    r.request_id = 2;
    r.uid = "u1";
    m.body.Set(std::move(r));
    WriteObject<StatusMessage>(dir + "/get", m, StatusMessageIdentifier());
  }
  {
    StatusMessageT m;
    ListPodStatusesRequestT r;
    r.request_id = 3;
    m.body.Set(std::move(r));
    WriteObject<StatusMessage>(dir + "/list", m, StatusMessageIdentifier());
  }
  {
    StatusMessageT m;
    RemoveOrphanedStatusesRequestT r;
    r.request_id = 4;
    r.keep_uids = {"u2"};
    m.body.Set(std::move(r));
    WriteObject<StatusMessage>(dir + "/orphans", m, StatusMessageIdentifier());
  }
}

// Inputs of fuzz-url-response: a selector byte (status, transport error, a previous snapshot),
// a limit byte, then body pieces with a length byte each.
void WriteUrlResponseSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto pieces = [](std::string_view body, size_t piece) {
    std::string out;
    for (size_t i = 0; i < body.size(); i += piece) {
      std::string_view p = body.substr(i, piece);
      out += static_cast<char>(p.size());
      out += p;
    }
    return out;
  };
  const std::string pod = nodelet::pod::testing::kMinimalPodYaml;
  WriteText(dir + "/ok", std::string("\x00\xff", 2) + pieces(pod, 100));
  WriteText(dir + "/json",
            std::string("\x00\xff", 2) + pieces(nodelet::pod::testing::kSmallPodJson, 50));
  WriteText(dir + "/not-modified", std::string("\x41\x10", 2) + pieces(pod, 200));
  WriteText(dir + "/too-large", std::string("\x00\x00", 2) + pieces(pod, 30));
  WriteText(dir + "/reset", std::string("\x80\xff", 2) + pieces(pod, 10));
  WriteText(dir + "/error", std::string("\x02\xff", 2) + pieces("not found", 9));
}

// JSON manifests for fuzz-manifest-json.
void WriteJsonSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  WriteText(dir + "/small.json", nodelet::pod::testing::kSmallPodJson);
  nodelet::pod::StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/full.yaml";
  origin.node_name = "node1";
  // The full example as JSON (YAML -> JSON through the JSON library).
  auto doc = YAML::Load(nodelet::pod::testing::kFullPodYaml);
  WriteText(dir + "/full.json", ToJson(doc).dump(2));
  WriteText(
      dir + "/escapes.json",
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"w\u0065b","labels":{"a\/b":"\u00e9"}},)"
      R"("spec":{"containers":[{"name":"app","image":"busybox","command":["sh","-c","echo \"hi\"\n"],)"
      R"("ports":[{"containerPort":8080}],"resources":{"limits":{"cpu":0.5,"memory":"64Mi"}}}]}})");
}

}  // namespace

// Seeds for lib/logs' CRI log reader: an options byte, then a log file.
void WriteCriLogSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string log =
      "2024-05-01T12:00:00.1Z stdout F first line\n"
      "2024-05-01T12:00:01.2Z stderr P part one, \n"
      "2024-05-01T12:00:01.3Z stderr F part two\n"
      "2024-05-01T12:00:02+02:00 stdout F\n"
      "not cri\n"
      "2024-05-01T12:00:03Z stdout P cut";
  WriteText(dir + "/plain", std::string(1, '\0') + log);
  WriteText(dir + "/tail-timestamps", std::string(1, static_cast<char>(0x23)) + log);
  WriteText(dir + "/limit-since", std::string(1, static_cast<char>(0x4c)) + log);
  WriteText(dir + "/duration", std::string(1, '\0') + "1h30m5.5s");
}

// Seeds for fuzz-http-request: request heads as clients send them.
void WriteHttpRequestSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  WriteText(dir + "/metrics", "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:10255\r\n\r\n");
  WriteText(dir + "/logs",
            "GET /containerLogs/default/web/app?tailLines=10&timestamps=true&sinceTime=2024-05-01"
            "T12%3A00%3A00Z HTTP/1.0\n\n");
  WriteText(dir + "/head", "HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
  WriteText(dir + "/partial", "GET /pods?a=%41+b&&c HTTP/1.1\r\nHost");
}

// Seeds for fuzz-stream-protocol: a selector byte (URL, Status, port pair, frame), then text.
void WriteStreamProtocolSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  WriteText(dir + "/url", std::string(1, '\0') + "http://127.0.0.1:40123/exec/Xy9_token");
  WriteText(dir + "/url-v6", std::string(1, '\4') + "http://[::1]:8080/portforward/abc");
  WriteText(dir + "/status-exit",
            std::string(1, '\1') +
                R"({"metadata":{},"status":"Failure","message":"command terminated with non-zero )"
                R"(exit code: 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":)"
                R"("ExitCode","message":"3"}]}})");
  WriteText(dir + "/status-success",
            std::string(1, '\1') + R"({"metadata":{},"status":"Success"})");
  WriteText(dir + "/ports", std::string(1, '\2') + "8080:80");
  WriteText(dir + "/frame", std::string(1, '\3') + "hello");
}

// Seeds for fuzz-config: nodelet's own file and a kubelet's KubeletConfiguration.
void WriteConfigSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  WriteText(dir + "/nodelet.yaml",
            "root-dir: /var/lib/nodelet\nrun-dir: /run/nodelet\nlog-level: info\n"
            "heartbeat-interval: 2000\nruntime-endpoint: unix:///run/containerd/containerd.sock\n"
            "supervisor:\n  pod-manifest-path: /etc/nodelet/manifests\n"
            "  http-address: 127.0.0.1:10255\n  services:\n    plegd:\n"
            "      args: [--relist-period, 5s]\nplegd:\n  relist-threshold: 3m\n"
            "  runtime-events: true\n");
  WriteText(dir + "/kubelet-config.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            "staticPodPath: /etc/kubernetes/manifests\nmaxPods: 50\ncgroupDriver: systemd\n"
            "evictionHard: {memory.available: 200Mi, nodefs.available: 5%}\n"
            "systemReserved: {cpu: 100m, memory: 256Mi}\nstaticPodURLHeader: {X-Token: [a, b]}\n");
  WriteText(dir + "/unknown-key", "log-level: debug\nno-such-key: 1\nsupervisor: [a]\n");
}

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
    auto body =
        control::CreateHeartbeat(fbb, control::Health::Failing, fbb.CreateString("runtime down"),
                                 5000, fbb.CreateVector(cs));
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
    auto body =
        ctl::CreateCtlRequest(fbb, ctl::RequestKind::Restart, fbb.CreateVectorOfStrings(names));
    fbb.Finish(ctl::CreateCtlMessage(fbb, h, ctl::Body::CtlRequest, body.Union()),
               ctl::CtlMessageIdentifier());
    Write(dir + "/ctl/request", fbb);
  }
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto h = c.Write(fbb);
    std::vector<flatbuffers::Offset<ctl::ServiceStatus>> ss = {ctl::CreateServiceStatusDirect(
        fbb, "plegd", ctl::ProcessState::Running, 1234, 62000, "pid 1234, uptime 0:01:02", 1, "ok",
        "/var/log/nodelet/plegd.log", 1700000000)};
    auto body = ctl::CreateCtlReply(fbb, true, 0, fbb.CreateVector(ss));
    fbb.Finish(ctl::CreateCtlMessage(fbb, h, ctl::Body::CtlReply, body.Union()),
               ctl::CtlMessageIdentifier());
    Write(dir + "/ctl/reply", fbb);
  }
  WritePodSeeds(dir);
  WritePlegSeeds(dir + "/pleg");
  WriteVolumeSeeds(dir + "/volume");
  WritePodworkSeeds(dir + "/podwork");
  WriteStatusSeeds(dir + "/status");
  WriteUrlResponseSeeds(dir + "/url-response");
  WriteJsonSeeds(dir + "/manifest-json");
  WriteCriLogSeeds(dir + "/cri-log");
  WriteHttpRequestSeeds(dir + "/http-request");
  WriteStreamProtocolSeeds(dir + "/stream-protocol");
  WriteConfigSeeds(dir + "/config");
  return 0;
}

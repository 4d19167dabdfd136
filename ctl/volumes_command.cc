#include "ctl/volumes_command.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "lib/common/json_text.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/ipc/peer_access.h"
#include "lib/ipc/sockets.h"
#include "volume_generated.h"

namespace nodelet::ctl {
namespace {

std::string Str(const flatbuffers::String* s) { return s ? s->str() : ""; }

std::string Pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

}  // namespace

int RunVolumes(const std::string& run_dir, const std::string& pod, bool json, std::ostream& out,
               std::ostream& err) {
  // A user the file system keeps out is told so, not made to wait for the deadline.
  if (Status s = ipc::ProbeIpcSocket(ipc::kVolumeEndpoint.Path(run_dir));
      s.code() == StatusCode::kPermissionDenied) {
    err << "nodeletctl: " << s.message() << "\n";
    return 4;
  }
  ipc::Context ctx;
  ipc::RequestClient client(ctx, ipc::kVolumeEndpoint.Uri(run_dir), ipc::kVolumeChannel);
  if (Status s = client.Connect(); !s.ok()) {
    err << "Error: cannot reach volumed in " << run_dir << ": " << s.message() << "\n";
    return 4;
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  auto q = ipc::volume::CreateVolumesQueryDirect(fbb, 1, "");
  ipc::EnvelopeWriter envelope(ipc::ServiceId::Ctl, ipc::NewIncarnation());
  ipc::FinishMessage(fbb, envelope, ipc::volume::Body::VolumesQuery, q.Union());
  auto frame = client.Call(fbb.GetBufferPointer(), fbb.GetSize(), std::chrono::milliseconds(1000),
                           std::chrono::milliseconds(3000), [](const ipc::Frame& f) {
                             auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(
                                 f.data(), f.size(), ipc::volume::VolumeMessageIdentifier());
                             return m.ok() && (*m)->body_as_VolumesReport() != nullptr;
                           });
  if (!frame.ok()) {
    err << "Error: volumed is not running or did not answer (" << run_dir
        << "): " << frame.status().message() << "\n";
    return 4;
  }
  auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(frame->data(), frame->size(),
                                                          ipc::volume::VolumeMessageIdentifier());
  if (!m.ok()) {
    err << "Error: bad reply from volumed: " << m.status().message() << "\n";
    return 4;
  }
  const auto* report = (*m)->body_as_VolumesReport();
  nlohmann::json list = nlohmann::json::array();
  std::string table =
      Pad("POD", 28) + Pad("VOLUME", 16) + Pad("PLUGIN", 14) + Pad("STATE", 10) + "PATH / REASON\n";
  bool found = pod.empty();
  if (report->volumes()) {
    for (const auto* v : *report->volumes()) {
      const std::string uid = Str(v->pod_uid()), name = Str(v->pod_name());
      if (!pod.empty() && pod != uid && pod != name) continue;
      found = true;
      const std::string state = Str(v->state()), error = Str(v->error());
      list.push_back({{"pod", name},
                      {"uid", uid},
                      {"volume", Str(v->name())},
                      {"plugin", Str(v->plugin())},
                      {"state", state},
                      {"error", error},
                      {"host_path", Str(v->host_path())}});
      table += Pad(name, 28) + Pad(Str(v->name()), 16) + Pad(Str(v->plugin()), 14) +
               Pad(state, 10) + (error.empty() ? Str(v->host_path()) : error) + "\n";
    }
  }
  if (!found) {
    err << "Error: no pod named " << pod << " has volumes in volumed\n";
    return 4;
  }
  if (json) {
    out << JsonText(list, 2) << "\n";
  } else {
    out << table;
  }
  return 0;
}

void AddVolumesCommand(CLI::App& app, const std::string* run_dir, int* rc) {
  auto pod = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("volumes", "Volumes per pod: desired, mounted, failing and why");
  sub->add_option("pod", *pod, "Pod name or UID (default: every pod)");
  sub->add_flag("--json", *json, "Print JSON for scripts");
  sub->callback([=] { *rc = RunVolumes(*run_dir, *pod, *json, std::cout, std::cerr); });
}

}  // namespace nodelet::ctl

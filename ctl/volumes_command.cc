#include "ctl/volumes_command.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "ctl/output_flags.h"
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

int RunVolumes(const std::string& run_dir, const std::string& pod, OutputFormat format,
               std::ostream& out, std::ostream& err) {
  // A user the file system keeps out is told so, not made to wait for the deadline.
  if (Status s = ipc::ProbeIpcSocket(ipc::kVolumeEndpoint.Path(run_dir));
      s.code() == StatusCode::kPermissionDenied) {
    Error(err) << s.message() << "\n";
    return kExitUnknown;
  }
  ipc::Context ctx;
  ipc::RequestClient client(ctx, ipc::kVolumeEndpoint.Uri(run_dir), ipc::kVolumeChannel);
  if (Status s = client.Connect(); !s.ok()) {
    Error(err) << "cannot reach volumed in " << run_dir << ": " << s.message() << "\n";
    return kExitUnknown;
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
    Error(err) << "volumed is not running or did not answer (" << run_dir
               << "): " << frame.status().message() << "\n";
    return kExitUnknown;
  }
  auto m = ipc::DecodeMessage<ipc::volume::VolumeMessage>(frame->data(), frame->size(),
                                                          ipc::volume::VolumeMessageIdentifier());
  if (!m.ok()) {
    Error(err) << "bad reply from volumed: " << m.status().message() << "\n";
    return kExitFailed;
  }
  const auto* report = (*m)->body_as_VolumesReport();
  nlohmann::json list = nlohmann::json::array();
  std::string table =
      Pad("POD", 28) + Pad("VOLUME", 16) + Pad("PLUGIN", 14) + Pad("STATE", 10) + "PATH / REASON\n";
  std::string names;
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
      names += name + "/" + Str(v->name()) + "\n";
      table += Pad(name, 28) + Pad(Str(v->name()), 16) + Pad(Str(v->plugin()), 14) +
               Pad(state, 10) + (error.empty() ? Str(v->host_path()) : error) + "\n";
    }
  }
  if (!found) {
    Error(err) << "no pod named " << pod << " has volumes in volumed\n";
    return kExitUnknown;
  }
  if (!PrintDocument(format, list, out)) out << (format == OutputFormat::kName ? names : table);
  return kExitOk;
}

void AddVolumesCommand(CLI::App& app, const std::string* run_dir, int* rc) {
  auto pod = std::make_shared<std::string>();
  auto output = std::make_shared<OutputFlags>();
  auto* sub = app.add_subcommand("volumes", "Volumes per pod: desired, mounted, failing and why");
  sub->add_option("pod", *pod, "Pod name or UID (default: every pod)");
  AddOutputFlags(sub, output.get(), /*json_alias=*/true,
                 "Output format: json, yaml, wide, name (POD/VOLUME)");
  sub->callback([=] {
    OutputFormat format;
    *rc = output->Resolve(&format, std::cerr)
              ? RunVolumes(*run_dir, *pod, format, std::cout, std::cerr)
              : kExitUsage;
  });
}

}  // namespace nodelet::ctl

#include "supervisor/ctl_server.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <vector>

#include "lib/common/logging.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"

namespace nodelet::supervisor {
namespace {

using ipc::ctl::Body;
using ipc::ctl::CtlMessage;
using ipc::ctl::RequestKind;

// Requests are small; replies (a runtime view of hundreds of pods) have their own limit.
constexpr size_t kMaxCtlBytes = ipc::kCtlChannel.requests.max_message_bytes;

struct Result {
  std::string name;
  bool ok = false;
  std::string message;
};

}  // namespace

struct CtlServer::Impl {
  Impl(ipc::Context& ctx, ServiceControl& s, const Clock& c, CtlServerOptions o)
      : services(s),
        clock(c),
        options(std::move(o)),
        router(ctx, ipc::kCtlChannel),
        envelope(ipc::ServiceId::Supervisor, ipc::NewIncarnation()),
        log(GetLogger("ctl")) {}

  struct Pending {
    std::string peer;
    std::vector<Result> results;
    size_t remaining = 0;
  };

  ServiceControl& services;
  const Clock& clock;
  CtlServerOptions options;
  ipc::RouterServer router;
  ipc::EnvelopeWriter envelope;
  std::shared_ptr<spdlog::logger> log;
  std::map<uint64_t, Pending> pending;
  uint64_t next_pending = 1;
  // Read by other threads (the HTTP endpoint's /metrics, tests) while the server thread counts.
  std::atomic<uint64_t> requests{0};
  ipc::BadMessageCounter bad_requests;

  void SendReply(const std::string& peer, bool ok, const std::string& error,
                 const std::vector<ServiceInfo>* infos, const std::vector<Result>* results,
                 bool with_pid, bool with_version) {
    flatbuffers::FlatBufferBuilder fbb(1024);
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<ipc::ctl::ServiceStatus>>> svcs;
    if (infos != nullptr) {
      std::vector<flatbuffers::Offset<ipc::ctl::ServiceStatus>> v;
      for (const auto& i : *infos) {
        v.push_back(ipc::ctl::CreateServiceStatusDirect(
            fbb, i.name.c_str(), i.state, i.pid, i.uptime_ms, i.description.c_str(), i.restarts,
            i.health.c_str(), i.log_path.c_str(), i.state_since_epoch_s));
      }
      svcs = fbb.CreateVector(v);
    }
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<ipc::ctl::ActionResult>>> res;
    if (results != nullptr) {
      std::vector<flatbuffers::Offset<ipc::ctl::ActionResult>> v;
      for (const auto& r : *results) {
        v.push_back(
            ipc::ctl::CreateActionResultDirect(fbb, r.name.c_str(), r.ok, r.message.c_str()));
      }
      res = fbb.CreateVector(v);
    }
    auto err = fbb.CreateString(error);
    auto version = with_version ? fbb.CreateString(options.version) : 0;
    auto reply = ipc::ctl::CreateCtlReply(fbb, ok, err, svcs, res,
                                          with_pid ? options.supervisor_pid : 0, version);
    // A client that went away is not an error worth more than a debug line.
    if (Status s = ipc::SendMessage(router, peer, fbb, envelope, Body::CtlReply, reply.Union());
        !s.ok()) {
      log->debug("Failed to answer a ctl client: {}", s.message());
    }
  }

  void SendNode(const std::string& peer) {
    flatbuffers::FlatBufferBuilder fbb(16 * 1024);
    std::string json = options.node ? options.node->NodeJson() : "";
    auto err = fbb.CreateString(
        options.node ? "" : "this nodelet has no runtime endpoint: no node status");
    auto node = fbb.CreateString(json);
    ipc::ctl::CtlReplyBuilder b(fbb);
    b.add_ok(options.node != nullptr);
    b.add_error(err);
    b.add_node_json(node);
    auto reply = b.Finish();
    // A client that went away takes its answer with it.
    (void)ipc::SendMessage(router, peer, fbb, envelope, Body::CtlReply, reply.Union());
  }

  void SendRuntime(const std::string& peer) {
    RuntimeSnapshot snap;
    if (options.runtime == nullptr) {
      snap.error = "this nodelet has no runtime view";
    } else {
      snap = options.runtime->Runtime();
    }
    flatbuffers::FlatBufferBuilder fbb(16 * 1024);
    std::vector<flatbuffers::Offset<ipc::pleg::PodRecord>> pods;
    for (const auto& p : snap.pods) pods.push_back(ipc::pleg::PodRecord::Pack(fbb, &p));
    auto pods_vec = fbb.CreateVector(pods);
    auto err = fbb.CreateString(snap.error);
    ipc::ctl::CtlReplyBuilder b(fbb);
    b.add_ok(true);
    b.add_runtime_pods(pods_vec);
    b.add_runtime_relist(snap.relist);
    b.add_runtime_error(err);
    auto reply = b.Finish();
    if (Status s = ipc::SendMessage(router, peer, fbb, envelope, Body::CtlReply, reply.Union());
        !s.ok()) {
      log->debug("Failed to answer a ctl client: {}", s.message());
    }
  }

  void SendManifests(const std::string& peer) {
    ManifestReport report;
    if (options.manifests != nullptr) report = options.manifests->Manifests();
    flatbuffers::FlatBufferBuilder fbb(16 * 1024);
    std::vector<flatbuffers::Offset<ipc::ctl::ManifestSource>> sources;
    for (const auto& s : report.sources) sources.push_back(ipc::ctl::ManifestSource::Pack(fbb, &s));
    std::vector<flatbuffers::Offset<ipc::ctl::ManifestStatus>> manifests;
    for (const auto& m : report.manifests) {
      manifests.push_back(ipc::ctl::ManifestStatus::Pack(fbb, &m));
    }
    auto sources_vec = fbb.CreateVector(sources);
    auto manifests_vec = fbb.CreateVector(manifests);
    auto err = fbb.CreateString(options.manifests ? "" : "this nodelet has no pod manager");
    ipc::ctl::CtlReplyBuilder b(fbb);
    b.add_ok(options.manifests != nullptr);
    b.add_error(err);
    b.add_manifest_sources(sources_vec);
    b.add_manifests(manifests_vec);
    auto reply = b.Finish();
    if (Status s = ipc::SendMessage(router, peer, fbb, envelope, Body::CtlReply, reply.Union());
        !s.ok()) {
      log->debug("Failed to answer a ctl client: {}", s.message());
    }
  }

  void SendStream(const std::string& peer, const ipc::podwork::StreamReplyT& stream) {
    flatbuffers::FlatBufferBuilder fbb(512 + stream.url.size());
    auto body = ipc::podwork::StreamReply::Pack(fbb, &stream);
    ipc::ctl::CtlReplyBuilder b(fbb);
    b.add_ok(true);
    b.add_stream_reply(body);
    auto reply = b.Finish();
    if (Status s = ipc::SendMessage(router, peer, fbb, envelope, Body::CtlReply, reply.Union());
        !s.ok()) {
      log->debug("Failed to answer a ctl client: {}", s.message());
    }
  }

  // A session for nodeletctl: asked of podworkerd through the relay, answered when it has
  // (or has not within the relay's deadline). The loop goes on meanwhile.
  void Stream(std::shared_ptr<Impl> self, const std::string& peer,
              const ipc::ctl::CtlRequest& req) {
    if (req.stream() == nullptr) {
      Refuse(peer, "a stream request without the session asked for");
      return;
    }
    if (options.streams == nullptr) {
      Refuse(peer, "this nodelet opens no streaming sessions");
      return;
    }
    ipc::podwork::StreamRequestT ask;
    req.stream()->UnPackTo(&ask);
    std::weak_ptr<Impl> weak = self;
    options.streams->Open(ask, [weak, peer](const ipc::podwork::StreamReplyT& reply) {
      if (auto impl = weak.lock()) impl->SendStream(peer, reply);
    });
  }

  void Refuse(const std::string& peer, const std::string& why) {
    if (bad_requests.Count()) log->warn("Refusing a bad ctl request: {}", why);
    SendReply(peer, false, why, nullptr, nullptr, false, false);
  }

  // Names from the request: empty or "all" means every service. Unknown names go to `unknown`.
  std::vector<std::string> Expand(const ipc::ctl::CtlRequest& req, std::vector<Result>& unknown) {
    std::vector<std::string> names;
    bool all = req.services() == nullptr || req.services()->size() == 0;
    if (!all) {
      for (const auto* n : *req.services()) {
        if (n != nullptr && n->str() == "all") all = true;
      }
    }
    if (all) {
      for (const auto& i : services.List()) names.push_back(i.name);
      return names;
    }
    for (const auto* n : *req.services()) {
      std::string name = n == nullptr ? "" : n->str();
      if (services.Has(name)) {
        names.push_back(name);
      } else {
        unknown.push_back({name, false, "no such process"});
      }
    }
    return names;
  }

  std::vector<ServiceInfo> Select(const std::vector<std::string>& names) {
    std::vector<ServiceInfo> out;
    for (const auto& info : services.List()) {
      for (const auto& n : names) {
        if (n == info.name) out.push_back(info);
      }
    }
    return out;
  }

  void Handle(std::shared_ptr<Impl> self, const std::string& peer,
              const ipc::ctl::CtlRequest& req) {
    std::vector<Result> unknown;
    std::vector<std::string> names = Expand(req, unknown);
    switch (req.kind()) {
      case RequestKind::Status:
      case RequestKind::LogPath: {
        auto infos = Select(names);
        SendReply(peer, true, "", &infos, &unknown, false, false);
        return;
      }
      case RequestKind::Pid: {
        bool none = req.services() == nullptr || req.services()->size() == 0;
        auto infos = none ? std::vector<ServiceInfo>{} : Select(names);
        SendReply(peer, true, "", &infos, &unknown, true, false);
        return;
      }
      case RequestKind::Version:
        SendReply(peer, true, "", nullptr, nullptr, true, true);
        return;
      case RequestKind::Node:
        SendNode(peer);
        return;
      case RequestKind::Runtime:
        SendRuntime(peer);
        return;
      case RequestKind::Manifests:
        SendManifests(peer);
        return;
      case RequestKind::Stream:
        Stream(self, peer, req);
        return;
      case RequestKind::Start:
      case RequestKind::Stop:
      case RequestKind::Restart:
        break;
      default:
        Refuse(peer, "unknown request kind " + std::to_string(static_cast<int>(req.kind())));
        return;
    }
    if (req.services() == nullptr || req.services()->size() == 0) {
      Refuse(peer, "name the services to act on, or 'all'");
      return;
    }
    const uint64_t id = next_pending++;
    Pending& p = pending[id];
    p.peer = peer;
    p.results = unknown;
    p.remaining = names.size();
    if (p.remaining == 0) {
      Finish(id);
      return;
    }
    const RequestKind kind = req.kind();
    for (const auto& name : names) {
      std::weak_ptr<Impl> weak = self;
      DoneCallback done = [weak, id, name](bool ok, const std::string& message) {
        auto impl = weak.lock();
        if (!impl) return;
        auto it = impl->pending.find(id);
        if (it == impl->pending.end()) return;
        it->second.results.push_back({name, ok, message});
        if (--it->second.remaining == 0) impl->Finish(id);
      };
      if (kind == RequestKind::Start) {
        services.Start(name, done);
      } else if (kind == RequestKind::Stop) {
        services.Stop(name, done);
      } else {
        services.Restart(name, done);
      }
    }
  }

  void Finish(uint64_t id) {
    auto it = pending.find(id);
    if (it == pending.end()) return;
    Pending p = std::move(it->second);
    pending.erase(it);
    SendReply(p.peer, true, "", nullptr, &p.results, false, false);
  }
};

CtlServer::CtlServer(ipc::Context& ctx, ServiceControl& services, const Clock& clock,
                     CtlServerOptions options)
    : impl_(std::make_shared<Impl>(ctx, services, clock, std::move(options))) {}

CtlServer::~CtlServer() = default;

Status CtlServer::Bind() {
  return impl_->router.Bind(ipc::kCtlEndpoint.Uri(impl_->options.run_dir), 0600);
}

zmq::pollitem_t CtlServer::PollItem() { return impl_->router.PollItem(); }

void CtlServer::OnReadable() {
  for (int i = 0; i < 64 && impl_->router.Readable(); ++i) {
    auto in = impl_->router.Receive(std::chrono::milliseconds(0));
    if (!in.ok()) {
      // A malformed multipart message has no peer we can answer: dropped and counted.
      if (in.status().code() != StatusCode::kDeadlineExceeded) impl_->bad_requests.CountSilently();
      continue;
    }
    ++impl_->requests;
    auto msg = ipc::DecodeMessage<CtlMessage>(in->payload.data(), in->payload.size(),
                                              ipc::ctl::CtlMessageIdentifier(), kMaxCtlBytes);
    if (!msg.ok()) {
      impl_->Refuse(in->peer, msg.status().message());
      continue;
    }
    const auto* req = (*msg)->body_as_CtlRequest();
    if (req == nullptr) {
      impl_->Refuse(in->peer, "expected a CtlRequest");
      continue;
    }
    impl_->Handle(impl_, in->peer, *req);
  }
}

uint64_t CtlServer::bad_requests() const { return impl_->bad_requests.count(); }
uint64_t CtlServer::requests() const { return impl_->requests.load(); }

}  // namespace nodelet::supervisor

// The services' control socket: their hellos (each answered with a welcome) and heartbeats (health,
// counters), and the commands sent to them (say hello again, reload).
#include "lib/ipc/message.h"
#include "supervisor/supervisor_impl.h"

namespace nodelet::supervisor {
namespace {

using ipc::control::Body;
using ipc::control::ControlMessage;

std::string NameOf(ipc::ServiceId id) {
  switch (id) {
    case ipc::ServiceId::Plegd:
      return "plegd";
    case ipc::ServiceId::Statusd:
      return "statusd";
    case ipc::ServiceId::Volumed:
      return "volumed";
    case ipc::ServiceId::Podworkerd:
      return "podworkerd";
    default:
      return "";
  }
}

}  // namespace

void Supervisor::Impl::SendCommand(const std::string& peer, ipc::control::CommandKind kind,
                                   const std::string& log_level) {
  static uint64_t next_id = 1;
  flatbuffers::FlatBufferBuilder fbb(128);
  auto level = log_level.empty() ? 0 : fbb.CreateString(log_level);
  auto cmd = ipc::control::CreateCommand(fbb, next_id++, kind, level);
  // A full queue means the service is away; it says hello again when it is back.
  (void)ipc::SendMessage(*control_, peer, fbb, *envelope_, Body::Command, cmd.Union());
}

// The services are asked to reload once per reload of the supervisor's: those it knows now at
// once, the others (a hello lost at start, a service restarted since) at their next message.
void Supervisor::Impl::SendReload(const std::string& name, const std::string& peer) {
  if (reloads_ == 0 || reloaded_[name] == reloads_) return;
  SendCommand(peer, ipc::control::CommandKind::ReloadConfig, options_.common.log_level);
  reloaded_[name] = reloads_;
}

void Supervisor::Impl::HandleControl() {
  for (int i = 0; i < 256 && control_->Readable(); ++i) {
    auto in = control_->Receive(std::chrono::milliseconds(0));
    if (!in.ok()) continue;
    auto msg = ipc::DecodeMessage<ControlMessage>(in->payload.data(), in->payload.size(),
                                                  ipc::control::ControlMessageIdentifier());
    if (!msg.ok()) {
      if (bad_control_.Count()) {
        log_->warn("Dropping a bad control message: {}", msg.status().message());
      }
      continue;
    }
    const ControlMessage* m = *msg;
    std::string name = NameOf(m->header()->sender());
    if (name.empty() || !services().Has(name)) continue;
    const bool new_peer = peers_[name] != in->peer;
    peers_[name] = in->peer;
    ++service_messages_[name];
    if (const auto* hello = m->body_as_Hello()) {
      hello_seen_.insert(in->peer);
      // A new process: it started with the command line of nodelet's start.
      reloaded_.erase(name);
      services().OnReady(name, hello->pid());
      // Its health from the start: until its first heartbeat a service that is not yet
      // fine (podworkerd without plegd's cache) must not show as Ok.
      services().OnHeartbeat(name, hello->health(), hello->reason() ? hello->reason()->str() : "");
      if (name == "podworkerd" || name == "volumed") pods_->OnPodworkerdReady();
      flatbuffers::FlatBufferBuilder fbb(128);
      auto w = ipc::control::CreateWelcome(fbb, incarnation_, 0);
      // Lost only with the peer, whose next hello is welcomed again.
      (void)ipc::SendMessage(*control_, in->peer, fbb, *envelope_, Body::Welcome, w.Union());
    } else if (const auto* hb = m->body_as_Heartbeat()) {
      services().OnHeartbeat(name, hb->health(), hb->reason() ? hb->reason()->str() : "");
      // A service that outlived a supervisor restart (systemd mode) has not said hello to
      // this incarnation: ask it to, so its pid is known.
      if (new_peer && hello_seen_.count(in->peer) == 0)
        SendCommand(in->peer, ipc::control::CommandKind::Hello);
      if (hb->counters()) {
        auto& mine = service_counters_[name];
        mine.clear();
        for (const auto* counter : *hb->counters()) {
          if (counter->name()) mine[counter->name()->str()] = counter->value();
        }
      }
    }
    SendReload(name, in->peer);
  }
}

}  // namespace nodelet::supervisor

#include "lib/status/status_codec.h"

#include <cstring>

#include "lib/common/utf8.h"
#include "lib/ipc/message.h"

namespace nodelet::status {
namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// Statuses and events carry a container's and a manifest's text: every string is valid UTF-8
// on the wire and after it (invalid sequences become U+FFFD), so no serializer downstream
// (JSON for /pods, etcd, nodeletctl) meets bytes it cannot write.
std::string Str(const flatbuffers::String* s) {
  return s == nullptr ? std::string() : ValidUtf8(s->string_view());
}

std::vector<std::string> Strs(const flatbuffers::Vector<Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const auto* s : *v) out.push_back(Str(s));
  return out;
}

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> WriteStrs(
    FlatBufferBuilder& fbb, const std::vector<std::string>& v) {
  if (v.empty()) return 0;
  std::vector<std::string> valid;
  valid.reserve(v.size());
  for (const auto& s : v) valid.push_back(ValidUtf8(s));
  return fbb.CreateVectorOfStrings(valid);
}

Offset<flatbuffers::String> WriteStr(FlatBufferBuilder& fbb, const std::string& s) {
  return s.empty() ? Offset<flatbuffers::String>() : fbb.CreateString(ValidUtf8(s));
}

Offset<fb::ContainerState> WriteState(FlatBufferBuilder& fbb, const ContainerState& state) {
  if (state.empty()) return 0;
  Offset<fb::ContainerStateWaiting> waiting;
  Offset<fb::ContainerStateRunning> running;
  Offset<fb::ContainerStateTerminated> terminated;
  if (state.waiting) {
    auto reason = WriteStr(fbb, state.waiting->reason);
    auto message = WriteStr(fbb, state.waiting->message);
    waiting = fb::CreateContainerStateWaiting(fbb, reason, message);
  }
  if (state.running) {
    running = fb::CreateContainerStateRunning(fbb, state.running->started_at_unix_s);
  }
  if (state.terminated) {
    const auto& t = *state.terminated;
    auto reason = WriteStr(fbb, t.reason);
    auto message = WriteStr(fbb, t.message);
    auto id = WriteStr(fbb, t.container_id);
    terminated = fb::CreateContainerStateTerminated(fbb, t.exit_code, t.signal, reason, message,
                                                    t.started_at_unix_s, t.finished_at_unix_s, id);
  }
  return fb::CreateContainerState(fbb, waiting, running, terminated);
}

ContainerState ReadState(const fb::ContainerState* s) {
  ContainerState out;
  if (s == nullptr) return out;
  if (const auto* w = s->waiting())
    out.waiting = ContainerStateWaiting{Str(w->reason()), Str(w->message())};
  if (const auto* r = s->running()) out.running = ContainerStateRunning{r->started_at_unix_s()};
  if (const auto* t = s->terminated()) {
    out.terminated = ContainerStateTerminated{t->exit_code(),         t->signal(),
                                              Str(t->reason()),       Str(t->message()),
                                              t->started_at_unix_s(), t->finished_at_unix_s(),
                                              Str(t->container_id())};
  }
  return out;
}

Offset<flatbuffers::Vector<Offset<fb::ContainerStatus>>> WriteContainers(
    FlatBufferBuilder& fbb, const std::vector<ContainerStatus>& containers) {
  if (containers.empty()) return 0;
  std::vector<Offset<fb::ContainerStatus>> offs;
  offs.reserve(containers.size());
  for (const auto& c : containers) {
    auto name = WriteStr(fbb, c.name);
    auto state = WriteState(fbb, c.state);
    auto last = WriteState(fbb, c.last_state);
    auto image = WriteStr(fbb, c.image);
    auto image_id = WriteStr(fbb, c.image_id);
    auto id = WriteStr(fbb, c.container_id);
    offs.push_back(fb::CreateContainerStatus(fbb, name, state, last, c.ready, c.restart_count,
                                             image, image_id, id, c.started));
  }
  return fbb.CreateVector(offs);
}

std::vector<ContainerStatus> ReadContainers(
    const flatbuffers::Vector<Offset<fb::ContainerStatus>>* v) {
  std::vector<ContainerStatus> out;
  if (v == nullptr) return out;
  out.reserve(v->size());
  for (const auto* c : *v) {
    ContainerStatus cs;
    cs.name = Str(c->name());
    cs.state = ReadState(c->state());
    cs.last_state = ReadState(c->last_state());
    cs.ready = c->ready();
    cs.restart_count = c->restart_count();
    cs.image = Str(c->image());
    cs.image_id = Str(c->image_id());
    cs.container_id = Str(c->container_id());
    cs.started = c->started();
    out.push_back(std::move(cs));
  }
  return out;
}

}  // namespace

Offset<fb::PodIdentity> WritePodIdentity(FlatBufferBuilder& fbb, const PodIdentity& pod) {
  auto ns = WriteStr(fbb, pod.namespace_);
  auto name = WriteStr(fbb, pod.name);
  auto uid = WriteStr(fbb, pod.uid);
  return fb::CreatePodIdentity(
      fbb, ns, name, uid, static_cast<fb::RestartPolicy>(pod.restart_policy),
      pod.creation_time_unix_s, pod.container_count, pod.init_container_count);
}

Offset<fb::PodStatus> WritePodStatus(FlatBufferBuilder& fbb, const PodStatus& status) {
  Offset<flatbuffers::Vector<Offset<fb::PodCondition>>> conditions;
  if (!status.conditions.empty()) {
    std::vector<Offset<fb::PodCondition>> offs;
    offs.reserve(status.conditions.size());
    for (const auto& c : status.conditions) {
      auto type = WriteStr(fbb, c.type);
      auto reason = WriteStr(fbb, c.reason);
      auto message = WriteStr(fbb, c.message);
      offs.push_back(fb::CreatePodCondition(fbb, type, static_cast<fb::ConditionStatus>(c.status),
                                            c.last_probe_time_unix_s, c.last_transition_time_unix_s,
                                            reason, message));
    }
    conditions = fbb.CreateVector(offs);
  }
  auto message = WriteStr(fbb, status.message);
  auto reason = WriteStr(fbb, status.reason);
  auto host_ip = WriteStr(fbb, status.host_ip);
  auto host_ips = WriteStrs(fbb, status.host_ips);
  auto pod_ip = WriteStr(fbb, status.pod_ip);
  auto pod_ips = WriteStrs(fbb, status.pod_ips);
  auto init = WriteContainers(fbb, status.init_container_statuses);
  auto containers = WriteContainers(fbb, status.container_statuses);
  auto qos = WriteStr(fbb, status.qos_class);
  return fb::CreatePodStatus(fbb, static_cast<fb::PodPhase>(status.phase), conditions, message,
                             reason, host_ip, host_ips, pod_ip, pod_ips, status.start_time_unix_s,
                             init, containers, qos);
}

Offset<fb::PodStatusRecord> WritePodStatusRecord(FlatBufferBuilder& fbb,
                                                 const PodStatusRecord& record) {
  auto pod = WritePodIdentity(fbb, record.pod);
  auto status = WritePodStatus(fbb, record.status);
  return fb::CreatePodStatusRecord(fbb, pod, status, record.version, record.updated_at_unix_s);
}

PodIdentity ReadPodIdentity(const fb::PodIdentity* pod) {
  PodIdentity out;
  if (pod == nullptr) return out;
  out.namespace_ = Str(pod->namespace_());
  out.name = Str(pod->name());
  out.uid = Str(pod->uid());
  out.restart_policy = static_cast<RestartPolicy>(pod->restart_policy());
  out.creation_time_unix_s = pod->creation_time_unix_s();
  out.container_count = pod->container_count();
  out.init_container_count = pod->init_container_count();
  return out;
}

PodStatus ReadPodStatus(const fb::PodStatus* s) {
  PodStatus out;
  if (s == nullptr) return out;
  out.phase = static_cast<PodPhase>(s->phase());
  if (const auto* conds = s->conditions()) {
    out.conditions.reserve(conds->size());
    for (const auto* c : *conds) {
      out.conditions.push_back(PodCondition{
          Str(c->type()), static_cast<ConditionStatus>(c->status()), c->last_probe_time_unix_s(),
          c->last_transition_time_unix_s(), Str(c->reason()), Str(c->message())});
    }
  }
  out.message = Str(s->message());
  out.reason = Str(s->reason());
  out.host_ip = Str(s->host_ip());
  out.host_ips = Strs(s->host_ips());
  out.pod_ip = Str(s->pod_ip());
  out.pod_ips = Strs(s->pod_ips());
  out.start_time_unix_s = s->start_time_unix_s();
  out.init_container_statuses = ReadContainers(s->init_container_statuses());
  out.container_statuses = ReadContainers(s->container_statuses());
  out.qos_class = Str(s->qos_class());
  return out;
}

PodStatusRecord ReadPodStatusRecord(const fb::PodStatusRecord* record) {
  PodStatusRecord out;
  if (record == nullptr) return out;
  out.pod = ReadPodIdentity(record->pod());
  out.status = ReadPodStatus(record->status());
  out.version = record->version();
  out.updated_at_unix_s = record->updated_at_unix_s();
  return out;
}

void FinishStatusMessage(FlatBufferBuilder& fbb, ipc::EnvelopeWriter& envelope, fb::Body type,
                         Offset<void> body) {
  ipc::FinishMessage(fbb, envelope, type, body);
}

Result<const fb::StatusMessage*> DecodeStatusMessage(const void* data, size_t size,
                                                     size_t max_bytes) {
  return ipc::DecodeMessage<fb::StatusMessage>(data, size, fb::StatusMessageIdentifier(),
                                               max_bytes);
}

flatbuffers::Offset<fb::EventRecord> WriteEvent(flatbuffers::FlatBufferBuilder& fbb,
                                                const PodEvent& e) {
  return fb::CreateEventRecordDirect(fbb, e.pod_uid.c_str(), e.namespace_.c_str(),
                                     e.pod_name.c_str(), e.type.c_str(), e.reason.c_str(),
                                     e.message.c_str(), e.source.c_str(), e.count, e.first_unix_s,
                                     e.last_unix_s);
}

PodEvent ReadEvent(const fb::EventRecord* e) {
  PodEvent out;
  auto s = [](const flatbuffers::String* v) { return v ? v->str() : std::string(); };
  out.pod_uid = s(e->pod_uid());
  out.namespace_ = s(e->namespace_());
  out.pod_name = s(e->pod_name());
  out.type = s(e->type());
  out.reason = s(e->reason());
  out.message = s(e->message());
  out.source = s(e->source());
  out.count = e->count();
  out.first_unix_s = e->first_unix_s();
  out.last_unix_s = e->last_unix_s();
  return out;
}

uint64_t RequestIdOf(const fb::StatusMessage& m) {
  if (m.body() == nullptr) return 0;
  switch (m.body_type()) {
    case fb::Body::SetPodStatusRequest:
      return m.body_as_SetPodStatusRequest()->request_id();
    case fb::Body::SetPodStatusReply:
      return m.body_as_SetPodStatusReply()->request_id();
    case fb::Body::GetPodStatusRequest:
      return m.body_as_GetPodStatusRequest()->request_id();
    case fb::Body::GetPodStatusReply:
      return m.body_as_GetPodStatusReply()->request_id();
    case fb::Body::ListPodStatusesRequest:
      return m.body_as_ListPodStatusesRequest()->request_id();
    case fb::Body::ListPodStatusesReply:
      return m.body_as_ListPodStatusesReply()->request_id();
    case fb::Body::TerminatePodRequest:
      return m.body_as_TerminatePodRequest()->request_id();
    case fb::Body::RemoveOrphanedStatusesRequest:
      return m.body_as_RemoveOrphanedStatusesRequest()->request_id();
    case fb::Body::RemoveOrphanedStatusesReply:
      return m.body_as_RemoveOrphanedStatusesReply()->request_id();
    case fb::Body::ErrorReply:
      return m.body_as_ErrorReply()->request_id();
    case fb::Body::RecordEventsRequest:
      return m.body_as_RecordEventsRequest()->request_id();
    case fb::Body::RecordEventsReply:
      return m.body_as_RecordEventsReply()->request_id();
    case fb::Body::ListEventsRequest:
      return m.body_as_ListEventsRequest()->request_id();
    case fb::Body::ListEventsReply:
      return m.body_as_ListEventsReply()->request_id();
    case fb::Body::SetNodeStatusRequest:
      return m.body_as_SetNodeStatusRequest()->request_id();
    case fb::Body::SetNodeStatusReply:
      return m.body_as_SetNodeStatusReply()->request_id();
    case fb::Body::GetNodeStatusRequest:
      return m.body_as_GetNodeStatusRequest()->request_id();
    case fb::Body::GetNodeStatusReply:
      return m.body_as_GetNodeStatusReply()->request_id();
    default:
      return 0;
  }
}

// ErrorCode mirrors StatusCode value for value (ipc-schemas/status.fbs): a code added to one
// is added to the other.
static_assert(static_cast<int>(fb::ErrorCode::MAX) == static_cast<int>(StatusCode::kOutOfRange));

fb::ErrorCode ToErrorCode(StatusCode code) { return static_cast<fb::ErrorCode>(code); }

StatusCode FromErrorCode(fb::ErrorCode code) {
  auto v = static_cast<uint8_t>(code);
  if (v > static_cast<uint8_t>(fb::ErrorCode::MAX)) return StatusCode::kInternal;
  return static_cast<StatusCode>(v);
}

std::string EncodeRecordBlob(const PodStatusRecord& record) {
  FlatBufferBuilder fbb(1024);
  fbb.Finish(WritePodStatusRecord(fbb, record));
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Result<PodStatusRecord> DecodeRecordBlob(const void* data, size_t size) {
  if (data == nullptr || size < sizeof(flatbuffers::uoffset_t)) {
    return InvalidArgument("record blob of " + std::to_string(size) + " bytes is too short");
  }
  // SQLite hands out blobs at any address; FlatBuffers reads scalars in place.
  std::vector<uint64_t> aligned;
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    std::memcpy(aligned.data(), data, size);
    data = aligned.data();
  }
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(data), size, 32, 100000);
  if (!verifier.VerifyBuffer<fb::PodStatusRecord>(nullptr)) {
    return InvalidArgument("record blob failed FlatBuffers verification");
  }
  return ReadPodStatusRecord(flatbuffers::GetRoot<fb::PodStatusRecord>(data));
}

}  // namespace nodelet::status

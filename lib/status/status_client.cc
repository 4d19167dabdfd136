#include "lib/status/status_client.h"

#include "lib/ipc/endpoints.h"
#include "lib/status/status_codec.h"

namespace nodelet::status {
namespace {

using flatbuffers::FlatBufferBuilder;

// Request ids start at a random point so replies meant for an earlier process (same routing
// after a reconnect) never match.
uint64_t FirstRequestId() { return (ipc::NewIncarnation() >> 16) << 8; }

// An ErrorReply as a Status; OK for anything else.
Status ErrorOf(const fb::StatusMessage& m) {
  if (m.body_type() != fb::Body::ErrorReply) return Status::Ok();
  const auto* e = m.body_as_ErrorReply();
  StatusCode code = FromErrorCode(e->code());
  if (code == StatusCode::kOk) code = StatusCode::kInternal;
  return Status(code, e->message() ? e->message()->str() : "statusd refused the request");
}

Status BadReply(const std::string& uri, const std::string& why) {
  return Internal("bad reply from statusd at '" + uri + "': " + why);
}

// The check every verified reply passes: an ErrorReply becomes its Status, any other body than
// `expected` is a bad reply.
Status CheckReply(const fb::StatusMessage& m, fb::Body expected, const std::string& uri) {
  if (Status s = ErrorOf(m); !s.ok()) return s;
  if (m.body_type() != expected)
    return BadReply(uri, std::string("not a ") + fb::EnumNameBody(expected));
  return Status::Ok();
}

// A SetPodStatusReply that passed CheckReply.
SetResult ReadSetReply(const fb::StatusMessage& m) {
  const auto* r = m.body_as_SetPodStatusReply();
  return SetResult{r->version(), r->changed()};
}

}  // namespace

StatusClient::StatusClient(ipc::Context& ctx, const std::string& run_dir,
                           StatusClientOptions options)
    : uri_(ipc::kStatusEndpoint.Uri(run_dir)),
      options_(options),
      envelope_(options.sender, ipc::NewIncarnation()),
      client_(ctx, uri_, kMaxReplyBytes),
      next_id_(FirstRequestId()) {}

Status StatusClient::Connect() { return client_.Connect(); }

Result<StatusClient::VerifiedReply> StatusClient::Call(FlatBufferBuilder& fbb, uint64_t id,
                                                       fb::Body expected) {
  // The match verifies every candidate; the reply it accepts is not verified again.
  auto frame = client_.Call(fbb.GetBufferPointer(), fbb.GetSize(), options_.attempt_timeout,
                            options_.deadline, [id](const ipc::Frame& f) {
                              auto m = DecodeStatusMessage(f.data(), f.size(), kMaxReplyBytes);
                              return m.ok() && RequestIdOf(**m) == id;
                            });
  if (!frame.ok()) return frame.status();
  VerifiedReply reply(std::move(frame).value());
  if (Status s = CheckReply(reply.message(), expected, uri_); !s.ok()) return s;
  return reply;
}

Result<SetResult> StatusClient::SetPodStatus(const PodIdentity& pod, const PodStatus& status) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(1024);
  auto p = WritePodIdentity(fbb, pod);
  auto s = WritePodStatus(fbb, status);
  FinishStatusMessage(fbb, envelope_, fb::Body::SetPodStatusRequest,
                      fb::CreateSetPodStatusRequest(fbb, id, p, s).Union());
  auto reply = Call(fbb, id, fb::Body::SetPodStatusReply);
  if (!reply.ok()) return reply.status();
  return ReadSetReply(reply->message());
}

Result<PodStatusRecord> StatusClient::GetPodStatus(const std::string& uid) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(256);
  auto u = fbb.CreateString(uid);
  FinishStatusMessage(fbb, envelope_, fb::Body::GetPodStatusRequest,
                      fb::CreateGetPodStatusRequest(fbb, id, u).Union());
  auto reply = Call(fbb, id, fb::Body::GetPodStatusReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  if (!m->body_as_GetPodStatusReply()->record()) {
    return BadReply(uri_, "not a GetPodStatusReply with a record");
  }
  return ReadPodStatusRecord(m->body_as_GetPodStatusReply()->record());
}

Result<uint32_t> StatusClient::RecordEvents(const std::vector<PodEvent>& events) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<fb::EventRecord>> offs;
  for (const auto& e : events) offs.push_back(WriteEvent(fbb, e));
  auto vec = fbb.CreateVector(offs);
  FinishStatusMessage(fbb, envelope_, fb::Body::RecordEventsRequest,
                      fb::CreateRecordEventsRequest(fbb, id, vec).Union());
  auto reply = Call(fbb, id, fb::Body::RecordEventsReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  return m->body_as_RecordEventsReply()->stored();
}

Result<std::vector<PodEvent>> StatusClient::ListEvents(const std::string& uid) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(256);
  auto u = uid.empty() ? 0 : fbb.CreateString(uid);
  FinishStatusMessage(fbb, envelope_, fb::Body::ListEventsRequest,
                      fb::CreateListEventsRequest(fbb, id, u).Union());
  auto reply = Call(fbb, id, fb::Body::ListEventsReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  std::vector<PodEvent> out;
  if (const auto* list = m->body_as_ListEventsReply()->events()) {
    for (const auto* e : *list) out.push_back(ReadEvent(e));
  }
  return out;
}

Result<SetResult> StatusClient::SetNodeStatus(const std::string& node_json) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(node_json.size() + 256);
  auto j = fbb.CreateString(node_json);
  FinishStatusMessage(fbb, envelope_, fb::Body::SetNodeStatusRequest,
                      fb::CreateSetNodeStatusRequest(fbb, id, j).Union());
  auto reply = Call(fbb, id, fb::Body::SetNodeStatusReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  const auto* r = m->body_as_SetNodeStatusReply();
  SetResult out;
  out.version = r->version();
  out.changed = r->changed();
  return out;
}

Result<NodeStatusRecord> StatusClient::GetNodeStatus() {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(128);
  FinishStatusMessage(fbb, envelope_, fb::Body::GetNodeStatusRequest,
                      fb::CreateGetNodeStatusRequest(fbb, id).Union());
  auto reply = Call(fbb, id, fb::Body::GetNodeStatusReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  const auto* r = m->body_as_GetNodeStatusReply();
  NodeStatusRecord out;
  out.node_json = r->node_json() ? r->node_json()->str() : "";
  out.version = r->version();
  out.updated_at_unix_s = r->updated_at_unix_s();
  return out;
}

Result<PodStatusList> StatusClient::ListPodStatuses(const std::string& namespace_filter) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(256);
  auto ns = namespace_filter.empty() ? 0 : fbb.CreateString(namespace_filter);
  FinishStatusMessage(fbb, envelope_, fb::Body::ListPodStatusesRequest,
                      fb::CreateListPodStatusesRequest(fbb, id, ns).Union());
  auto reply = Call(fbb, id, fb::Body::ListPodStatusesReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  const auto* r = m->body_as_ListPodStatusesReply();
  PodStatusList out;
  out.watch_sequence = r->watch_sequence();
  out.watch_incarnation = r->watch_incarnation();
  if (r->records()) {
    out.records.reserve(r->records()->size());
    for (const auto* rec : *r->records()) out.records.push_back(ReadPodStatusRecord(rec));
  }
  return out;
}

Result<SetResult> StatusClient::TerminatePod(const std::string& uid) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(256);
  auto u = fbb.CreateString(uid);
  FinishStatusMessage(fbb, envelope_, fb::Body::TerminatePodRequest,
                      fb::CreateTerminatePodRequest(fbb, id, u).Union());
  auto reply = Call(fbb, id, fb::Body::SetPodStatusReply);
  if (!reply.ok()) return reply.status();
  return ReadSetReply(reply->message());
}

Result<std::vector<std::string>> StatusClient::RemoveOrphanedStatuses(
    const std::vector<std::string>& keep_uids) {
  uint64_t id = NextId();
  FlatBufferBuilder fbb(256 + keep_uids.size() * 48);
  auto keep = fbb.CreateVectorOfStrings(keep_uids);
  FinishStatusMessage(fbb, envelope_, fb::Body::RemoveOrphanedStatusesRequest,
                      fb::CreateRemoveOrphanedStatusesRequest(fbb, id, keep).Union());
  auto reply = Call(fbb, id, fb::Body::RemoveOrphanedStatusesReply);
  if (!reply.ok()) return reply.status();
  const fb::StatusMessage* m = &reply->message();
  std::vector<std::string> removed;
  if (const auto* v = m->body_as_RemoveOrphanedStatusesReply()->removed_uids()) {
    for (const auto* s : *v) removed.push_back(s->str());
  }
  return removed;
}

PipelinedStatusClient::PipelinedStatusClient(ipc::Context& ctx, const std::string& run_dir,
                                             ipc::ServiceId sender)
    : uri_(ipc::kStatusEndpoint.Uri(run_dir)),
      envelope_(sender, ipc::NewIncarnation()),
      dealer_(ctx, kPipelinedReplyMaxBytes),
      next_id_(FirstRequestId()) {
  // The bytes sent are accounted in SendFinished; the count limit keeps ZeroMQ's own queue from
  // refusing first. Every reply is at most kPipelinedReplyMaxBytes (a larger frame disconnects
  // statusd's pipe before it is read), so the inbound queue holds at most
  // kPipelinedMaxInFlightRequests x kPipelinedReplyMaxBytes = 64 MiB.
  dealer_.raw().set(zmq::sockopt::sndhwm, static_cast<int>(kPipelinedMaxInFlightRequests));
  dealer_.raw().set(zmq::sockopt::rcvhwm, static_cast<int>(kPipelinedMaxInFlightRequests));
}

Status PipelinedStatusClient::Connect() { return dealer_.Connect(uri_); }

Result<uint64_t> PipelinedStatusClient::SendFinished(FlatBufferBuilder& fbb, uint64_t id,
                                                     std::chrono::milliseconds timeout) {
  const size_t size = fbb.GetSize();
  if (in_flight_.size() + 1 > kPipelinedMaxInFlightRequests ||
      in_flight_bytes_ + size > kPipelinedMaxInFlightBytes) {
    return ResourceExhausted(
        "not sending a request of " + std::to_string(size) + " bytes to statusd at '" + uri_ +
        "': " + std::to_string(in_flight_.size()) + " requests (" +
        std::to_string(in_flight_bytes_) + " bytes) await replies, the limit is " +
        std::to_string(kPipelinedMaxInFlightRequests) + " requests or " +
        std::to_string(kPipelinedMaxInFlightBytes) + " bytes; receive replies first");
  }
  // The DEALER queues only for a connected peer: wait until it can take the message.
  zmq::pollitem_t item = dealer_.PollItem(ZMQ_POLLOUT);
  try {
    if (zmq::poll(&item, 1, timeout) == 0) {
      return Unavailable("statusd at '" + uri_ + "' is not accepting requests within " +
                         std::to_string(timeout.count()) + " ms");
    }
  } catch (const zmq::error_t& e) {
    return Internal("Failed to poll '" + uri_ + "': " + e.what());
  }
  if (Status s = dealer_.Send(fbb.GetBufferPointer(), size); !s.ok()) return s;
  in_flight_[id] = size;
  in_flight_bytes_ += size;
  return id;
}

void PipelinedStatusClient::Forget(uint64_t request_id) {
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  in_flight_bytes_ -= it->second;
  in_flight_.erase(it);
}

Result<uint64_t> PipelinedStatusClient::SendSetPodStatus(const PodIdentity& pod,
                                                         const PodStatus& status,
                                                         std::chrono::milliseconds timeout) {
  uint64_t id = ++next_id_;
  FlatBufferBuilder fbb(1024);
  auto p = WritePodIdentity(fbb, pod);
  auto s = WritePodStatus(fbb, status);
  FinishStatusMessage(fbb, envelope_, fb::Body::SetPodStatusRequest,
                      fb::CreateSetPodStatusRequest(fbb, id, p, s).Union());
  return SendFinished(fbb, id, timeout);
}

Result<uint64_t> PipelinedStatusClient::SendTerminatePod(const std::string& uid,
                                                         std::chrono::milliseconds timeout) {
  uint64_t id = ++next_id_;
  FlatBufferBuilder fbb(256);
  auto u = fbb.CreateString(uid);
  FinishStatusMessage(fbb, envelope_, fb::Body::TerminatePodRequest,
                      fb::CreateTerminatePodRequest(fbb, id, u).Union());
  return SendFinished(fbb, id, timeout);
}

Result<PipelinedStatusClient::Reply> PipelinedStatusClient::Receive(
    std::chrono::milliseconds timeout) {
  auto frame = dealer_.Receive(timeout);
  if (!frame.ok()) return frame.status();
  auto m = DecodeStatusMessage(frame->data(), frame->size(), kPipelinedReplyMaxBytes);
  if (!m.ok()) return BadReply(uri_, m.status().message());
  Reply reply;
  reply.request_id = RequestIdOf(**m);
  Forget(reply.request_id);
  if (Status s = CheckReply(**m, fb::Body::SetPodStatusReply, uri_); s.ok()) {
    reply.result = ReadSetReply(**m);
  } else {
    reply.status = s;
  }
  return reply;
}

StatusWatcher::StatusWatcher(ipc::Context& ctx, const std::string& run_dir)
    : uri_(ipc::kStatusWatchEndpoint.Uri(run_dir)),
      subscriber_(ctx, kMaxWatchMessageBytes, kWatchQueueBudgetBytes) {}

Status StatusWatcher::Connect() { return subscriber_.Connect(uri_); }

Result<WatchEvent> StatusWatcher::Next(std::chrono::milliseconds timeout) {
  auto frame = subscriber_.Receive(timeout);
  if (!frame.ok()) return frame.status();
  auto m = DecodeStatusMessage(frame->data(), frame->size(), kMaxWatchMessageBytes);
  if (!m.ok()) return InvalidArgument("bad watch message: " + m.status().message());
  const auto* msg = *m;
  WatchEvent ev;
  ev.sequence = msg->header()->sequence();
  ev.incarnation = msg->header()->incarnation();
  ev.gap = (incarnation_ != 0 && ev.incarnation != incarnation_) ||
           (incarnation_ == ev.incarnation && last_sequence_ != 0 &&
            ev.sequence != last_sequence_ + 1) ||
           (incarnation_ == 0 && ev.sequence != 1);
  incarnation_ = ev.incarnation;
  last_sequence_ = ev.sequence;
  if (msg->body_type() == fb::Body::StatusChanged && msg->body_as_StatusChanged()->record()) {
    ev.kind = WatchEvent::Kind::kChanged;
    ev.record = ReadPodStatusRecord(msg->body_as_StatusChanged()->record());
  } else if (msg->body_type() == fb::Body::StatusRemoved) {
    const auto* r = msg->body_as_StatusRemoved();
    ev.kind = WatchEvent::Kind::kRemoved;
    ev.record.pod.uid = r->uid() ? r->uid()->str() : "";
    ev.record.pod.namespace_ = r->namespace_() ? r->namespace_()->str() : "";
    ev.record.pod.name = r->name() ? r->name()->str() : "";
    ev.record.version = r->version();
  } else {
    return InvalidArgument("unexpected watch message body");
  }
  return ev;
}

}  // namespace nodelet::status

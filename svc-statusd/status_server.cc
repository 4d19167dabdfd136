#include "svc-statusd/status_server.h"

#include <exception>
#include <set>

#include "lib/common/utf8.h"
#include "lib/status/status_codec.h"

namespace nodelet::statusd {
namespace {

namespace fb = ::nodelet::ipc::status;
using flatbuffers::FlatBufferBuilder;

std::string BodyName(fb::Body type) {
  const char* name = fb::EnumNameBody(type);
  if (name != nullptr && *name != '\0') return name;
  return "Body(" + std::to_string(static_cast<int>(type)) + ")";
}

std::string Bytes(const FlatBufferBuilder& fbb) {
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

}  // namespace

struct StatusServer::Pending {
  std::string peer;
  uint64_t id = 0;
  fb::Body kind = fb::Body::NONE;
  // Non-OK: answered with an ErrorReply.
  Status error;
  // SetPodStatus, TerminatePod.
  bool mutation = false;
  std::string uid;
  SetOutcome outcome;
  // RemoveOrphanedStatuses.
  std::vector<std::string> removed;
  // ListPodStatuses.
  std::string namespace_filter;
  // RecordEvents, ListEvents.
  uint32_t stored = 0;
  std::vector<status::PodEvent> events;
  // SetNodeStatus, GetNodeStatus.
  status::NodeStatusRecord node;
  bool node_changed = false;
};

StatusServer::StatusServer(StatusManager& manager, StatusStore& store, uint64_t incarnation,
                           size_t max_request_bytes)
    : manager_(manager),
      store_(store),
      max_request_bytes_(max_request_bytes),
      reply_envelope_(ipc::ServiceId::Statusd, incarnation),
      watch_envelope_(ipc::ServiceId::Statusd, incarnation) {}

void StatusServer::Decode(ipc::Incoming& in, Pending& p, std::vector<StatusChange>& changes,
                          BatchResult& out) {
  p.peer = in.peer;
  auto decoded =
      status::DecodeStatusMessage(in.payload.data(), in.payload.size(), max_request_bytes_);
  if (!decoded.ok()) {
    ++counters_.bad_messages;
    const Status& s = decoded.status();
    p.error = Status(s.code(), "bad request: " + s.message());
    out.refused.push_back(p.error);
    return;
  }
  const fb::StatusMessage* m = *decoded;
  p.kind = m->body_type();
  p.id = status::RequestIdOf(*m);
  auto refuse = [&](Status s) {
    if (s.code() == StatusCode::kInvalidArgument) ++counters_.invalid_requests;
    if (s.code() == StatusCode::kFailedPrecondition) ++counters_.illegal_transitions;
    if (s.code() == StatusCode::kNotFound) ++counters_.not_found;
    out.refused.push_back(s);
    p.error = std::move(s);
  };
  switch (p.kind) {
    case fb::Body::SetPodStatusRequest: {
      const auto* req = m->body_as_SetPodStatusRequest();
      if (req->pod() == nullptr) return refuse(InvalidArgument("SetPodStatusRequest has no pod"));
      if (req->status() == nullptr) {
        return refuse(InvalidArgument("SetPodStatusRequest for uid '" +
                                      status::ReadPodIdentity(req->pod()).uid + "' has no status"));
      }
      p.mutation = true;
      status::PodIdentity pod = status::ReadPodIdentity(req->pod());
      p.uid = pod.uid;
      auto r = manager_.SetPodStatus(pod, status::ReadPodStatus(req->status()), &changes);
      if (!r.ok()) return refuse(r.status());
      p.outcome = *r;
      return;
    }
    case fb::Body::TerminatePodRequest: {
      const auto* req = m->body_as_TerminatePodRequest();
      p.uid = req->uid() ? req->uid()->str() : "";
      if (p.uid.empty()) return refuse(InvalidArgument("TerminatePodRequest has no uid"));
      p.mutation = true;
      auto r = manager_.TerminatePod(p.uid, &changes);
      if (!r.ok()) return refuse(r.status());
      p.outcome = *r;
      return;
    }
    case fb::Body::RemoveOrphanedStatusesRequest: {
      const auto* req = m->body_as_RemoveOrphanedStatusesRequest();
      std::set<std::string> keep;
      if (req->keep_uids()) {
        for (const auto* s : *req->keep_uids()) keep.insert(s->str());
      }
      p.mutation = true;
      p.removed = manager_.RemoveOrphans(keep, &changes);
      return;
    }
    case fb::Body::GetPodStatusRequest: {
      const auto* req = m->body_as_GetPodStatusRequest();
      p.uid = req->uid() ? req->uid()->str() : "";
      if (p.uid.empty()) return refuse(InvalidArgument("GetPodStatusRequest has no uid"));
      return;
    }
    case fb::Body::ListPodStatusesRequest: {
      const auto* req = m->body_as_ListPodStatusesRequest();
      p.namespace_filter = req->namespace_() ? req->namespace_()->str() : "";
      return;
    }
    case fb::Body::RecordEventsRequest: {
      if (events_ == nullptr) return refuse(Unavailable("statusd keeps no events"));
      std::vector<status::PodEvent> events;
      if (const auto* list = m->body_as_RecordEventsRequest()->events()) {
        for (const auto* e : *list) events.push_back(status::ReadEvent(e));
      }
      const int64_t now = manager_.clock().WallSeconds();
      auto r = events_->Record(events, now);
      if (!r.ok()) return refuse(r.status());
      p.stored = *r;
      return;
    }
    case fb::Body::ListEventsRequest: {
      if (events_ == nullptr) return refuse(Unavailable("statusd keeps no events"));
      const auto* req = m->body_as_ListEventsRequest();
      auto r = events_->List(req->uid() ? req->uid()->str() : "");
      if (!r.ok()) return refuse(r.status());
      p.events = std::move(*r);
      return;
    }
    case fb::Body::SetNodeStatusRequest: {
      if (node_ == nullptr) return refuse(Unavailable("statusd keeps no node status"));
      const auto* req = m->body_as_SetNodeStatusRequest();
      if (req->node_json() == nullptr) {
        return refuse(InvalidArgument("SetNodeStatusRequest has no node_json"));
      }
      const int64_t now = manager_.clock().WallSeconds();
      auto r = node_->Set(req->node_json()->str(), now, &p.node_changed);
      if (!r.ok()) return refuse(r.status());
      p.node = std::move(*r);
      return;
    }
    case fb::Body::GetNodeStatusRequest: {
      if (node_ == nullptr) return refuse(Unavailable("statusd keeps no node status"));
      if (!node_->Get()) return refuse(NotFound("no node status yet: the supervisor sends it"));
      p.node = *node_->Get();
      return;
    }
    default:
      return refuse(InvalidArgument(
          "unexpected message body " + BodyName(p.kind) +
          ": statusd serves SetPodStatusRequest, GetPodStatusRequest, ListPodStatusesRequest, "
          "TerminatePodRequest, RemoveOrphanedStatusesRequest, RecordEventsRequest, "
          "ListEventsRequest, SetNodeStatusRequest and GetNodeStatusRequest"));
  }
}

BatchResult StatusServer::HandleBatch(std::vector<ipc::Incoming>& requests) {
  BatchResult out;
  if (requests.empty()) return out;
  ++counters_.batches;
  counters_.requests += requests.size();
  counters_.largest_batch = std::max<uint64_t>(counters_.largest_batch, requests.size());

  std::vector<Pending> pending(requests.size());
  std::vector<StatusChange> changes;
  manager_.BeginBatch();
  for (size_t i = 0; i < requests.size(); ++i) {
    // A request that makes the server throw is answered with an error; the batch and the
    // process go on.
    try {
      Decode(requests[i], pending[i], changes, out);
    } catch (const std::exception& e) {
      ++counters_.handler_errors;
      pending[i].error = Internal("the request failed: " + ValidUtf8(e.what()));
      out.refused.push_back(pending[i].error);
    }
  }

  if (!changes.empty()) {
    out.commit_attempted = true;
    out.commit_status = store_.Commit(changes);
    if (out.commit_status.ok()) {
      ++counters_.commits;
      counters_.changes_committed += changes.size();
      manager_.CommitBatch();
      out.committed = std::move(changes);
    } else {
      ++counters_.commit_failures;
      // Every request whose answer depends on the lost changes gets the store's error.
      for (auto& p : pending) {
        if (!p.mutation || !p.error.ok()) continue;
        if (p.outcome.changed || !p.removed.empty() || manager_.TouchedInBatch(p.uid)) {
          p.error = out.commit_status;
        }
      }
      manager_.RollbackBatch();
    }
  } else {
    manager_.CommitBatch();
  }

  for (const auto& change : out.committed) {
    FlatBufferBuilder fbb(1024);
    if (change.kind == StatusChange::Kind::kUpdated) {
      auto rec = status::WritePodStatusRecord(fbb, change.record);
      status::FinishStatusMessage(fbb, watch_envelope_, fb::Body::StatusChanged,
                                  fb::CreateStatusChanged(fbb, rec).Union());
    } else {
      const auto& pod = change.record.pod;
      auto removed = fb::CreateStatusRemovedDirect(fbb, pod.uid.c_str(), pod.namespace_.c_str(),
                                                   pod.name.c_str(), change.record.version);
      status::FinishStatusMessage(fbb, watch_envelope_, fb::Body::StatusRemoved, removed.Union());
    }
    out.watch_messages.push_back(Bytes(fbb));
  }

  out.replies.reserve(pending.size());
  for (const auto& p : pending) {
    if (p.error.ok() && p.mutation && p.kind != fb::Body::RemoveOrphanedStatusesRequest &&
        !p.outcome.changed) {
      ++counters_.unchanged;
    }
    std::string reply;
    try {
      reply = BuildReply(p);
    } catch (const std::exception& e) {
      ++counters_.handler_errors;
      Pending failed;
      failed.id = p.id;
      failed.error = Internal("the reply failed: " + ValidUtf8(e.what()));
      out.refused.push_back(failed.error);
      reply = BuildReply(failed);
    }
    out.replies.emplace_back(p.peer, std::move(reply));
  }
  return out;
}

std::string StatusServer::BuildReply(const Pending& p) {
  FlatBufferBuilder fbb(256);
  auto error = [&](const Status& s) {
    auto msg = fbb.CreateString(s.message());
    status::FinishStatusMessage(
        fbb, reply_envelope_, fb::Body::ErrorReply,
        fb::CreateErrorReply(fbb, p.id, status::ToErrorCode(s.code()), msg).Union());
    return Bytes(fbb);
  };
  if (!p.error.ok()) return error(p.error);
  switch (p.kind) {
    case fb::Body::SetPodStatusRequest:
    case fb::Body::TerminatePodRequest:
      status::FinishStatusMessage(
          fbb, reply_envelope_, fb::Body::SetPodStatusReply,
          fb::CreateSetPodStatusReply(fbb, p.id, p.outcome.version, p.outcome.changed).Union());
      return Bytes(fbb);
    case fb::Body::RemoveOrphanedStatusesRequest: {
      auto removed = fbb.CreateVectorOfStrings(p.removed);
      status::FinishStatusMessage(
          fbb, reply_envelope_, fb::Body::RemoveOrphanedStatusesReply,
          fb::CreateRemoveOrphanedStatusesReply(fbb, p.id, removed).Union());
      return Bytes(fbb);
    }
    case fb::Body::GetPodStatusRequest: {
      const PodStatusRecord* rec = manager_.Get(p.uid);
      if (rec == nullptr) {
        ++counters_.not_found;
        return error(
            NotFound("no status for pod uid '" + p.uid + "': it was never set or was removed"));
      }
      auto r = status::WritePodStatusRecord(fbb, *rec);
      status::FinishStatusMessage(fbb, reply_envelope_, fb::Body::GetPodStatusReply,
                                  fb::CreateGetPodStatusReply(fbb, p.id, r).Union());
      return Bytes(fbb);
    }
    case fb::Body::ListPodStatusesRequest: {
      auto records = manager_.List(p.namespace_filter);
      std::vector<flatbuffers::Offset<fb::PodStatusRecord>> offs;
      offs.reserve(records.size());
      for (const auto* rec : records) offs.push_back(status::WritePodStatusRecord(fbb, *rec));
      auto vec = fbb.CreateVector(offs);
      status::FinishStatusMessage(
          fbb, reply_envelope_, fb::Body::ListPodStatusesReply,
          fb::CreateListPodStatusesReply(fbb, p.id, vec, watch_envelope_.last_sequence(),
                                         watch_envelope_.incarnation())
              .Union());
      return Bytes(fbb);
    }
    case fb::Body::RecordEventsRequest:
      status::FinishStatusMessage(fbb, reply_envelope_, fb::Body::RecordEventsReply,
                                  fb::CreateRecordEventsReply(fbb, p.id, p.stored).Union());
      return Bytes(fbb);
    case fb::Body::ListEventsRequest: {
      std::vector<flatbuffers::Offset<fb::EventRecord>> offs;
      for (const auto& e : p.events) offs.push_back(status::WriteEvent(fbb, e));
      auto vec = fbb.CreateVector(offs);
      status::FinishStatusMessage(fbb, reply_envelope_, fb::Body::ListEventsReply,
                                  fb::CreateListEventsReply(fbb, p.id, vec).Union());
      return Bytes(fbb);
    }
    case fb::Body::SetNodeStatusRequest:
      status::FinishStatusMessage(
          fbb, reply_envelope_, fb::Body::SetNodeStatusReply,
          fb::CreateSetNodeStatusReply(fbb, p.id, p.node.version, p.node_changed).Union());
      return Bytes(fbb);
    case fb::Body::GetNodeStatusRequest: {
      auto j = fbb.CreateString(p.node.node_json);
      status::FinishStatusMessage(
          fbb, reply_envelope_, fb::Body::GetNodeStatusReply,
          fb::CreateGetNodeStatusReply(fbb, p.id, j, p.node.version, p.node.updated_at_unix_s)
              .Union());
      return Bytes(fbb);
    }
    default:
      return error(Internal("no reply for " + BodyName(p.kind)));
  }
}

}  // namespace nodelet::statusd

#include "lib/pleg/pleg_mirror.h"

#include "lib/ipc/endpoints.h"

namespace nodelet::pleg {
namespace {

constexpr size_t kMaxBytes = 64 * 1024 * 1024;
using ipc::pleg::Body;
using ipc::pleg::PlegMessage;

}  // namespace

PlegMirror::PlegMirror(ipc::Context& ctx, std::string run_dir, ipc::ServiceId self)
    : ctx_(ctx), run_dir_(std::move(run_dir)), envelope_(self, ipc::NewIncarnation()) {}

Status PlegMirror::Connect() {
  sub_ = std::make_unique<ipc::Subscriber>(ctx_, kMaxBytes);
  if (Status s = sub_->Connect(ipc::kPlegEventsEndpoint.Uri(run_dir_)); !s.ok()) return s;
  snapshot_client_ =
      std::make_unique<ipc::RequestClient>(ctx_, ipc::kPlegSnapshotEndpoint.Uri(run_dir_), kMaxBytes);
  return snapshot_client_->Connect();
}

zmq::pollitem_t PlegMirror::PollItem() { return sub_->PollItem(); }

Status PlegMirror::FetchSnapshot(std::chrono::milliseconds deadline) {
  const uint64_t id = next_request_id_++;
  flatbuffers::FlatBufferBuilder fbb(128);
  auto req = ipc::pleg::CreateSnapshotRequest(fbb, id);
  auto header = envelope_.Write(fbb);
  fbb.Finish(ipc::pleg::CreatePlegMessage(fbb, header, Body::SnapshotRequest, req.Union()),
             ipc::pleg::PlegMessageIdentifier());
  auto attempt = std::min(deadline, std::chrono::milliseconds(1000));
  auto reply = snapshot_client_->Call(
      fbb.GetBufferPointer(), fbb.GetSize(), attempt, deadline, [&](const ipc::Frame& f) {
        auto m = ipc::DecodeMessage<PlegMessage>(f.data(), f.size(),
                                                 ipc::pleg::PlegMessageIdentifier(), kMaxBytes);
        if (!m.ok()) return false;
        if (auto s = (*m)->body_as_Snapshot()) return s->request_id() == id;
        if (auto e = (*m)->body_as_ErrorReply()) return e->request_id() == id;
        return false;
      });
  if (!reply.ok()) return reply.status();
  auto m = ipc::DecodeMessage<PlegMessage>(reply->data(), reply->size(),
                                           ipc::pleg::PlegMessageIdentifier(), kMaxBytes);
  if (!m.ok()) return m.status();
  if (auto e = (*m)->body_as_ErrorReply()) {
    return Unavailable("plegd refused the snapshot: " + e->error()->str());
  }
  const ipc::pleg::Snapshot* snap = (*m)->body_as_Snapshot();
  pods_.clear();
  if (snap->pods()) {
    for (const auto* p : *snap->pods()) {
      ipc::pleg::PodRecordT rec;
      p->UnPackTo(&rec);
      pods_[rec.uid] = std::move(rec);
    }
  }
  incarnation_ = snap->incarnation();
  sequence_ = snap->sequence();
  relist_ = snap->relist();
  in_sync_ = true;
  ++snapshots_;
  if (on_resync) on_resync();
  return Status::Ok();
}

Status PlegMirror::Sync(std::chrono::milliseconds snapshot_deadline) {
  if (!in_sync_) {
    if (Status s = FetchSnapshot(snapshot_deadline); !s.ok()) return s;
  }
  // Bounded per call so a flood cannot starve the owner's loop.
  for (int i = 0; i < 10000 && sub_->Readable(); ++i) {
    auto frame = sub_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<PlegMessage>(frame->data(), frame->size(),
                                             ipc::pleg::PlegMessageIdentifier(), kMaxBytes);
    if (!m.ok()) {
      ++bad_messages_;
      continue;
    }
    const auto* h = (*m)->header();
    if (h->incarnation() != incarnation_) {
      // plegd restarted: everything we hold may be stale.
      in_sync_ = false;
    } else if (h->sequence() <= sequence_) {
      continue;  // already in the snapshot
    } else if (h->sequence() != sequence_ + 1) {
      ++gaps_;
      in_sync_ = false;
    }
    if (!in_sync_) {
      if (Status s = FetchSnapshot(snapshot_deadline); !s.ok()) return s;
      // The update that revealed the gap may be newer than the snapshot.
      if (h->incarnation() != incarnation_ || h->sequence() <= sequence_) continue;
      if (h->sequence() != sequence_ + 1) {
        ++gaps_;
        in_sync_ = false;
        continue;
      }
    }
    sequence_ = h->sequence();
    Apply(**m);
  }
  return Status::Ok();
}

void PlegMirror::Apply(const PlegMessage& msg) {
  if (auto done = msg.body_as_RelistDone()) {
    if (done->error() == nullptr || done->error()->size() == 0) {
      relist_ = done->relist();
      relist_error_.clear();
    } else {
      relist_error_ = done->error()->str();
    }
    return;
  }
  const auto* update = msg.body_as_PodUpdate();
  if (update == nullptr || update->pod() == nullptr || update->pod()->uid() == nullptr) return;
  ipc::pleg::PodRecordT rec;
  update->pod()->UnPackTo(&rec);
  ipc::pleg::PodRecordT* current = nullptr;
  if (rec.removed) {
    pods_.erase(rec.uid);
  } else {
    current = &(pods_[rec.uid] = std::move(rec));
  }
  if (on_event && update->events()) {
    ipc::pleg::PodRecordT removed_rec;
    if (current == nullptr) update->pod()->UnPackTo(&removed_rec);
    for (const auto* e : *update->events()) on_event(*e, current ? *current : removed_rec);
  }
}

}  // namespace nodelet::pleg

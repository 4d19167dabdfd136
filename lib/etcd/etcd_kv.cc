// etcd::Client's calls on keys and leases: reads (one key, a prefix page by page), writes and
// deletes, the compare-and-swap transactions, compaction, and the leases (grant, renew, time
// left, revoke). Each runs through Client::Shared::Run's failover (etcd_client_private.h).
#include <cstdint>
#include <optional>
#include <string>

#include "lib/etcd/etcd.grpc.pb.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/etcd_client_private.h"
#include "lib/etcd/etcd_rules.h"

namespace nodelet::etcd {

KeyValue FromPb(const pb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

Result<RangeResult> Client::Get(const std::string& key) {
  pb::RangeRequest request;
  request.set_key(key);
  pb::RangeResponse response;
  Status s = shared_->Run({"Get", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    return c.kv->Range(ctx, request, &response);
  });
  if (!s.ok()) return s;
  RangeResult out;
  for (const auto& kv : response.kvs()) out.kvs.push_back(FromPb(kv));
  out.revision = response.header().revision();
  return out;
}

Result<RangeResult> Client::GetPrefix(const std::string& prefix, int64_t revision) {
  pb::RangeRequest request;
  // An empty prefix is every key: from "\0" to the end.
  request.set_key(prefix.empty() ? std::string(1, '\0') : prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_limit(shared_->options.page_size);
  request.set_revision(revision);
  RangeResult out;
  for (;;) {
    pb::RangeResponse response;
    Status s = shared_->Run({"GetPrefix", prefix}, [&](Conn& c, grpc::ClientContext* ctx) {
      response.Clear();
      return c.kv->Range(ctx, request, &response);
    });
    if (!s.ok()) return s;
    // Every later page reads at the first page's revision: one consistent listing.
    if (request.revision() == 0) request.set_revision(response.header().revision());
    for (const auto& kv : response.kvs()) out.kvs.push_back(FromPb(kv));
    if (!response.more() || response.kvs().empty()) break;
    // The next page starts right after the last key ("key\0" is the next possible key).
    request.set_key(response.kvs().rbegin()->key() + std::string(1, '\0'));
  }
  out.revision = request.revision();
  return out;
}

Result<int64_t> Client::Put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  pb::PutResponse response;
  Status s = shared_->Run({"Put", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->Put(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::Delete(const std::string& key) {
  pb::DeleteRangeRequest request;
  request.set_key(key);
  pb::DeleteRangeResponse response;
  Status s = shared_->Run({"Delete", key}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->DeleteRange(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::DeletePrefix(const std::string& prefix) {
  if (prefix.empty()) return InvalidArgument("etcd DeletePrefix: refusing to delete every key");
  pb::DeleteRangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  pb::DeleteRangeResponse response;
  Status s = shared_->Run({"DeletePrefix", prefix}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->DeleteRange(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

namespace {

// A transaction that runs its success branch when `key`'s mod_revision is `expected`.
pb::TxnRequest IfModRevision(const std::string& key, int64_t expected) {
  pb::TxnRequest request;
  auto* compare = request.add_compare();
  compare->set_result(pb::Compare::EQUAL);
  compare->set_target(pb::Compare::MOD);
  compare->set_key(key);
  compare->set_mod_revision(expected);
  return request;
}

// Runs a compare-and-swap transaction; never repeated after an attempt that may have been
// applied (its second try could fail on its own first write).
Result<pb::TxnResponse> RunTxn(Client::Shared& shared, const char* name, const std::string& key,
                               const pb::TxnRequest& request) {
  pb::TxnResponse response;
  CallSpec spec{name, key, /*repeatable=*/false};
  Status s = shared.Run(spec, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    return c.kv->Txn(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

}  // namespace

Result<bool> Client::PutIf(const std::string& key, const std::string& value,
                           int64_t expected_mod_revision, int64_t lease,
                           std::optional<KeyValue>* current) {
  if (expected_mod_revision < 0) {
    return InvalidArgument("etcd PutIf " + Quote(key) + ": negative expected mod_revision");
  }
  pb::TxnRequest request = IfModRevision(key, expected_mod_revision);
  auto* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  // When the compare fails, the same transaction reads the key as it is.
  request.add_failure()->mutable_request_range()->set_key(key);
  auto txn = RunTxn(*shared_, "PutIf", key, request);
  if (!txn.ok()) return txn.status();
  const pb::TxnResponse& response = *txn;
  if (!response.succeeded() && current != nullptr) {
    current->reset();
    if (response.responses_size() > 0 && response.responses(0).has_response_range() &&
        response.responses(0).response_range().kvs_size() > 0) {
      *current = FromPb(response.responses(0).response_range().kvs(0));
    }
  }
  return response.succeeded();
}

Result<bool> Client::DeleteIf(const std::string& key, int64_t expected_mod_revision) {
  if (expected_mod_revision <= 0) {
    return InvalidArgument("etcd DeleteIf " + Quote(key) + ": expected mod_revision must be > 0");
  }
  pb::TxnRequest request = IfModRevision(key, expected_mod_revision);
  request.add_success()->mutable_request_delete_range()->set_key(key);
  auto txn = RunTxn(*shared_, "DeleteIf", key, request);
  if (!txn.ok()) return txn.status();
  return txn->succeeded();
}

Result<int64_t> Client::Compact(int64_t revision) {
  pb::CompactionRequest request;
  request.set_revision(revision);
  pb::CompactionResponse response;
  // Not repeated after an attempt that may have been applied: the repetition would report
  // the revision as compacted already.
  CallSpec spec{"Compact", "revision " + std::to_string(revision), /*repeatable=*/false};
  Status s = shared_->Run(spec, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.kv->Compact(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.header().revision();
}

Result<int64_t> Client::GrantLease(int64_t ttl_seconds, int64_t id) {
  if (ttl_seconds <= 0) return InvalidArgument("etcd GrantLease: the TTL must be positive");
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  request.set_id(id);
  pb::LeaseGrantResponse response;
  // Repeated after an attempt that may have been applied, an id-less grant can leave one
  // unused lease behind; it expires after its TTL.
  Status s = shared_->Run({"GrantLease", ""}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.lease->LeaseGrant(ctx, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return Internal("etcd GrantLease: " + response.error());
  }
  return response.id();
}

Result<int64_t> Client::KeepAliveOnce(int64_t lease) {
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  pb::LeaseKeepAliveResponse response;
  const std::string what = "lease " + std::to_string(lease);
  Status s = shared_->Run({"KeepAliveOnce", what}, [&](Conn& c, grpc::ClientContext* ctx) {
    response.Clear();
    auto stream = c.lease->LeaseKeepAlive(ctx);
    if (stream->Write(request) && stream->Read(&response)) stream->WritesDone();
    // With the request half closed, etcd ends the stream with OK; on a broken stream Finish
    // carries the reason.
    return stream->Finish();
  });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) return NotFound("etcd KeepAliveOnce: " + what + " has expired");
  return response.ttl();
}

Result<int64_t> Client::LeaseTimeToLive(int64_t lease) {
  auto info = GetLeaseInfo(lease);
  if (!info.ok()) return info.status();
  return info->ttl;
}

Result<LeaseInfo> Client::GetLeaseInfo(int64_t lease) {
  pb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  pb::LeaseTimeToLiveResponse response;
  Status s = shared_->Run({"LeaseTimeToLive", "lease " + std::to_string(lease)},
                          [&](Conn& c, grpc::ClientContext* ctx) {
                            return c.lease->LeaseTimeToLive(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  LeaseInfo info;
  info.ttl = response.ttl() < 0 ? -1 : response.ttl();
  info.granted_ttl = response.grantedttl();
  return info;
}

Status Client::RevokeLease(int64_t lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  return shared_->Run({"RevokeLease", "lease " + std::to_string(lease)},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.lease->LeaseRevoke(ctx, request, &response);
                      });
}

}  // namespace nodelet::etcd

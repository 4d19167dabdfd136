#include "supervisor/etcd_status_sink.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "lib/common/json_text.h"
#include "lib/common/rfc3339.h"
#include "lib/status/pod_status_json.h"

namespace nodelet::supervisor {

namespace {

// What a status key holds: the pod's uid and statusd's version of its status.
struct Written {
  std::string uid;
  uint64_t version = 0;
};

std::optional<Written> ReadWritten(const std::string& value) {
  auto doc = nlohmann::json::parse(value, nullptr, false);
  if (!doc.is_object() || !doc.contains("metadata") || !doc["metadata"].is_object()) {
    return std::nullopt;
  }
  const auto& meta = doc["metadata"];
  Written w;
  if (meta.contains("uid") && meta["uid"].is_string()) w.uid = meta["uid"].get<std::string>();
  if (meta.contains("resourceVersion") && meta["resourceVersion"].is_string()) {
    const std::string rv = meta["resourceVersion"].get<std::string>();
    char* end = nullptr;
    w.version = std::strtoull(rv.c_str(), &end, 10);
    if (end == rv.c_str() || *end != '\0') w.version = 0;
  }
  return w;
}

}  // namespace

std::string EtcdStatusValue(const PodStatusRecord& record) {
  return JsonText(status::PodToJson(record));
}

EtcdStatusSink::EtcdStatusSink(EventLoop& loop, std::unique_ptr<etcd::Client> client,
                               EtcdSinkOptions options)
    : client_(std::move(client)),
      clock_(loop.clock()),
      options_(std::move(options)),
      keys_{options_.prefix},
      renew_timer_(loop.AddTimer([this] { Renew(); })),
      renewer_(loop, 1) {
  renew_timer_.ArmAt(clock_.Now());
}

EtcdStatusSink::~EtcdStatusSink() { renewer_.Stop(); }

EtcdStatusSink::Counters EtcdStatusSink::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

Status EtcdStatusSink::Sync(const PodStatusRecord& record) {
  const std::string key = keys_.Status(options_.node_name, record.pod.namespace_, record.pod.name);
  const std::string value = EtcdStatusValue(record);
  // Read, compare, write; a writer in between makes it read again (only this node writes these
  // keys, so a few attempts are plenty).
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto cur = client_->Get(key);
    if (!cur.ok()) return cur.status();
    int64_t mod = 0;
    if (!cur->kvs.empty()) {
      mod = cur->kvs[0].mod_revision;
      auto w = ReadWritten(cur->kvs[0].value);
      if (w && w->uid == record.pod.uid && w->version >= record.version) {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.skipped_not_newer;
        return Status::Ok();
      }
    }
    auto put = client_->PutIf(key, value, mod);
    if (!put.ok()) return put.status();
    if (*put) {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.writes;
      return Status::Ok();
    }
  }
  return Unavailable("status " + key + ": changed by another writer at every attempt");
}

Status EtcdStatusSink::Remove(const PodIdentity& pod) {
  const std::string key = keys_.Status(options_.node_name, pod.namespace_, pod.name);
  auto cur = client_->Get(key);
  if (!cur.ok()) return cur.status();
  if (cur->kvs.empty()) return Status::Ok();
  auto w = ReadWritten(cur->kvs[0].value);
  // Another pod of the name holds the key by now: its status stays.
  if (w && !w->uid.empty() && w->uid != pod.uid) return Status::Ok();
  auto del = client_->DeleteIf(key, cur->kvs[0].mod_revision);
  if (!del.ok()) return del.status();
  if (!*del) return Unavailable("status " + key + ": changed while it was being deleted");
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.deletes;
  return Status::Ok();
}

Status EtcdStatusSink::Prune(const std::set<std::string>& uids) {
  auto mine = client_->GetPrefix(keys_.StatusOfNode(options_.node_name));
  if (!mine.ok()) return mine.status();
  for (const auto& kv : mine->kvs) {
    auto w = ReadWritten(kv.value);
    if (w && uids.count(w->uid) != 0) continue;
    auto del = client_->DeleteIf(kv.key, kv.mod_revision);
    if (!del.ok()) return del.status();
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.deletes;
  }
  return Status::Ok();
}

Status EtcdStatusSink::SyncNode(const status::NodeStatusRecord& node) {
  std::lock_guard<std::mutex> lock(mu_);
  node_json_ = node.node_json;
  return KeepNodeLocked(false);
}

Status EtcdStatusSink::KeepNodeLocked(bool renew) {
  if (node_json_.empty()) return Status::Ok();
  if (!registered_) {
    // Create-only: the first registration's time stays.
    const nlohmann::json reg = {{"name", options_.node_name},
                                {"registeredAt", FormatRfc3339(clock_.WallSeconds())}};
    auto put = client_->PutIf(keys_.Registration(options_.node_name), JsonText(reg), 0);
    if (!put.ok()) return put.status();
    registered_ = true;
  }
  if (lease_ != 0 && renew) {
    auto ttl = client_->KeepAliveOnce(lease_);
    if (ttl.ok()) {
      ++counters_.lease_renewals;
    } else if (ttl.status().code() == StatusCode::kNotFound) {
      lease_ = 0;  // lapsed while etcd was away: the Node key went with it
    } else {
      return ttl.status();
    }
  }
  if (lease_ == 0) {
    auto lease = client_->GrantLease(options_.lease_ttl.count());
    if (!lease.ok()) return lease.status();
    lease_ = *lease;
    node_written_.clear();
    ++counters_.lease_grants;
  }
  if (node_written_ == node_json_) return Status::Ok();
  auto put = client_->Put(keys_.Node(options_.node_name), node_json_, lease_);
  if (!put.ok()) {
    // A lease that lapsed between the renewal and the write: granted again next time.
    if (put.status().code() == StatusCode::kNotFound) lease_ = 0;
    return put.status();
  }
  node_written_ = node_json_;
  ++counters_.node_writes;
  return Status::Ok();
}

void EtcdStatusSink::Renew() {
  auto ok = std::make_shared<bool>(false);
  renewer_.Submit(
      [this, ok] {
        std::lock_guard<std::mutex> lock(mu_);
        *ok = KeepNodeLocked(true).ok();
      },
      [this, ok] {
        // On time, or again after a second while etcd is away (the TTL leaves 30 s).
        renew_timer_.ArmAfter(*ok ? Duration(options_.lease_renew)
                                  : Duration(std::chrono::seconds(1)));
      });
}

}  // namespace nodelet::supervisor

// The etcd pod source on the supervisor's loop: the keyspace's rules, the cache file, the list and
// the reads of ConfigMaps and Secrets, and the snapshots made of what the watches deliver
// (etcd_source.h; the watches themselves are etcd_watch_pump.h's).
#include "supervisor/sources/etcd_source.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "lib/common/fs.h"
#include "lib/common/json_text.h"
#include "lib/common/utf8.h"
#include "lib/pod/manifest_parser.h"

namespace nodelet::supervisor {

namespace {

// The cache file is the last snapshot: small (the pods' manifests), read once at start.
constexpr size_t kMaxCacheBytes = 64 * 1024 * 1024;

bool PlainName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

void AddEnvRefs(const pod::Container& c, const std::string& ns, std::set<std::string>& out) {
  for (const auto& e : c.env) {
    if (!e.value_from) continue;
    if (e.value_from->config_map_key_ref) {
      out.insert("ConfigMap/" + ns + "/" + e.value_from->config_map_key_ref->name);
    }
    if (e.value_from->secret_key_ref) {
      out.insert("Secret/" + ns + "/" + e.value_from->secret_key_ref->name);
    }
  }
  for (const auto& f : c.env_from) {
    if (f.config_map_ref) out.insert("ConfigMap/" + ns + "/" + f.config_map_ref->name);
    if (f.secret_ref) out.insert("Secret/" + ns + "/" + f.secret_ref->name);
  }
}

// "ConfigMap/ns/name" -> its key; nullopt for anything else.
std::optional<std::string> RefKey(const FleetKeys& keys, const std::string& ref) {
  size_t a = ref.find('/');
  if (a == std::string::npos) return std::nullopt;
  size_t b = ref.find('/', a + 1);
  if (b == std::string::npos) return std::nullopt;
  const std::string kind = ref.substr(0, a);
  const std::string ns = ref.substr(a + 1, b - a - 1);
  const std::string name = ref.substr(b + 1);
  if ((kind != "ConfigMap" && kind != "Secret") || !PlainName(ns) || !PlainName(name)) {
    return std::nullopt;
  }
  return keys.Config(kind, ns, name);
}

// A value as a manifest: refused (with the key) when larger than a manifest may be, as a file
// of the manifest directory is.
ManifestFile AsManifest(const std::string& key, const std::string& value,
                        int64_t create_revision = 0) {
  if (value.size() > pod::kMaxManifestBytes) {
    return {"etcd:" + key, "",
            ResourceExhausted("the value is " + std::to_string(value.size()) +
                              " bytes, more than a manifest's " +
                              std::to_string(pod::kMaxManifestBytes)),
            create_revision};
  }
  return {"etcd:" + key, value, Status::Ok(), create_revision};
}

}  // namespace

std::optional<PodKeyParts> ParsePodKey(const std::string& prefix, const std::string& key) {
  const std::string head = prefix + "/pods/";
  if (key.compare(0, head.size(), head) != 0) return std::nullopt;
  std::vector<std::string> parts;
  size_t start = head.size();
  for (;;) {
    size_t slash = key.find('/', start);
    parts.push_back(key.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 3 || !std::all_of(parts.begin(), parts.end(), PlainName)) {
    return std::nullopt;
  }
  return PodKeyParts{parts[0], parts[1], parts[2]};
}

std::set<std::string> ConfigRefs(const pod::Pod& pod) {
  std::set<std::string> out;
  const std::string ns =
      pod.metadata.namespace_name.empty() ? "default" : pod.metadata.namespace_name;
  for (const auto& v : pod.spec.volumes) {
    if (v.config_map) out.insert("ConfigMap/" + ns + "/" + v.config_map->name);
    if (v.secret) out.insert("Secret/" + ns + "/" + v.secret->secret_name);
  }
  for (const auto& name : pod.spec.image_pull_secrets) {
    if (!name.empty()) out.insert("Secret/" + ns + "/" + name);
  }
  for (const auto& c : pod.spec.init_containers) AddEnvRefs(c, ns, out);
  for (const auto& c : pod.spec.containers) AddEnvRefs(c, ns, out);
  return out;
}

// A batch a pump delivered, for Drain.
struct EtcdPodSource::Change {
  std::string pump;  // the pump's key (a prefix for pods)
  bool config = false;
  etcd::Watch::Batch batch;  // events, or a compaction
};

// Both pod prefixes at one revision, read on the executor.
struct EtcdPodSource::Listing {
  Status status;
  etcd::RangeResult mine, all;
};

// The ConfigMaps and Secrets read on the executor: key -> the read (ok: its revision and value).
struct EtcdPodSource::ConfigReads {
  std::vector<std::string> keys;
  std::map<std::string, Result<etcd::RangeResult>> got;
  size_t wanted = 0;  // how many were wanted when the reads started
};

EtcdPodSource::EtcdPodSource(EventLoop& loop, std::unique_ptr<etcd::Client> client,
                             EtcdSourceOptions options)
    : loop_(loop),
      client_(std::move(client)),
      options_(std::move(options)),
      keys_{options_.prefix},
      list_retry_(loop.AddTimer([this] { Guarded([this] { List(); }); })),
      config_retry_(loop.AddTimer([this] { Kick(); })),
      coalesce_(loop.AddTimer([this] { Guarded([this] { Drain(); }); })),
      executor_(loop, 2) {}

EtcdPodSource::~EtcdPodSource() { Stop(); }

Status EtcdPodSource::Start() {
  if (!options_.on_snapshot) return InvalidArgument("the etcd source needs on_snapshot");
  if (!options_.cache_file.empty()) {
    auto text = ReadFileBounded(options_.cache_file, kMaxCacheBytes);
    if (text.ok()) {
      auto doc = nlohmann::json::parse(*text, nullptr, false);
      if (doc.is_object() && doc.contains("manifests") && doc["manifests"].is_object()) {
        SourceSnapshot snap;
        snap.source = "etcd";
        snap.from_cache = true;
        const nlohmann::json revisions = doc.contains("revisions") && doc["revisions"].is_object()
                                             ? doc["revisions"]
                                             : nlohmann::json::object();
        for (const auto& [key, value] : doc["manifests"].items()) {
          if (!value.is_string()) continue;
          auto rev = revisions.find(key);
          snap.manifests.push_back(AsManifest(
              key, value.get<std::string>(),
              rev != revisions.end() && rev->is_number_integer() ? rev->get<int64_t>() : 0));
        }
        ready_ = std::move(snap);
      } else {
        cache_error_ = options_.cache_file + ": not a cache this source wrote";
      }
    } else if (text.status().code() != StatusCode::kNotFound) {
      cache_error_ = text.status().message();
    }
    if (ready_) options_.on_snapshot();
  }
  Guarded([this] { List(); });
  return Status::Ok();
}

void EtcdPodSource::Stop() {
  if (stopped_) return;
  stopped_ = true;
  list_retry_.Cancel();
  config_retry_.Cancel();
  coalesce_.Cancel();
  // Cancels the watches first: a read in flight returns at once, and the executor waits only
  // for a list or a read of a key (each within the client's deadline).
  pod_pumps_.clear();
  config_pumps_.clear();
  executor_.Stop();
}

std::optional<SourceSnapshot> EtcdPodSource::Poll() { return std::exchange(ready_, std::nullopt); }

void EtcdPodSource::SetWanted(std::set<std::string> refs) {
  std::set<std::string> keys;
  for (const auto& r : refs) {
    if (auto k = RefKey(keys_, r)) keys.insert(*k);
  }
  if (keys == wanted_) return;
  wanted_ = std::move(keys);
  wanted_changed_ = true;
  Kick();
}

bool EtcdPodSource::watching() const {
  return listed_ && !pod_pumps_.empty() &&
         std::all_of(pod_pumps_.begin(), pod_pumps_.end(),
                     [](const auto& p) { return p.second->open(); });
}

size_t EtcdPodSource::pending_events() const {
  size_t n = 0;
  for (const auto& c : changes_) n += c.batch.events.size();
  return n;
}

void EtcdPodSource::Guarded(const std::function<void()>& step) {
  if (stopped_) return;
  try {
    step();
  } catch (const std::exception& e) {
    // Whatever threw (a value nodelet does not control, say), the source reports a failure,
    // keeps the pods it served and starts over from a fresh list; the process goes on.
    Fail(Internal(std::string("the etcd pod source failed: ") + ValidUtf8(e.what())));
    listed_ = false;
    pod_pumps_.clear();
    // What the pod watches delivered is superseded by the next list.
    std::erase_if(changes_, [](const Change& c) { return !c.config; });
    SizeExecutor();
    coalesce_.Cancel();
    list_retry_.ArmAfter(options_.retry_max);
  }
}

std::chrono::milliseconds EtcdPodSource::NextBackoff(std::chrono::milliseconds backoff) const {
  return backoff.count() == 0 ? options_.retry_min : std::min(backoff * 2, options_.retry_max);
}

void EtcdPodSource::Fail(Status why) {
  ++counters_.list_failures;
  if (failed_reported_) return;  // one failure snapshot per outage; the pods it served stay
  failed_reported_ = true;
  SourceSnapshot snap;
  snap.source = "etcd";
  snap.failure = SourceFailure{"etcd", std::move(why)};
  ready_ = std::move(snap);
  options_.on_snapshot();
}

void EtcdPodSource::List() {
  if (stopped_) return;
  if (call_running_) {
    list_retry_.ArmAfter(options_.retry_min);  // after the call that is out
    return;
  }
  call_running_ = true;
  auto listing = std::make_shared<Listing>();
  executor_.Submit(
      [client = client_.get(), mine = keys_.NodePods(options_.node_name), all = keys_.AllPods(),
       listing] {
        // Both prefixes at the revision of the first read: one consistent view to watch on from.
        listing->status = CatchAll("the etcd list", [&]() -> Status {
          auto m = client->GetPrefix(mine);
          if (!m.ok()) return m.status();
          auto a = client->GetPrefix(all, m->revision);
          if (!a.ok()) return a.status();
          listing->mine = std::move(*m);
          listing->all = std::move(*a);
          return Status::Ok();
        });
      },
      [this, listing] {
        call_running_ = false;
        Guarded([&] { Listed(*listing); });
      });
}

void EtcdPodSource::Listed(Listing& listing) {
  if (!listing.status.ok()) {
    Fail(listing.status);
    backoff_ = NextBackoff(backoff_);
    list_retry_.ArmAfter(backoff_);
    return;
  }
  pods_.clear();
  created_.clear();
  for (auto* r : {&listing.mine, &listing.all}) {
    for (auto& kv : r->kvs) {
      created_[kv.key] = kv.create_revision;
      pods_[kv.key] = std::move(kv.value);
    }
  }
  const int64_t next = listing.mine.revision + 1;
  pod_pumps_.clear();
  for (const std::string& p : {keys_.NodePods(options_.node_name), keys_.AllPods()}) {
    pod_pumps_[p] = StartPump(p, /*config=*/false, next);
  }
  SizeExecutor();
  listed_ = true;
  failed_reported_ = false;
  backoff_ = std::chrono::milliseconds(0);
  ++counters_.lists;
  SyncConfigs(/*dirty=*/true, configs_.size());
}

void EtcdPodSource::SyncConfigs(bool dirty, size_t before) {
  wanted_changed_ = false;
  for (auto it = config_pumps_.begin(); it != config_pumps_.end();) {
    if (wanted_.count(it->first) == 0) {
      configs_.erase(it->first);
      it = config_pumps_.erase(it);
    } else {
      ++it;
    }
  }
  auto reads = std::make_shared<ConfigReads>();
  reads->wanted = wanted_.size();
  for (const auto& key : wanted_) {
    if (config_pumps_.count(key) == 0) reads->keys.push_back(key);
  }
  SizeExecutor();
  if (reads->keys.empty()) {
    ConfigsRead(*reads, dirty, before);
    return;
  }
  call_running_ = true;
  executor_.Submit(
      [client = client_.get(), reads] {
        for (const auto& key : reads->keys) {
          Result<etcd::RangeResult> got = Internal("not read");
          Status s = CatchAll("the etcd read of " + key, [&] {
            got = client->Get(key);
            return Status::Ok();
          });
          reads->got.emplace(key, s.ok() ? std::move(got) : Result<etcd::RangeResult>(s));
        }
      },
      [this, reads, dirty, before] {
        call_running_ = false;
        Guarded([&] { ConfigsRead(*reads, dirty, before); });
      });
}

void EtcdPodSource::ConfigsRead(ConfigReads& reads, bool dirty, size_t before) {
  for (auto& [key, got] : reads.got) {
    if (!got.ok()) continue;  // read again after a back-off
    configs_[key] = got->kvs.empty() ? std::nullopt : std::optional<std::string>(got->kvs[0].value);
    config_pumps_[key] = StartPump(key, /*config=*/true, got->revision + 1);
  }
  SizeExecutor();
  configs_complete_ = config_pumps_.size() >= reads.wanted;
  if (dirty || configs_.size() != before) Publish();
  if (configs_complete_) {
    config_backoff_ = std::chrono::milliseconds(0);
    config_retry_.Cancel();
  } else {
    config_backoff_ = NextBackoff(config_backoff_);
    config_retry_.ArmAfter(config_backoff_);
  }
  // What came meanwhile.
  if (!changes_.empty() || wanted_changed_) Kick();
}

std::unique_ptr<EtcdWatchPump> EtcdPodSource::StartPump(const std::string& key, bool config,
                                                        int64_t start_revision) {
  auto deliver = [this, key, config](etcd::Watch::Batch b) {
    changes_.push_back(Change{key, config, std::move(b)});
    Kick();
  };
  // Pod keys are watched by prefix, a ConfigMap or Secret alone (a role may grant one key).
  WatchPumpOptions pump{key, /*prefix=*/!config, start_revision, options_.retry_min,
                        options_.retry_max};
  return std::make_unique<EtcdWatchPump>(loop_, executor_, *client_, std::move(pump),
                                         std::move(deliver),
                                         [this] { ++counters_.watch_restarts; });
}

void EtcdPodSource::SizeExecutor() {
  executor_.Resize(static_cast<int>(2 + pod_pumps_.size() + config_pumps_.size()));
}

void EtcdPodSource::Kick() {
  if (!stopped_ && !coalesce_.armed()) coalesce_.ArmAfter(options_.coalesce);
}

void EtcdPodSource::Drain() {
  // Before the list, or while a call is out: its continuation kicks again.
  if (!listed_ || call_running_) return;
  std::vector<Change> changes;
  changes.swap(changes_);
  bool wanted_changed = wanted_changed_;
  bool relist = false, dirty = false;
  for (const auto& c : changes) {
    Apply(c);
    if (c.batch.compacted) {
      if (c.config) {
        config_pumps_.erase(c.pump);  // read again and watched anew below
        wanted_changed = true;
      } else {
        relist = true;
      }
    }
    dirty = true;
  }
  if (relist) {
    listed_ = false;
    pod_pumps_.clear();
    SizeExecutor();
    List();  // then publishes
    return;
  }
  if (wanted_changed || !configs_complete_) {
    SyncConfigs(dirty || wanted_changed, configs_.size());
    return;
  }
  if (dirty) Publish();
}

void EtcdPodSource::Apply(const Change& change) {
  const auto& b = change.batch;
  if (b.compacted) {
    ++counters_.compactions;
    return;  // handled by Drain (it lists again, or reads the key again)
  }
  for (const auto& e : b.events) {
    if (change.config) {
      if (e.kv.key != change.pump) continue;
      configs_[e.kv.key] = e.type == etcd::Watch::Event::Type::kPut
                               ? std::optional<std::string>(e.kv.value)
                               : std::nullopt;
    } else if (e.type == etcd::Watch::Event::Type::kPut) {
      pods_[e.kv.key] = e.kv.value;
      created_[e.kv.key] = e.kv.create_revision;
    } else {
      pods_.erase(e.kv.key);
      created_.erase(e.kv.key);
    }
  }
}

std::string EtcdCacheText(const std::map<std::string, std::string>& manifests,
                          const std::map<std::string, int64_t>& revisions) {
  nlohmann::json doc = nlohmann::json::object();
  doc["manifests"] = nlohmann::json::object();
  for (const auto& [key, value] : manifests) doc["manifests"][key] = value;
  doc["revisions"] = nlohmann::json::object();
  for (const auto& [key, revision] : revisions) doc["revisions"][key] = revision;
  return JsonText(doc);
}

void EtcdPodSource::Publish() {
  SourceSnapshot snap;
  snap.source = "etcd";
  std::map<std::string, std::string> manifests;
  std::map<std::string, int64_t> revisions;
  for (const auto& [key, value] : pods_) {
    const int64_t created = created_.count(key) ? created_.at(key) : 0;
    snap.manifests.push_back(AsManifest(key, value, created));
    manifests[key] = value;
    revisions[key] = created;
  }
  for (const auto& [key, value] : configs_) {
    if (!value) continue;
    snap.manifests.push_back(AsManifest(key, *value));
    manifests[key] = *value;
  }
  if (!options_.cache_file.empty()) WriteCache(EtcdCacheText(manifests, revisions));
  ++counters_.snapshots;
  ready_ = std::move(snap);
  options_.on_snapshot();
}

void EtcdPodSource::WriteCache(std::string text) {
  // One write at a time, in order; of the snapshots published meanwhile only the last is
  // written after it.
  if (writing_) {
    cache_queued_ = std::move(text);
    return;
  }
  writing_ = true;
  auto written = std::make_shared<bool>(false);
  executor_.Submit([path = options_.cache_file, text = std::move(text),
                    written] { *written = WriteFileAtomically(path, text, 0600).ok(); },
                   [this, written] {
                     writing_ = false;
                     ++(*written ? counters_.cache_writes : counters_.cache_write_failures);
                     if (cache_queued_) WriteCache(*std::exchange(cache_queued_, std::nullopt));
                   });
}

}  // namespace nodelet::supervisor

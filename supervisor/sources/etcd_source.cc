#include "supervisor/sources/etcd_source.h"

#include <algorithm>
#include <exception>
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

// A change reported by a pump, for the source's thread.
struct EtcdPodSource::Change {
  std::string pump;  // the pump's key (a prefix for pods)
  bool config = false;
  std::optional<etcd::Watch::Batch> batch;  // events, or a compaction
};

// One watch kept open on a thread of its own: each batch goes to `deliver`; a broken stream is
// opened again from the revision after the last one delivered, with back-off; a compaction is
// delivered and ends the pump (its owner lists again and starts another).
class EtcdPodSource::Pump {
 public:
  Pump(etcd::Client& client, std::string key, bool prefix, int64_t start_revision,
       std::chrono::milliseconds retry_min, std::chrono::milliseconds retry_max,
       std::function<void(etcd::Watch::Batch)> deliver, std::atomic<uint64_t>& restarts)
      : client_(client),
        key_(std::move(key)),
        prefix_(prefix),
        next_(start_revision),
        retry_min_(retry_min),
        retry_max_(retry_max),
        deliver_(std::move(deliver)),
        restarts_(restarts) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Pump() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (watch_) watch_->Cancel();
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::chrono::milliseconds backoff{0};
    std::unique_ptr<etcd::Watch> watch;
    while (true) {
      if (!watch) {
        auto w = prefix_ ? client_.WatchPrefix(key_, next_) : client_.WatchKey(key_, next_);
        if (!w.ok()) {
          backoff = backoff.count() == 0 ? retry_min_ : std::min(backoff * 2, retry_max_);
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) return;
          continue;
        }
        watch = std::move(*w);
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        watch_ = watch.get();
      }
      // Long: Cancel() wakes it at once, and an idle node should not wake for nothing.
      auto batch = watch->Next(std::chrono::seconds(60));
      if (batch.ok()) {
        backoff = std::chrono::milliseconds(0);
        if (batch->compacted) {
          deliver_(std::move(*batch));
          break;
        }
        if (batch->revision >= next_) next_ = batch->revision + 1;
        if (!batch->events.empty()) deliver_(std::move(*batch));
        continue;
      }
      if (batch.status().code() == StatusCode::kDeadlineExceeded) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        watch_ = nullptr;
        if (stopping_) return;
      }
      watch.reset();
      ++restarts_;
      backoff = backoff.count() == 0 ? retry_min_ : std::min(backoff * 2, retry_max_);
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    watch_ = nullptr;
  }

  etcd::Client& client_;
  const std::string key_;
  const bool prefix_;
  int64_t next_;
  const std::chrono::milliseconds retry_min_, retry_max_;
  std::function<void(etcd::Watch::Batch)> deliver_;
  std::atomic<uint64_t>& restarts_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  etcd::Watch* watch_ = nullptr;  // the open watch, for Cancel
  std::thread thread_;
};

EtcdPodSource::EtcdPodSource(const Clock& clock, std::unique_ptr<etcd::Client> client,
                             EtcdSourceOptions options)
    : clock_(clock),
      client_(std::move(client)),
      options_(std::move(options)),
      keys_{options_.prefix} {}

EtcdPodSource::~EtcdPodSource() { Stop(); }

Status EtcdPodSource::Start() {
  if (!options_.on_snapshot) return InvalidArgument("the etcd source needs on_snapshot");
  // Before the thread starts, nothing else touches ready_ and cache_error_: no lock yet.
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
  thread_ = std::thread([this] { GuardedLoop(); });
  return Status::Ok();
}

void EtcdPodSource::GuardedLoop() {
  for (;;) {
    try {
      Loop();
      return;
    } catch (const std::exception& e) {
      // Whatever threw (a value nodelet does not control, say), the source reports a failure,
      // keeps the pods it served and starts over from a fresh list; the process goes on.
      Fail(Internal(std::string("the etcd pod source failed: ") + ValidUtf8(e.what())));
      listed_ = false;
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, options_.retry_max, [this] { return stopping_; })) return;
    }
  }
}

void EtcdPodSource::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<SourceSnapshot> EtcdPodSource::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(ready_, std::nullopt);
}

void EtcdPodSource::SetWanted(std::set<std::string> refs) {
  std::set<std::string> keys;
  for (const auto& r : refs) {
    if (auto k = RefKey(keys_, r)) keys.insert(*k);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (keys == wanted_) return;
    wanted_ = std::move(keys);
    wanted_changed_ = true;
  }
  cv_.notify_all();
}

EtcdPodSource::Counters EtcdPodSource::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.watch_restarts = watch_restarts_.load();
  return c;
}

std::string EtcdPodSource::cache_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_error_;
}

bool EtcdPodSource::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return stopping_ || !changes_.empty() || wanted_changed_; });
  return !stopping_;
}

void EtcdPodSource::Fail(Status why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.list_failures;
  }
  if (failed_reported_) return;  // one failure snapshot per outage; the pods it served stay
  failed_reported_ = true;
  SourceSnapshot snap;
  snap.source = "etcd";
  snap.failure = SourceFailure{"etcd", std::move(why)};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = std::move(snap);
  }
  options_.on_snapshot();
}

bool EtcdPodSource::List() {
  // Both prefixes at the revision of the first read: one consistent view to watch on from.
  auto mine = client_->GetPrefix(keys_.NodePods(options_.node_name));
  if (!mine.ok()) {
    Fail(mine.status());
    return false;
  }
  auto all = client_->GetPrefix(keys_.AllPods(), mine->revision);
  if (!all.ok()) {
    Fail(all.status());
    return false;
  }
  pods_.clear();
  created_.clear();
  for (auto* r : {&*mine, &*all}) {
    for (auto& kv : r->kvs) {
      created_[kv.key] = kv.create_revision;
      pods_[kv.key] = std::move(kv.value);
    }
  }
  const int64_t next = mine->revision + 1;
  pod_pumps_.clear();
  for (const std::string& p : {keys_.NodePods(options_.node_name), keys_.AllPods()}) {
    pod_pumps_[p] = StartPump(p, /*config=*/false, next);
  }
  listed_ = true;
  failed_reported_ = false;
  backoff_ = std::chrono::milliseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.lists;
  return true;
}

bool EtcdPodSource::SyncConfigWatches() {
  std::set<std::string> wanted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wanted = wanted_;
    wanted_changed_ = false;
  }
  for (auto it = config_pumps_.begin(); it != config_pumps_.end();) {
    if (wanted.count(it->first) == 0) {
      configs_.erase(it->first);
      it = config_pumps_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& key : wanted) {
    if (config_pumps_.count(key) != 0) continue;
    auto got = client_->Get(key);
    if (!got.ok()) continue;  // read again after a back-off (Loop)
    configs_[key] = got->kvs.empty() ? std::nullopt : std::optional<std::string>(got->kvs[0].value);
    config_pumps_[key] = StartPump(key, /*config=*/true, got->revision + 1);
  }
  return config_pumps_.size() == wanted.size();
}

std::unique_ptr<EtcdPodSource::Pump> EtcdPodSource::StartPump(const std::string& key, bool config,
                                                              int64_t start_revision) {
  auto deliver = [this, key, config](etcd::Watch::Batch b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      changes_.push_back(Change{key, config, std::move(b)});
    }
    cv_.notify_all();
  };
  // Pod keys are watched by prefix, a ConfigMap or Secret alone (a role may grant one key).
  return std::make_unique<Pump>(*client_, key, /*prefix=*/!config, start_revision,
                                options_.retry_min, options_.retry_max, std::move(deliver),
                                watch_restarts_);
}

void EtcdPodSource::Apply(const Change& change) {
  if (!change.batch) return;
  const auto& b = *change.batch;
  if (b.compacted) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.compactions;
    return;  // handled by the loop (it lists again, or reads the key again)
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
  bool written = true;
  if (!options_.cache_file.empty()) {
    written =
        WriteFileAtomically(options_.cache_file, EtcdCacheText(manifests, revisions), 0600).ok();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.snapshots;
    if (!options_.cache_file.empty())
      ++(written ? counters_.cache_writes : counters_.cache_write_failures);
    ready_ = std::move(snap);
  }
  options_.on_snapshot();
}

void EtcdPodSource::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    if (!listed_) {
      if (!List()) {
        backoff_ =
            backoff_.count() == 0 ? options_.retry_min : std::min(backoff_ * 2, options_.retry_max);
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, backoff_, [this] { return stopping_; })) break;
        continue;
      }
      configs_complete_ = SyncConfigWatches();
      Publish();
      continue;
    }
    // Woken by a change, or when a ConfigMap or Secret that could not be read is due again.
    if (configs_complete_) {
      config_backoff_ = std::chrono::milliseconds(0);
    } else {
      config_backoff_ = config_backoff_.count() == 0
                            ? options_.retry_min
                            : std::min(config_backoff_ * 2, options_.retry_max);
    }
    if (!WaitFor(configs_complete_ ? std::chrono::milliseconds(std::chrono::minutes(10))
                                   : config_backoff_)) {
      break;
    }
    // A burst: what arrives within the coalescing window makes one snapshot.
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.coalesce, [this] { return stopping_; });
      if (stopping_) break;
    }
    std::vector<Change> changes;
    bool wanted_changed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      changes.swap(changes_);
      wanted_changed = wanted_changed_;
    }
    bool relist = false, dirty = false;
    for (const auto& c : changes) {
      Apply(c);
      if (c.batch && c.batch->compacted) {
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
      continue;  // lists, then publishes
    }
    if (wanted_changed || !configs_complete_) {
      const size_t before = configs_.size();
      configs_complete_ = SyncConfigWatches();
      dirty = dirty || wanted_changed || configs_.size() != before;
    }
    if (dirty) Publish();
  }
  pod_pumps_.clear();
  config_pumps_.clear();
}

}  // namespace nodelet::supervisor

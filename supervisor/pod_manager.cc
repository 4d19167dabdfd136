// PodManager: the pod sources' snapshots into the desired pods (manifests, ConfigMaps and
// Secrets, conflicts, ignored fields), its loop timers and its reports. Admission is in
// pod_admission.cc, the desired set's delivery to podworkerd and volumed and the statuses in
// pod_manager_dispatch.cc.
#include "supervisor/pod_manager.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include "lib/common/fs.h"
#include "lib/common/logging.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/message.h"
#include "lib/pod/canonical.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/qos.h"
#include "lib/pod/security.h"
#include "lib/pod/static_pod.h"
#include "lib/status/status_client.h"
#include "podwork_generated.h"

namespace nodelet::supervisor {

namespace {

// The wall clock, as a manifest's first-seen time says it to operators.
UnixTime NowUnix(const Clock& clock) {
  const int64_t ns = clock.WallNanos();
  return UnixTime{ns / 1000000000, static_cast<int32_t>(ns % 1000000000)};
}

// What a snapshot read (each manifest's origin, bytes and read error, in order, and whether it
// came from the source's cache), as one 128-bit FNV-1a hash: kept per source instead of a copy
// of every manifest. Each field is length-prefixed so that no two snapshots run together.
unsigned __int128 SnapshotKey(const SourceSnapshot& snapshot) {
  std::string text = snapshot.from_cache ? "cache\n" : "read\n";
  auto field = [&text](const std::string& f) { text += std::to_string(f.size()) + ":" + f; };
  for (const auto& m : snapshot.manifests) {
    field(m.origin);
    field(m.content);
    field(std::to_string(m.create_revision));
    field(m.error.ok() ? std::string() : m.error.message());
  }
  return pod::Fnv1a128(text);
}

}  // namespace

PodManager::PodManager(ipc::Context& ctx, EventLoop& loop, const Clock& clock,
                       PodManagerOptions options)
    : ctx_(ctx),
      loop_(loop),
      clock_(clock),
      options_(std::move(options)),
      envelope_(ipc::ServiceId::Supervisor, ipc::NewIncarnation()) {
  allocatable_ = options_.allocatable.value_or(ReadNodeCapacity());
  apparmor_enabled_ = options_.apparmor ? *options_.apparmor : AppArmorEnabled();
}

PodManager::~PodManager() {
  if (url_) url_->Stop();
  for (auto& retired : retired_urls_) retired->Stop();
  if (etcd_) etcd_->Stop();
}

Status PodManager::Start() {
  rejections_deadline_ = clock_.Now() + std::chrono::seconds(10);
  std::set<std::string> sources;
  if (!options_.manifest_dir.empty()) {
    auto dir = StartDirSource(options_.manifest_dir);
    if (!dir.ok()) return dir.status();
    dir_ = std::move(*dir);
    sources.insert("file");
    book_.AddSource("file", options_.manifest_dir);
  }
  if (!options_.manifest_url.empty()) {
    auto url = StartUrlSource(options_);
    if (!url.ok()) return url.status();
    url_ = std::move(*url);
    sources.insert("http");
    book_.AddSource("http", options_.manifest_url);
  }
  if (options_.etcd) {
    auto client = etcd::Client::Connect(*options_.etcd, clock_);
    if (!client.ok()) return client.status();
    EtcdSourceOptions etcd_options;
    etcd_options.prefix = options_.etcd_prefix;
    etcd_options.node_name = pod::NormalizeNodeName(options_.node_name);
    etcd_options.cache_file = options_.etcd_cache_file;
    etcd_options.on_snapshot = [this, alive = std::weak_ptr<bool>(alive_)] {
      loop_.Post([this, alive] {
        if (alive.lock()) OnReadable();
      });
    };
    etcd_ = std::make_unique<EtcdPodSource>(loop_, std::move(*client), etcd_options);
    sources.insert("etcd");
    std::string endpoints;
    for (const auto& e : options_.etcd->endpoints) endpoints += (endpoints.empty() ? "" : ",") + e;
    book_.AddSource("etcd", endpoints + " " + options_.etcd_prefix);
  }
  config_ = std::make_unique<PodConfig<pod::Pod>>(sources);
  work_ = std::make_unique<ipc::DealerClient>(ctx_, ipc::kPodWorkChannel);
  if (Status s = work_->Connect(ipc::kPodWorkerEndpoint.Uri(options_.run_dir)); !s.ok()) return s;
  volumes_ = std::make_unique<ipc::DealerClient>(ctx_, ipc::kVolumeChannel);
  if (Status s = volumes_->Connect(ipc::kVolumeEndpoint.Uri(options_.run_dir)); !s.ok()) return s;
  if (dir_) {
    if (auto snap = dir_->Poll()) TakeSnapshot(*snap);
  }
  work_source_ = loop_.AddSocket(work_->raw(), [this] { OnReadable(); });
  volumes_source_ = loop_.AddSocket(volumes_->raw(), [this] { OnReadable(); });
  WatchDirSource();
  // Started last: its snapshots are taken on the loop, through config_.
  if (etcd_) {
    if (Status s = etcd_->Start(); !s.ok()) return s;
    if (!etcd_->cache_error().empty()) {
      GetLogger("supervisor")
          ->warn("The etcd source's cache was not used: {}", etcd_->cache_error());
    }
  }
  return Status::Ok();
}

void PodManager::OnReadable() {
  DrainReplies();
  if (dir_) {
    if (auto snap = dir_->Poll()) TakeSnapshot(*snap);
  }
  if (url_) {
    if (auto snap = url_->Poll()) TakeSnapshot(*snap);
  }
  if (etcd_) {
    if (auto snap = etcd_->Poll()) TakeSnapshot(*snap);
  }
  if (dirty_) Send();
}

MonoTime PodManager::NextTick() const {
  MonoTime next = next_send_;
  if (!rejections_checked_) next = std::max(next, rejections_retry_at_);
  if (dir_) next = std::min(next, dir_->NextResync());
  return next;
}

void PodManager::Tick() {
  if (dir_ && clock_.Now() >= dir_->NextResync()) {
    if (auto snap = dir_->Poll()) TakeSnapshot(*snap);
  }
  const MonoTime now = clock_.Now();
  if ((dirty_ || now >= next_send_) && (rejections_checked_ || now >= rejections_retry_at_)) {
    Send();
  }
}

void PodManager::OnPodworkerdReady() { Send(); }

void PodManager::SourceFailed(const std::string& source, const SourceFailure& failure) {
  book_.Failed(source, failure.reason + ": " + failure.error.message());
  if (!config_->Failed(source, failure.reason)) return;
  const std::string what = source == "http"   ? "manifest URL"
                           : source == "etcd" ? "etcd cluster"
                                              : "manifest directory";
  const std::string message = "Failed to read the " + what + " (" + failure.reason +
                              "): " + failure.error.message() + "; keeping the " +
                              std::to_string(config_->PodsOf(source)) + " pods it served last";
  GetLogger("supervisor")->error("{}", message);
  status::PodEvent e;
  e.pod_uid = "node";  // a node event (see ctl's events)
  e.pod_name = options_.node_name;
  e.type = "Warning";
  e.reason = "PodSourceFailed";
  e.message = message;
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = clock_.WallSeconds();
  if (events_.size() < 100) events_.push_back(std::move(e));
  FlushEvents();
}

void PodManager::ReportConflicts() {
  auto conflicts = config_->TakeNewConflicts();
  if (conflicts.empty()) return;
  for (const auto& c : conflicts) {
    status::PodEvent e = SourceConflictEvent(
        options_.node_name, {c.kind, c.source, c.uid, c.full_name, c.winner_source, c.winner_uid},
        clock_.WallSeconds());
    GetLogger("supervisor")->warn("{}", e.message);
    if (events_.size() < 100) events_.push_back(std::move(e));
  }
  FlushEvents();
}

void PodManager::WarnIgnoredFields(const std::string& origin, const pod::Pod& p,
                                   const std::vector<std::string>& fields) {
  if (fields.empty()) return;
  std::string list;
  for (const auto& f : fields) list += (list.empty() ? "" : ", ") + f;
  std::string message = origin + ": nodelet ignores " + list +
                        " (unknown to the v1 Pod, or ignored for a static pod as the kubelet "
                        "ignores it; docs/pods.md lists every field)";
  // Once per pod and message: a manifest read again does not repeat it.
  if (!warned_ignored_.insert(p.metadata.uid + "\n" + message).second) return;
  if (warned_ignored_.size() > 4096) warned_ignored_.clear();
  GetLogger("supervisor")->warn("{}", message);
  status::PodEvent e;
  e.pod_uid = p.metadata.uid;
  e.namespace_ = p.metadata.namespace_name;
  e.pod_name = p.metadata.name;
  e.type = "Warning";
  e.reason = "IgnoredFields";
  e.message = std::move(message);
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = clock_.WallSeconds();
  if (events_.size() < 100) events_.push_back(std::move(e));
}

void PodManager::ManifestsRejected(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  auto log = GetLogger("supervisor");
  for (const auto& error : errors) {
    log->error("Rejected manifest {}", error);
    if (events_.size() < 100) {
      events_.push_back(RejectedManifestEvent(options_.node_name, error, clock_.WallSeconds()));
    }
  }
  FlushEvents();
}

void PodManager::TakeSnapshot(const SourceSnapshot& snapshot) {
  if (snapshot.failure) {
    taken_.erase(snapshot.source);
    SourceFailed(snapshot.source, *snapshot.failure);
    return;
  }
  // The same bytes as the source's last snapshot, which was taken whole: parsing them again
  // would change nothing (the directory is read every 20 s; at 100 manifests the parse was a
  // tenth of an idle supervisor's CPU).
  const unsigned __int128 key = SnapshotKey(snapshot);
  if (auto it = taken_.find(snapshot.source); it != taken_.end() && it->second == key) return;
  taken_.erase(snapshot.source);
  std::vector<SourcePod<pod::Pod>> pods;
  std::vector<pod::ConfigData> configs;
  std::vector<ManifestRecord> records;
  std::vector<std::string> errors_now;
  for (const auto& m : snapshot.manifests) {
    ManifestRecord& record = records.emplace_back();
    record.origin = m.origin;
    if (!m.error.ok()) {
      record.errors.push_back(m.origin + ": " + m.error.message());
      errors_now.push_back(record.errors.back());
      continue;
    }
    pod::StaticPodOrigin origin;
    const bool from_etcd = snapshot.source == "etcd";
    origin.kind = snapshot.source == "http" ? pod::PodSourceKind::kHttp
                  : from_etcd               ? pod::PodSourceKind::kEtcd
                                            : pod::PodSourceKind::kFile;
    // An etcd manifest's origin is "etcd:KEY"; the key is what names its pod.
    origin.source = from_etcd ? m.origin.substr(5) : m.origin;
    origin.create_revision = m.create_revision;
    std::optional<PodKeyParts> pod_key;
    if (from_etcd) pod_key = ParsePodKey(options_.etcd_prefix, origin.source);
    origin.node_name = options_.node_name;
    auto seen = file_seen_.find(m.origin);
    if (seen == file_seen_.end()) seen = file_seen_.emplace(m.origin, NowUnix(clock_)).first;
    origin.seen = seen->second;
    pod::ParseOptions parse;
    parse.other_kinds = {"ConfigMap", "Secret"};
    auto loaded = pod::LoadStaticPods(m.content, origin, parse);
    for (const auto& other : loaded.others) {
      auto obj = pod::ParseConfigObject(other);
      if (!obj.ok()) {
        record.errors.push_back(m.origin + ": " + other.kind + " " + other.name + ": " +
                                obj.status().message());
        continue;
      }
      if (from_etcd && origin.source != FleetKeys{options_.etcd_prefix}.Config(
                                            obj->kind, obj->namespace_name, obj->name)) {
        record.errors.push_back(m.origin + ": " + other.kind + " " + obj->namespace_name + "/" +
                                obj->name + " is not the object its key names");
        continue;
      }
      record.configs.push_back({obj->kind, obj->namespace_name, obj->name});
      configs.push_back(std::move(*obj));
    }
    for (const auto& e : loaded.errors) record.errors.push_back(e.message);
    errors_now.insert(errors_now.end(), record.errors.begin(), record.errors.end());
    for (auto& doc : loaded.pods) {
      if (from_etcd && (!pod_key || pod_key->namespace_name != doc.pod.metadata.namespace_name ||
                        pod_key->name != doc.pod.metadata.name)) {
        // The key is the contract (statuses are written beside it): a pod under
        // pods/NODE/NS/NAME must be NS/NAME, and only pods live under pods/.
        record.errors.push_back(m.origin + ": metadata: the pod " +
                                doc.pod.metadata.namespace_name + "/" + doc.pod.metadata.name +
                                (pod_key ? " is not the pod its key names (" +
                                               pod_key->namespace_name + "/" + pod_key->name + ")"
                                         : " is not under PREFIX/pods/NODE/NAMESPACE/NAME"));
        errors_now.push_back(record.errors.back());
        continue;
      }
      WarnIgnoredFields(m.origin, doc.pod, doc.ignored_fields);
      record.pods.push_back(
          {doc.pod.metadata.namespace_name, doc.pod.metadata.name, doc.pod.metadata.uid});
      SourcePod<pod::Pod> sp;
      sp.uid = doc.pod.metadata.uid;
      auto h = doc.pod.metadata.annotations.find(pod::kConfigHashAnnotation);
      sp.spec_hash = h != doc.pod.metadata.annotations.end() ? h->second : "";
      sp.deleting = doc.pod.metadata.deletion_timestamp.has_value();
      sp.full_name = doc.pod.metadata.namespace_name + "/" + doc.pod.metadata.name;
      sp.pod = std::make_shared<const pod::Pod>(std::move(doc.pod));
      pods.push_back(std::move(sp));
    }
  }
  // A manifest URL's body is one document set: if any of it does not parse, none of it is
  // taken (the kubelet keeps a URL's pods when its body cannot be decoded).
  if (snapshot.source == "http" && !errors_now.empty()) {
    SourceFailure failure{"parse", InvalidArgument(errors_now.front() +
                                                   (errors_now.size() > 1 ? " (and more)" : ""))};
    ManifestsRejected(book_.Refused(snapshot.source,
                                    failure.reason + ": " + failure.error.message(), errors_now));
    SourceFailed(snapshot.source, failure);
    return;
  }
  // Each error once, until it is fixed: then it is reported again if it comes back.
  ManifestsRejected(book_.Read(snapshot.source, std::move(records)));
  for (auto it = file_seen_.begin(); it != file_seen_.end();) {
    bool present = false;
    for (const auto& m : snapshot.manifests) present = present || m.origin == it->first;
    it = present ? std::next(it) : file_seen_.erase(it);
  }
  // ConfigMaps and Secrets: the source's full set replaces its previous one.
  std::map<std::string, pod::ConfigData> mine;
  for (auto& cd : configs) mine[cd.kind + "/" + cd.namespace_name + "/" + cd.name] = std::move(cd);
  if (mine != configs_[snapshot.source]) {
    configs_[snapshot.source] = std::move(mine);
    dirty_ = true;
    ++generation_;
  }
  if (etcd_ && snapshot.source == "etcd") {
    // The ConfigMaps and Secrets its pods read are what the etcd source fetches and watches.
    std::set<std::string> refs;
    for (const auto& sp : pods) refs.merge(ConfigRefs(*sp.pod));
    etcd_->SetWanted(std::move(refs));
  }
  Apply(config_->Merge(snapshot.source, std::move(pods), !snapshot.from_cache));
  ReportConflicts();
  taken_[snapshot.source] = key;
}

bool PodManager::sources_ready() const { return config_ && config_->AllSourcesReady(); }

ManifestReport PodManager::Manifests() const {
  return book_.Report([this](const std::string& uid) {
    Admission a;
    if (admitted_.count(uid)) return a;
    if (auto it = rejected_.find(uid); it != rejected_.end()) {
      a.state = ipc::ctl::PodAdmission::Rejected;
      a.reason = it->second;
      return a;
    }
    a.state = ipc::ctl::PodAdmission::Ignored;
    a.reason = "another source serves its uid, or it came already deleted";
    return a;
  });
}

}  // namespace nodelet::supervisor

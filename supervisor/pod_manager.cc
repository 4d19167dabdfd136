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

// Wall-clock readings: what the pods and events say to operators.
int64_t NowMs(const Clock& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.WallNow().time_since_epoch())
      .count();
}

pod::UnixTime NowUnix(const Clock& clock) {
  const int64_t ns = clock.WallNanos();
  return pod::UnixTime{ns / 1000000000, static_cast<int32_t>(ns % 1000000000)};
}

}  // namespace

NodeResources ReadNodeCapacity() {
  pod::NodeAllocatable node = pod::ReadNodeAllocatable();
  return NodeResources{node.cpu_milli, node.memory_bytes};
}

bool AppArmorEnabled() {
  auto text = ReadFileBounded("/sys/module/apparmor/parameters/enabled", 16);
  return text.ok() && !text->empty() && (*text)[0] == 'Y';
}

AdmissionResult AdmitSecurity(const pod::Pod& p, const std::vector<std::string>& unsafe_sysctls,
                              bool apparmor_enabled) {
  AdmissionResult r;
  if (std::string why = pod::ForbiddenSysctls(p, unsafe_sysctls); !why.empty()) {
    r.admitted = false;
    r.reason = "SysctlForbidden";
    r.message = why;
  } else if (!apparmor_enabled && pod::NeedsAppArmor(p)) {
    r.admitted = false;
    r.reason = "AppArmor";
    r.message = "Cannot enforce AppArmor: AppArmor is not enabled on the host";
  }
  return r;
}

AdmissionResult Admit(const pod::Pod& p, const std::vector<const pod::Pod*>& admitted, int max_pods,
                      const NodeResources& allocatable) {
  AdmissionResult r;
  if (static_cast<int>(admitted.size()) >= max_pods) {
    r.admitted = false;
    r.reason = "OutOfpods";
    r.message = "Node didn't have enough resource: pods, requested: 1, used: " +
                std::to_string(admitted.size()) + ", capacity: " + std::to_string(max_pods);
    return r;
  }
  struct Check {
    const char* name;
    bool milli;
    int64_t capacity;
    const char* reason;
  };
  for (const Check& c : {Check{"cpu", true, allocatable.cpu_milli, "OutOfcpu"},
                         Check{"memory", false, allocatable.memory_bytes, "OutOfmemory"}}) {
    int64_t want = pod::PodResourceTotal(p, c.name, true, c.milli);
    if (want == 0) continue;
    int64_t used = 0;
    for (const auto* a : admitted) used += pod::PodResourceTotal(*a, c.name, true, c.milli);
    if (used + want > c.capacity) {
      r.admitted = false;
      r.reason = c.reason;
      r.message = std::string("Node didn't have enough resource: ") + c.name +
                  ", requested: " + std::to_string(want) + ", used: " + std::to_string(used) +
                  ", capacity: " + std::to_string(c.capacity);
      return r;
    }
  }
  return r;
}

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
    etcd_ = std::make_unique<EtcdPodSource>(clock_, std::move(*client), etcd_options);
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

namespace {

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
  std::vector<ConfigData> configs;
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
      auto obj = ParseConfigObject(other);
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
  std::map<std::string, ConfigData> mine;
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

namespace {

// The kubelet admits new pods in the order they were created (HandlePodAdditions sorts them by
// creationTimestamp), so the pod that fits first is the older one whatever the order of files.
// Only the additions are reordered, among the places they hold.
std::vector<PodChange<pod::Pod>> InAdmissionOrder(std::vector<PodChange<pod::Pod>> changes) {
  // The creation time as written, else when nodelet first saw the manifest (the config-seen
  // annotation, RFC 3339 with nanoseconds in UTC, so its text sorts as its time); then the name.
  auto created = [](const PodChange<pod::Pod>& c) {
    if (!c.pod) return std::make_tuple(int64_t{0}, std::string(), std::string(), c.uid);
    const auto& md = c.pod->metadata;
    auto seen = md.annotations.find(pod::kConfigSeenAnnotation);
    std::string seen_text = seen != md.annotations.end() ? seen->second : std::string();
    int64_t when = md.creation_timestamp.value_or(0);
    if (!md.creation_timestamp) {
      if (auto t = pod::ParseRfc3339(seen_text)) when = t->seconds;
    }
    return std::make_tuple(when, md.creation_timestamp ? std::string() : seen_text,
                           md.namespace_name, md.name);
  };
  // Each key is made once (not per comparison), then the adds are sorted by it.
  using Key = decltype(created(changes.front()));
  std::vector<size_t> slots;
  std::vector<std::pair<Key, size_t>> keyed;
  for (size_t i = 0; i < changes.size(); ++i) {
    if (changes[i].op != PodOp::kAdd) continue;
    slots.push_back(i);
    keyed.emplace_back(created(changes[i]), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PodChange<pod::Pod>> adds;
  adds.reserve(keyed.size());
  for (const auto& [_, i] : keyed) adds.push_back(std::move(changes[i]));
  for (size_t k = 0; k < slots.size(); ++k) changes[slots[k]] = std::move(adds[k]);
  return changes;
}

}  // namespace

void PodManager::Evict(const std::string& uid, PodEviction eviction) {
  auto [it, added] = evictions_.emplace(uid, eviction);
  if (!added) return;
  dirty_ = true;
  ++generation_;
}

std::set<std::string> PodManager::ForgetGoneEvictions() {
  std::set<std::string> gone;
  if (!config_ || !config_->AllSourcesReady()) return gone;
  for (auto it = evictions_.begin(); it != evictions_.end();) {
    if (admitted_.count(it->first) == 0 && rejected_.count(it->first) == 0) {
      gone.insert(it->first);
      it = evictions_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

void PodManager::RequestReclaim() {
  ++reclaim_requests_;
  dirty_ = true;
}

bool PodManager::sources_ready() const { return config_ && config_->AllSourcesReady(); }

std::set<std::string> PodManager::TerminalPods() {
  std::set<std::string> uids;
  if (!ConnectStatusClient()) return uids;
  auto list = status_client_->ListPodStatuses();
  if (!list.ok()) return uids;
  for (const auto& r : list->records) {
    if (r.status.phase == status::PodPhase::kSucceeded ||
        r.status.phase == status::PodPhase::kFailed) {
      uids.insert(r.pod.uid);
    }
  }
  return uids;
}

std::optional<std::map<std::string, std::string>> PodManager::RejectedPods() {
  std::map<std::string, std::string> uids;
  if (!ConnectStatusClient()) return std::nullopt;
  auto list = status_client_->ListPodStatuses();
  if (!list.ok()) return std::nullopt;
  for (const auto& r : list->records) {
    if (r.status.phase != status::PodPhase::kFailed) continue;
    const std::string& why = r.status.reason;
    if (why.rfind("OutOf", 0) == 0 || why == "SysctlForbidden" || why == "AppArmor" ||
        (why == "Evicted" && r.status.message.rfind("The node had condition:", 0) == 0)) {
      uids[r.pod.uid] = why;
    }
  }
  return uids;
}

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

void PodManager::Apply(const std::vector<PodChange<pod::Pod>>& unordered) {
  auto log = GetLogger("supervisor");
  const std::vector<PodChange<pod::Pod>> changes = InAdmissionOrder(unordered);
  std::optional<std::set<std::string>> terminal;  // asked of statusd once per merge, if needed
  std::optional<std::map<std::string, std::string>> rejected_before;  // likewise
  for (const auto& c : changes) {
    const std::string& name = c.pod ? c.pod->metadata.name : c.uid;
    switch (c.op) {
      case PodOp::kAdd: {
        // Rejected before (by an earlier supervisor: statusd holds its Failed status, and a
        // terminal phase is final): it stays rejected, as the kubelet's rejected pod stays
        // Failed.
        if (!rejected_before) {
          rejected_before = RejectedPods().value_or(std::map<std::string, std::string>{});
        }
        if (auto it = rejected_before->find(c.uid);
            it != rejected_before->end() && evictions_.count(c.uid) == 0) {
          rejected_[c.uid] = it->second;
          continue;
        }
        std::vector<const pod::Pod*> admitted;
        for (const auto& [_, p] : admitted_) admitted.push_back(p.get());
        AdmissionResult r = AdmitSecurity(*c.pod, options_.allowed_unsafe_sysctls,
                                          options_.apparmor.value_or(apparmor_enabled_));
        if (r.admitted && options_.admit_under_pressure) r = options_.admit_under_pressure(*c.pod);
        if (r.admitted) r = Admit(*c.pod, admitted, options_.max_pods, allocatable_);
        if (!r.admitted && r.reason.rfind("OutOf", 0) == 0) {
          // Pods that have finished (Succeeded, Failed) use nothing any more (the kubelet's
          // filterOutInactivePods): they do not count. Asked only when a pod does not fit.
          if (!terminal) terminal = TerminalPods();
          admitted.clear();
          for (const auto& [uid, p] : admitted_) {
            if (!terminal->count(uid)) admitted.push_back(p.get());
          }
          r = Admit(*c.pod, admitted, options_.max_pods, allocatable_);
        }
        if (!r.admitted) {
          log->warn("Pod {} not admitted: {}: {}", name, r.reason, r.message);
          rejected_[c.uid] = r.reason;
          ReportRejected(*c.pod, r);
          continue;
        }
        log->info("ADD pod {} ({}) from {}", name, c.uid, c.source);
        admitted_[c.uid] = c.pod;
        source_of_[c.uid] = c.source;
        first_seen_ms_[c.uid] = NowMs(clock_);
        admitted_seq_[c.uid] = ++next_admitted_seq_;
        break;
      }
      case PodOp::kUpdate:
      case PodOp::kReconcile:
      case PodOp::kDelete:
        if (admitted_.count(c.uid)) {
          log->info("{} pod {} ({})", PodOpName(c.op), name, c.uid);
          admitted_[c.uid] = c.pod;
        }
        break;
      case PodOp::kRemove:
        log->info("REMOVE pod {} ({})", name, c.uid);
        DropAdmitted(c.uid);
        rejected_.erase(c.uid);
        break;
    }
    dirty_ = true;
    ++generation_;
  }
}

void PodManager::ReportRejected(const pod::Pod& p, const AdmissionResult& why) {
  status::PodIdentity id;
  id.namespace_ = p.metadata.namespace_name;
  id.name = p.metadata.name;
  id.uid = p.metadata.uid;
  id.container_count = static_cast<uint32_t>(p.spec.containers.size());
  id.init_container_count = static_cast<uint32_t>(p.spec.init_containers.size());
  status::PodStatus st;
  st.phase = status::PodPhase::kFailed;
  st.reason = why.reason;
  st.message = why.message;
  unreported_[id.uid] = {id, st};
  FlushRejected();
  // And an event, as the kubelet's rejectPod records one.
  status::PodEvent e;
  e.pod_uid = p.metadata.uid;
  e.namespace_ = p.metadata.namespace_name;
  e.pod_name = p.metadata.name;
  e.type = "Warning";
  e.reason = why.reason;
  e.message = why.message;
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = clock_.WallSeconds();
  if (events_.size() < 100) events_.push_back(std::move(e));
  FlushEvents();
}

bool PodManager::ConnectStatusClient() {
  if (status_client_) return true;
  status::StatusClientOptions opts;
  opts.sender = ipc::ServiceId::Supervisor;
  opts.attempt_timeout = std::chrono::milliseconds(200);
  opts.deadline = std::chrono::milliseconds(400);
  status_client_ = std::make_unique<status::StatusClient>(ctx_, options_.run_dir, opts);
  if (status_client_->Connect().ok()) return true;
  status_client_.reset();
  return false;
}

void PodManager::RecordNodeEvent(status::PodEvent event) {
  if (events_.size() < 100) events_.push_back(std::move(event));
}

void PodManager::FlushEvents() {
  if (events_.empty()) return;
  if (!ConnectStatusClient()) return;
  // statusd may not be up yet: what fails is tried again at the next housekeeping tick.
  if (status_client_->RecordEvents(events_).ok()) events_.clear();
}

void PodManager::FlushRejected() {
  if (unreported_.empty()) return;
  if (!ConnectStatusClient()) return;
  // statusd may not be up yet (pods are admitted before the services start): what fails is
  // tried again at the next housekeeping tick.
  for (auto it = unreported_.begin(); it != unreported_.end();) {
    if (!rejected_.count(it->first)) {
      it = unreported_.erase(it);
      continue;
    }
    auto r = status_client_->SetPodStatus(it->second.first, it->second.second);
    if (!r.ok()) break;
    it = unreported_.erase(it);
  }
}

void PodManager::DropAdmitted(const std::string& uid) {
  admitted_.erase(uid);
  source_of_.erase(uid);
  first_seen_ms_.erase(uid);
  admitted_seq_.erase(uid);
}

bool PodManager::CheckRejectedBefore() {
  if (rejections_checked_) return true;
  const MonoTime now = clock_.Now();
  auto before = RejectedPods();
  if (!before) {
    if (now < rejections_deadline_) {
      rejections_retry_at_ = now + std::chrono::milliseconds(200);
      return false;
    }
    GetLogger("supervisor")
        ->warn("statusd did not answer: pods refused at admission before this start may run");
    rejections_checked_ = true;
    return true;
  }
  for (const auto& [uid, reason] : *before) {
    auto it = admitted_.find(uid);
    if (it == admitted_.end() || evictions_.count(uid) > 0) continue;
    GetLogger("supervisor")
        ->info("Pod {} stays refused ({}): statusd holds it Failed", it->second->metadata.name,
               reason);
    DropAdmitted(uid);
    rejected_[uid] = reason;
    ++generation_;
    dirty_ = true;
  }
  rejections_checked_ = true;
  return true;
}

void PodManager::Send() {
  // Before the first send of this supervisor: pods an earlier one refused stay refused.
  if (!CheckRejectedBefore()) return;
  FlushRejected();
  FlushEvents();
  flatbuffers::FlatBufferBuilder fbb(16 * 1024);
  std::vector<flatbuffers::Offset<ipc::podwork::DesiredPod>> pods;
  // In the order they were admitted (the kubelet's creation order): podworkerd starts new pods
  // in the order it is sent them, so the first pod seen is the first started.
  std::vector<std::pair<uint64_t, const std::string*>> order;
  order.reserve(admitted_.size());
  for (const auto& [uid, _] : admitted_) order.emplace_back(admitted_seq_[uid], &uid);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [_, uid_ptr] : order) {
    const std::string& uid = *uid_ptr;
    const auto& p = admitted_.at(uid);
    auto fp = pod::PodToFlatBuffer(fbb, *p);
    auto source = fbb.CreateString(source_of_[uid]);
    auto ev = evictions_.find(uid);
    auto message = ev == evictions_.end() ? 0 : fbb.CreateString(ev->second.message);
    pods.push_back(
        ipc::podwork::CreateDesiredPod(fbb, fp, source, first_seen_ms_[uid], message,
                                       ev == evictions_.end() ? 0 : ev->second.grace_seconds));
  }
  std::vector<flatbuffers::Offset<ipc::podwork::RejectedPod>> rejected;
  for (const auto& [uid, reason] : rejected_) {
    rejected.push_back(ipc::podwork::CreateRejectedPodDirect(fbb, uid.c_str(), reason.c_str()));
  }
  std::vector<flatbuffers::Offset<ipc::podwork::ConfigObject>> config_maps, secrets;
  for (const auto& [_, by_key] : configs_) {
    for (const auto& [key, cd] : by_key) {
      std::vector<flatbuffers::Offset<ipc::podwork::ConfigEntry>> entries;
      for (const auto& [k, v] : cd.data) {
        entries.push_back(ipc::podwork::CreateConfigEntry(
            fbb, fbb.CreateString(k),
            fbb.CreateVector(reinterpret_cast<const uint8_t*>(v.data()), v.size())));
      }
      auto obj = ipc::podwork::CreateConfigObject(
          fbb, fbb.CreateString(cd.namespace_name), fbb.CreateString(cd.name),
          fbb.CreateVector(entries), cd.type.empty() ? 0 : fbb.CreateString(cd.type));
      (cd.kind == "Secret" ? secrets : config_maps).push_back(obj);
    }
  }
  std::set<std::string>& unacked = unacked_[generation_];
  unacked.clear();
  // An evicted pod is sent with its mark: podworkerd never starts it again, so from this
  // generation on only its own report keeps it in use (and its volumes with it).
  for (const auto& [uid, _] : admitted_) {
    if (evictions_.count(uid) == 0) unacked.insert(uid);
  }
  // While podworkerd does not answer, the oldest sets are merged: the union is what counts.
  while (unacked_.size() > 32) {
    auto oldest = unacked_.begin();
    std::next(oldest)->second.merge(oldest->second);
    unacked_.erase(oldest);
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> in_use;
  for (const auto& uid : InUse()) in_use.push_back(fbb.CreateString(uid));
  auto desired = ipc::podwork::CreateDesiredPods(
      fbb, generation_, fbb.CreateVector(pods), config_->AllSourcesReady(),
      fbb.CreateVector(rejected), fbb.CreateVector(config_maps), fbb.CreateVector(secrets),
      fbb.CreateVector(in_use), in_use_complete_, reclaim_requests_);
  // One message, sent to both podworkerd and volumed.
  ipc::FinishMessage(fbb, envelope_, ipc::podwork::Body::DesiredPods, desired.Union());
  // Fails while a service is not there (ZMQ_IMMEDIATE); the next tick sends again.
  bool sent = work_->Send(fbb.GetBufferPointer(), fbb.GetSize()).ok();
  sent = volumes_->Send(fbb.GetBufferPointer(), fbb.GetSize()).ok() && sent;
  if (sent) dirty_ = false;
  // Resending an applied set costs every side a decode or a check (at 100 idle pods a tenth
  // of the supervisor's CPU at 2 s): once podworkerd acknowledged this generation and nothing
  // waits for statusd, only the slow safety-net resend remains.
  const bool settled = sent && acked_ == generation_ && events_.empty() && unreported_.empty();
  next_send_ = clock_.Now() + (settled ? options_.resync : options_.housekeeping);
}

void PodManager::DrainReplies() {
  // volumed's acks carry nothing we act on.
  for (int i = 0; i < 64 && volumes_->Readable(); ++i) {
    if (!volumes_->Receive(std::chrono::milliseconds(0)).ok()) break;
  }
  for (int i = 0; i < 64 && work_->Readable(); ++i) {
    auto frame = work_->Receive(std::chrono::milliseconds(0));
    if (!frame.ok()) break;
    auto m = ipc::DecodeMessage<ipc::podwork::PodWorkMessage>(
        frame->data(), frame->size(), ipc::podwork::PodWorkMessageIdentifier());
    if (!m.ok()) continue;
    if (const auto* ack = (*m)->body_as_WorkAck()) TakeAck(*ack);
    if (const auto* err = (*m)->body_as_ErrorReply()) {
      GetLogger("supervisor")
          ->warn("podworkerd refused desired pods (generation {}): {}", err->generation(),
                 err->error() ? err->error()->str() : "");
    }
  }
}

void PodManager::TakeAck(const ipc::podwork::WorkAck& ack) {
  acked_ = ack.generation();
  // What podworkerd acked it reports itself from now on.
  unacked_.erase(unacked_.begin(), unacked_.upper_bound(acked_));
  std::set<std::string> in_use;
  if (ack.in_use_uids()) {
    for (const auto* uid : *ack.in_use_uids()) in_use.insert(uid->str());
  }
  if (in_use != podworkerd_in_use_ || ack.in_use_complete() != in_use_complete_) {
    podworkerd_in_use_ = std::move(in_use);
    in_use_complete_ = ack.in_use_complete();
    dirty_ = true;  // volumed hears of it with the next send, at once
  }
  CleanUpStatuses();
}

std::set<std::string> PodManager::InUse() const {
  std::set<std::string> uids = podworkerd_in_use_;
  for (const auto& [_, pods] : unacked_) uids.insert(pods.begin(), pods.end());
  return uids;
}

void PodManager::CleanUpStatuses() {
  if (!in_use_complete_ || !config_->AllSourcesReady()) return;
  std::set<std::string> keep = InUse();
  for (const auto& [uid, _] : admitted_) keep.insert(uid);
  for (const auto& [uid, _] : rejected_) keep.insert(uid);
  // A status is orphaned only when its pod leaves the kept set: nothing to do while that set
  // only grew since the last clean-up (a pod added, a pod sent).
  if (status_keep_ &&
      std::includes(keep.begin(), keep.end(), status_keep_->begin(), status_keep_->end())) {
    status_keep_ = std::move(keep);
    return;
  }
  if (!ConnectStatusClient()) return;
  auto removed = status_client_->RemoveOrphanedStatuses({keep.begin(), keep.end()});
  if (!removed.ok()) return;  // statusd is away: again with the next ack
  for (const auto& uid : *removed) {
    GetLogger("supervisor")->info("Removed the status of pod {}: it is stopped and gone", uid);
  }
  status_keep_ = std::move(keep);
}

}  // namespace nodelet::supervisor

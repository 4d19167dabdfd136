#include "supervisor/manifest_book.h"

#include <algorithm>
#include <memory>

namespace nodelet::supervisor {
namespace {

// At most `max` bytes of `s`, cut before a UTF-8 continuation byte so that the text stays valid,
// with "..." when something was cut.
std::string Bounded(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

}  // namespace

std::string ErrorDetail(const std::string& origin, const std::string& error) {
  std::string detail = error;
  if (!origin.empty() && error.compare(0, origin.size(), origin) == 0) {
    std::string rest = error.substr(origin.size());
    if (rest.compare(0, 2, ": ") == 0) {
      detail = rest.substr(2);
    } else if (rest.compare(0, 2, " (") == 0) {
      detail = rest.substr(1);
    }
  }
  return Bounded(detail, kMaxReportedErrorBytes);
}

status::PodEvent RejectedManifestEvent(const std::string& node_name, const std::string& error,
                                       int64_t unix_s) {
  status::PodEvent e;
  e.pod_uid = "node";  // a node event, as PodSourceFailed
  e.pod_name = node_name;
  e.type = "Warning";
  e.reason = kFailedToParseManifest;
  e.message = "Rejected manifest " + Bounded(error, kMaxReportedErrorBytes);
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = unix_s;
  return e;
}

ManifestBook::Source* ManifestBook::Find(const std::string& source) {
  for (auto& s : sources_) {
    if (s.name == source) return &s;
  }
  return nullptr;
}

void ManifestBook::AddSource(const std::string& source, const std::string& location) {
  if (Source* s = Find(source)) {
    s->location = location;
    return;
  }
  Source s;
  s.name = source;
  s.location = location;
  sources_.push_back(std::move(s));
}

void ManifestBook::MoveSource(const std::string& source, const std::string& location) {
  std::erase_if(sources_, [&](const Source& s) { return s.name == source; });
  if (!location.empty()) AddSource(source, location);
}

std::vector<std::string> ManifestBook::Remember(const std::string& source,
                                                const std::vector<std::string>& errors) {
  Source* s = Find(source);
  if (s == nullptr) return {};
  std::vector<std::string> fresh;
  std::set<std::string> now;
  for (const auto& e : errors) {
    if (!now.insert(e).second) continue;
    if (!s->errors.count(e)) fresh.push_back(e);
  }
  // What is not there any more was fixed: it is new again if it comes back.
  s->errors = std::move(now);
  return fresh;
}

std::vector<std::string> ManifestBook::Read(const std::string& source,
                                            std::vector<ManifestRecord> manifests) {
  if (Find(source) == nullptr) AddSource(source, "");
  std::vector<std::string> errors;
  for (const auto& m : manifests) errors.insert(errors.end(), m.errors.begin(), m.errors.end());
  Source* s = Find(source);
  s->failure.clear();
  s->ready = true;
  s->manifests.clear();
  for (auto& m : manifests) {
    std::string origin = m.origin;
    s->manifests[origin] = std::move(m);
  }
  return Remember(source, errors);
}

void ManifestBook::Failed(const std::string& source, const std::string& failure) {
  if (Find(source) == nullptr) AddSource(source, "");
  Find(source)->failure = Bounded(failure, kMaxReportedErrorBytes);
}

std::vector<std::string> ManifestBook::Refused(const std::string& source,
                                               const std::string& failure,
                                               const std::vector<std::string>& errors) {
  Failed(source, failure);
  return Remember(source, errors);
}

ManifestReport ManifestBook::Report(const AdmissionLookup& admission) const {
  ManifestReport report;
  for (const auto& s : sources_) {
    ipc::ctl::ManifestSourceT src;
    src.source = s.name;
    src.location = s.location;
    src.failure = s.failure;
    src.ready = s.ready;
    report.sources.push_back(std::move(src));
    for (const auto& [origin, m] : s.manifests) {
      ipc::ctl::ManifestStatusT out;
      out.source = s.name;
      out.origin = origin;
      for (size_t i = 0; i < m.errors.size() && i < kMaxReportedErrors; ++i) {
        out.errors.push_back(ErrorDetail(origin, m.errors[i]));
      }
      if (m.errors.size() > kMaxReportedErrors) {
        out.errors.push_back("... and " + std::to_string(m.errors.size() - kMaxReportedErrors) +
                             " more");
      }
      for (const auto& p : m.pods) {
        auto pod = std::make_unique<ipc::ctl::ManifestPodT>();
        pod->namespace_name = p.namespace_name;
        pod->name = p.name;
        pod->uid = p.uid;
        Admission a = admission(p.uid);
        pod->admission = a.state;
        pod->reason = a.reason;
        out.pods.push_back(std::move(pod));
      }
      for (const auto& c : m.configs) {
        auto config = std::make_unique<ipc::ctl::ManifestConfigT>();
        config->kind = c.kind;
        config->namespace_name = c.namespace_name;
        config->name = c.name;
        out.configs.push_back(std::move(config));
      }
      report.manifests.push_back(std::move(out));
    }
  }
  return report;
}

status::PodEvent SourceConflictEvent(const std::string& node_name, const SourceConflict& c,
                                     int64_t unix_s) {
  const std::string held =
      c.kind == "uid" ? "its uid" : "its name " + c.full_name + " (under uid " + c.winner_uid + ")";
  status::PodEvent e;
  e.pod_uid = "node";  // the pod kept out runs nowhere: a node event
  e.pod_name = node_name;
  e.type = "Warning";
  e.reason = kPodSourceConflict;
  e.message = "Pod " + c.full_name + " (uid " + c.uid + ") from the " + c.source +
              " source is not run: a pod of the " + c.winner_source + " source holds " + held +
              "; the " + c.winner_source +
              " source wins (file, then http, then etcd); this pod runs once that one is gone";
  e.source = "nodelet";
  e.first_unix_s = e.last_unix_s = unix_s;
  return e;
}

}  // namespace nodelet::supervisor

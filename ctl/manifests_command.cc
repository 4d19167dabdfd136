#include "ctl/manifests_command.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ctl/ctl_client.h"

namespace nodelet::ctl {
namespace {

using ipc::ctl::PodAdmission;

const char* AdmissionName(PodAdmission a) {
  switch (a) {
    case PodAdmission::Admitted:
      return "admitted";
    case PodAdmission::Rejected:
      return "rejected";
    case PodAdmission::Ignored:
      return "ignored";
  }
  return "unknown";
}

// "pod default/web-node1 (uid 3f2a...) admitted", "... rejected: OutOfcpu".
std::string PodLine(const ipc::ctl::ManifestPodT& p) {
  std::string line = "pod " + p.namespace_name + "/" + p.name + " (uid " + p.uid + ") " +
                     AdmissionName(p.admission);
  if (!p.reason.empty()) line += ": " + p.reason;
  return line;
}

std::string ConfigLine(const ipc::ctl::ManifestConfigT& c) {
  std::string kind = c.kind;
  std::transform(kind.begin(), kind.end(), kind.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return kind + " " + c.namespace_name + "/" + c.name;
}

struct Row {
  std::string source, manifest, status;
  std::vector<std::string> items;  // the first on the row's line, the others below it
};

}  // namespace

std::string ManifestStatusName(const ipc::ctl::ManifestStatusT& m) {
  if (m.errors.empty()) return "Taken";
  return m.pods.empty() && m.configs.empty() ? "Rejected" : "Partial";
}

int ManifestsExitCode(const ipc::ctl::CtlReplyT& reply) {
  for (const auto& s : reply.manifest_sources) {
    if (!s->failure.empty()) return kExitFailed;
  }
  for (const auto& m : reply.manifests) {
    if (!m->errors.empty()) return kExitFailed;
  }
  return kExitOk;
}

std::string FormatManifests(const ipc::ctl::CtlReplyT& reply) {
  if (reply.manifest_sources.empty()) {
    return "No pod sources (neither --pod-manifest-path nor --manifest-url is set).\n";
  }
  std::vector<Row> rows;
  for (const auto& s : reply.manifest_sources) {
    if (!s->failure.empty()) {
      rows.push_back(
          {s->source,
           s->location,
           "Failed",
           {s->failure + (s->ready ? " (keeping what it served last)" : " (never read yet)")}});
    } else if (!s->ready) {
      rows.push_back({s->source, s->location, "Pending", {"not read yet"}});
    }
    size_t listed = 0;
    for (const auto& m : reply.manifests) {
      if (m->source != s->source) continue;
      ++listed;
      Row row{m->source, m->origin, ManifestStatusName(*m), {}};
      for (const auto& p : m->pods) row.items.push_back(PodLine(*p));
      for (const auto& c : m->configs) row.items.push_back(ConfigLine(*c));
      for (const auto& e : m->errors) row.items.push_back(e);
      if (row.items.empty()) row.items.push_back("no documents");
      rows.push_back(std::move(row));
    }
    if (listed == 0 && s->ready && s->failure.empty()) {
      rows.push_back({s->source, s->location, "Empty", {"no manifests"}});
    }
  }
  size_t source_w = 6, manifest_w = 8, status_w = 6;
  for (const auto& r : rows) {
    source_w = std::max(source_w, r.source.size());
    manifest_w = std::max(manifest_w, r.manifest.size());
    status_w = std::max(status_w, r.status.size());
  }
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w + 2 - s.size(), ' '); };
  std::ostringstream out;
  out << pad("SOURCE", source_w) << pad("MANIFEST", manifest_w) << pad("STATUS", status_w)
      << "PODS/REASON\n";
  const std::string indent(source_w + manifest_w + status_w + 6, ' ');
  for (const auto& r : rows) {
    out << pad(r.source, source_w) << pad(r.manifest, manifest_w) << pad(r.status, status_w)
        << r.items.front() << "\n";
    for (size_t i = 1; i < r.items.size(); ++i) out << indent << r.items[i] << "\n";
  }
  return out.str();
}

nlohmann::json ManifestsJson(const ipc::ctl::CtlReplyT& reply) {
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& s : reply.manifest_sources) {
    sources.push_back({{"source", s->source},
                       {"location", s->location},
                       {"ready", s->ready},
                       {"failure", s->failure}});
  }
  nlohmann::json manifests = nlohmann::json::array();
  for (const auto& m : reply.manifests) {
    nlohmann::json pods = nlohmann::json::array();
    for (const auto& p : m->pods) {
      pods.push_back({{"namespace", p->namespace_name},
                      {"name", p->name},
                      {"uid", p->uid},
                      {"admission", AdmissionName(p->admission)},
                      {"reason", p->reason}});
    }
    nlohmann::json configs = nlohmann::json::array();
    for (const auto& c : m->configs) {
      configs.push_back({{"kind", c->kind}, {"namespace", c->namespace_name}, {"name", c->name}});
    }
    manifests.push_back({{"source", m->source},
                         {"origin", m->origin},
                         {"status", ManifestStatusName(*m)},
                         {"errors", m->errors},
                         {"pods", pods},
                         {"configs", configs}});
  }
  // A manifest's text may be anything: PrintDocument replaces bytes that are not UTF-8.
  return nlohmann::json{{"sources", sources}, {"manifests", manifests}};
}

int RunManifests(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, ipc::ctl::RequestKind::Manifests, {}, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  if (format == OutputFormat::kName) {
    for (const auto& m : reply->manifests) out << m->origin << "\n";
  } else if (!PrintDocument(format, ManifestsJson(*reply), out)) {
    out << FormatManifests(*reply);
  }
  return ManifestsExitCode(*reply);
}

}  // namespace nodelet::ctl

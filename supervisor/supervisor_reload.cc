#include "supervisor/supervisor_reload.h"

#include <charconv>

#include "lib/common/duration.h"
#include "lib/common/logging.h"
#include "lib/common/trusted_path.h"
#include "supervisor/eviction_manager.h"
#include "supervisor/sources/manifest_url_source.h"

namespace nodelet::supervisor {
namespace {

const char* const kSourceKeys[] = {"pod-manifest-path", "manifest-url", "manifest-url-ca",
                                   "http-check-frequency", "manifest-url-header"};
const char* const kEvictionKeys[] = {"eviction-hard",
                                     "eviction-soft",
                                     "eviction-soft-grace-period",
                                     "eviction-minimum-reclaim",
                                     "eviction-pressure-transition-period",
                                     "eviction-max-pod-grace-period",
                                     "eviction-monitoring-period"};

}  // namespace

const std::set<std::string>& SupervisorLiveKeys() {
  static const std::set<std::string> kKeys = [] {
    std::set<std::string> keys = {"log-level"};
    keys.insert(std::begin(kSourceKeys), std::end(kSourceKeys));
    keys.insert(std::begin(kEvictionKeys), std::end(kEvictionKeys));
    return keys;
  }();
  return kKeys;
}

Result<SupervisorReload> ParseSupervisorReload(const ReloadPlan& plan, const FileSettings& after,
                                               const CLI::App& app,
                                               const SupervisorOptions& running,
                                               SupervisorOptions& next) {
  const std::string& file = running.common.config_file;
  auto value = [&](const std::string& key, const std::string& current) {
    if (!Applies(plan, key)) return current;
    // A key the file no longer gives goes back to its flag's default.
    const CLI::Option* opt = app.get_option_no_throw("--" + key);
    return SettingOr(after, key, opt != nullptr ? opt->get_default_str() : "");
  };
  auto bad = [&](const std::string& key, const std::string& why) {
    return InvalidArgument(file + ": " + key + ": " + why);
  };
  auto duration = [&](const std::string& key,
                      const std::string& text) -> Result<std::chrono::milliseconds> {
    auto d = ParseDuration(text);
    if (!d.ok()) return bad(key, d.status().message());
    return *d;
  };
  SupervisorReload out;
  next = running;

  if (Applies(plan, "log-level")) {
    next.common.log_level = value("log-level", running.common.log_level);
    if (!IsLogLevel(next.common.log_level)) {
      return bad("log-level", "'" + next.common.log_level +
                                  "' is not one of trace, debug, info, warn, error, critical, off");
    }
    out.log_level = next.common.log_level;
  }

  if (std::any_of(std::begin(kSourceKeys), std::end(kSourceKeys),
                  [&](const char* k) { return Applies(plan, k); })) {
    next.pod_manifest_path = value("pod-manifest-path", running.pod_manifest_path);
    next.manifest_url = value("manifest-url", running.manifest_url);
    next.manifest_url_ca = value("manifest-url-ca", running.manifest_url_ca);
    next.http_check_frequency = value("http-check-frequency", running.http_check_frequency);
    if (Applies(plan, "manifest-url-header")) {
      auto it = after.find("manifest-url-header");
      next.manifest_url_headers =
          it == after.end() ? std::vector<std::string>{} : std::vector<std::string>(it->second);
    }
    PodManagerOptions sources;
    sources.manifest_dir = next.pod_manifest_path;
    sources.manifest_url = next.manifest_url;
    sources.manifest_url_ca = next.manifest_url_ca;
    auto period = duration("http-check-frequency", next.http_check_frequency);
    if (!period.ok()) return period.status();
    sources.manifest_url_period = *period;
    for (const auto& h : next.manifest_url_headers) {
      auto parsed = ParseHeaderFlag(h);
      if (!parsed.ok()) return bad("manifest-url-header", parsed.status().message());
      sources.manifest_url_headers.push_back(*parsed);
    }
    if (!sources.manifest_url.empty()) {
      if (auto parts = ParseHttpUrl(sources.manifest_url); !parts.ok()) {
        return bad("manifest-url", parts.status().message());
      }
    }
    // The directory is trusted as at start: only root and nodelet's own user may change it.
    if (!sources.manifest_dir.empty()) {
      const auto trust = TrustPolicy::ForThisProcess(running.common.admin_group);
      if (Status s = CheckTrustedPaths({{"--pod-manifest-path", sources.manifest_dir}}, trust);
          !s.ok()) {
        return bad("pod-manifest-path", s.message());
      }
    }
    out.sources = std::move(sources);
  }

  if (std::any_of(std::begin(kEvictionKeys), std::end(kEvictionKeys),
                  [&](const char* k) { return Applies(plan, k); })) {
    next.eviction_hard = value("eviction-hard", running.eviction_hard);
    next.eviction_soft = value("eviction-soft", running.eviction_soft);
    next.eviction_soft_grace_period =
        value("eviction-soft-grace-period", running.eviction_soft_grace_period);
    next.eviction_minimum_reclaim =
        value("eviction-minimum-reclaim", running.eviction_minimum_reclaim);
    next.eviction_pressure_transition_period =
        value("eviction-pressure-transition-period", running.eviction_pressure_transition_period);
    next.eviction_monitoring_period =
        value("eviction-monitoring-period", running.eviction_monitoring_period);
    EvictionReload e;
    auto thresholds =
        EvictionThresholdsFromFlags(next.eviction_hard, next.eviction_soft,
                                    next.eviction_soft_grace_period, next.eviction_minimum_reclaim);
    if (!thresholds.ok()) return InvalidArgument(file + ": " + thresholds.status().message());
    e.thresholds = *thresholds;
    auto transition =
        duration("eviction-pressure-transition-period", next.eviction_pressure_transition_period);
    if (!transition.ok()) return transition.status();
    e.pressure_transition_period = *transition;
    auto monitoring = duration("eviction-monitoring-period", next.eviction_monitoring_period);
    if (!monitoring.ok()) return monitoring.status();
    e.monitoring_period = *monitoring;
    const std::string grace = value("eviction-max-pod-grace-period",
                                    std::to_string(running.eviction_max_pod_grace_period));
    int64_t seconds = 0;
    auto [end, ec] = std::from_chars(grace.data(), grace.data() + grace.size(), seconds);
    if (ec != std::errc() || end != grace.data() + grace.size()) {
      return bad("eviction-max-pod-grace-period", "'" + grace + "' is not a number of seconds");
    }
    next.eviction_max_pod_grace_period = seconds;
    e.max_pod_grace_seconds = seconds;
    out.eviction = std::move(e);
  }
  return out;
}

Status ApplySupervisorReload(const SupervisorReload& reload, PodManager& pods,
                             NodeStatusManager& node, EvictionManager& eviction) {
  if (reload.sources) {
    auto changed = pods.ReconfigureSources(*reload.sources);
    if (!changed.ok()) return changed.status();
  }
  if (reload.eviction) {
    std::vector<pod::EvictionThreshold> hard;
    for (const auto& t : reload.eviction->thresholds) {
      if (t.hard) hard.push_back(t);
    }
    node.SetHardEviction(std::move(hard));
    eviction.Reconfigure(reload.eviction->thresholds, reload.eviction->pressure_transition_period,
                         reload.eviction->max_pod_grace_seconds,
                         reload.eviction->monitoring_period);
  }
  if (reload.log_level) SetLogLevel(*reload.log_level);
  return Status::Ok();
}

}  // namespace nodelet::supervisor

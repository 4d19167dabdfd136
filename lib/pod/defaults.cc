#include "lib/pod/defaults.h"

namespace nodelet::pod {
namespace {

void DefaultHttpGet(std::optional<HttpGetAction>& h) {
  if (!h) return;
  if (h->path.empty()) h->path = "/";
  if (h->scheme.empty()) h->scheme = kSchemeHttp;
}

void DefaultProbe(std::optional<Probe>& probe) {
  if (!probe) return;
  if (probe->period_seconds == 0) probe->period_seconds = 10;
  if (probe->timeout_seconds == 0) probe->timeout_seconds = 1;
  if (probe->success_threshold == 0) probe->success_threshold = 1;
  if (probe->failure_threshold == 0) probe->failure_threshold = 3;
  DefaultHttpGet(probe->http_get);
}

void DefaultHandler(std::optional<LifecycleHandler>& h) {
  if (h) DefaultHttpGet(h->http_get);
}

void DefaultContainer(Container& c, bool host_network) {
  if (c.image_pull_policy.empty()) c.image_pull_policy = DefaultImagePullPolicy(c.image);
  if (c.termination_message_path.empty()) {
    c.termination_message_path = kDefaultTerminationMessagePath;
  }
  for (ContainerPort& port : c.ports) {
    if (port.protocol.empty()) port.protocol = kProtocolTcp;
    if (host_network && port.host_port == 0) port.host_port = port.container_port;
  }
  // A limit without a request requests the limit.
  for (const auto& [name, limit] : c.resources.limits) {
    c.resources.requests.try_emplace(name, limit);
  }
  DefaultProbe(c.liveness_probe);
  DefaultProbe(c.readiness_probe);
  DefaultProbe(c.startup_probe);
  if (c.termination_message_policy.empty()) {
    c.termination_message_policy = kTerminationMessageReadFile;
  }
  if (c.lifecycle) {
    DefaultHandler(c.lifecycle->post_start);
    DefaultHandler(c.lifecycle->pre_stop);
  }
  for (EnvVar& e : c.env) {
    if (e.value_from && e.value_from->field_ref && e.value_from->field_ref->api_version.empty()) {
      e.value_from->field_ref->api_version = "v1";
    }
  }
}

}  // namespace

std::string_view DefaultImagePullPolicy(std::string_view image) {
  if (image.find('@') != std::string_view::npos) return kPullIfNotPresent;  // by digest
  // The tag follows the last ':' after the last '/' (a ':' before it is a registry port).
  size_t slash = image.rfind('/');
  size_t colon = image.rfind(':');
  if (colon == std::string_view::npos || (slash != std::string_view::npos && colon < slash)) {
    return kPullAlways;
  }
  return image.substr(colon + 1) == "latest" ? kPullAlways : kPullIfNotPresent;
}

void ApplyPodDefaults(Pod& pod) {
  if (pod.metadata.namespace_name.empty()) pod.metadata.namespace_name = kDefaultNamespace;
  PodSpec& spec = pod.spec;
  if (spec.restart_policy.empty()) spec.restart_policy = kRestartPolicyAlways;
  if (spec.dns_policy.empty()) spec.dns_policy = kDnsClusterFirst;
  if (!spec.termination_grace_period_seconds) {
    spec.termination_grace_period_seconds = kDefaultTerminationGracePeriodSeconds;
  }
  for (Container& c : spec.init_containers) DefaultContainer(c, spec.host_network);
  for (Container& c : spec.containers) DefaultContainer(c, spec.host_network);
  for (Volume& v : spec.volumes) {
    if (!v.empty_dir && !v.host_path && !v.config_map && !v.secret && !v.downward_api) {
      v.empty_dir = EmptyDirVolumeSource{};
    }
    if (v.config_map && !v.config_map->default_mode) v.config_map->default_mode = kDefaultFileMode;
    if (v.secret && !v.secret->default_mode) v.secret->default_mode = kDefaultFileMode;
    if (v.downward_api) {
      if (!v.downward_api->default_mode) v.downward_api->default_mode = kDefaultFileMode;
      for (DownwardApiVolumeFile& file : v.downward_api->items) {
        if (file.field_ref && file.field_ref->api_version.empty())
          file.field_ref->api_version = "v1";
      }
    }
  }
}

}  // namespace nodelet::pod

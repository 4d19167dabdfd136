// Pod -> FlatBuffers (pod_flatbuffers.h): PodToFlatBuffer writes the model into a builder,
// leaving out empty strings and lists, and EncodePod makes a standalone "NLPD" buffer of it.
#include <optional>
#include <string>

#include "lib/pod/pod_flatbuffers.h"

namespace nodelet::pod {
namespace fb = ipc::pod;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

// Empty strings are left out (absent and empty mean the same).
Offset<flatbuffers::String> Str(FlatBufferBuilder& b, const std::string& s) {
  return s.empty() ? 0 : b.CreateString(s);
}

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> StrList(
    FlatBufferBuilder& b, const std::vector<std::string>& list) {
  return list.empty() ? 0 : b.CreateVectorOfStrings(list);
}

template <typename FbT, typename T, typename F>
Offset<flatbuffers::Vector<Offset<FbT>>> List(FlatBufferBuilder& b, const std::vector<T>& list,
                                              F encode) {
  if (list.empty()) return 0;
  std::vector<Offset<FbT>> items;
  items.reserve(list.size());
  for (const T& item : list) items.push_back(encode(b, item));
  return b.CreateVector(items);
}

Offset<flatbuffers::Vector<Offset<fb::StringEntry>>> StrMap(
    FlatBufferBuilder& b, const std::map<std::string, std::string>& m) {
  if (m.empty()) return 0;
  std::vector<Offset<fb::StringEntry>> items;
  for (const auto& [k, v] : m) items.push_back(fb::CreateStringEntry(b, Str(b, k), Str(b, v)));
  return b.CreateVector(items);
}

Offset<flatbuffers::Vector<Offset<fb::ResourceQuantity>>> Resources(FlatBufferBuilder& b,
                                                                    const ResourceList& list) {
  if (list.empty()) return 0;
  std::vector<Offset<fb::ResourceQuantity>> items;
  for (const auto& [name, q] : list) {
    items.push_back(fb::CreateResourceQuantity(b, Str(b, name), Str(b, q.text())));
  }
  return b.CreateVector(items);
}

Offset<fb::IntOrString> EncodePort(FlatBufferBuilder& b, const IntOrString& p) {
  return fb::CreateIntOrString(b, p.is_string, p.int_value, Str(b, p.str_value));
}

template <typename T>
flatbuffers::Optional<T> Opt(const std::optional<T>& v) {
  return v ? flatbuffers::Optional<T>(*v) : flatbuffers::nullopt;
}

Offset<fb::SecurityProfile> EncodeProfile(FlatBufferBuilder& b,
                                          const std::optional<SecurityProfile>& p) {
  if (!p) return 0;
  return fb::CreateSecurityProfile(b, Str(b, p->type), Str(b, p->localhost_profile));
}

Offset<fb::PodSecurityContext> EncodePodSecurity(FlatBufferBuilder& b,
                                                 const std::optional<PodSecurityContext>& p) {
  if (!p) return 0;
  auto groups = p->supplemental_groups.empty() ? 0 : b.CreateVector(p->supplemental_groups);
  auto sysctls = List<fb::Sysctl>(b, p->sysctls, [](FlatBufferBuilder& bb, const Sysctl& s) {
    return fb::CreateSysctl(bb, Str(bb, s.name), Str(bb, s.value));
  });
  auto seccomp = EncodeProfile(b, p->seccomp_profile);
  auto apparmor = EncodeProfile(b, p->app_armor_profile);
  return fb::CreatePodSecurityContext(
      b, Opt(p->run_as_user), Opt(p->run_as_group), Opt(p->run_as_non_root), Opt(p->fs_group),
      Str(b, p->fs_group_change_policy), groups, sysctls, seccomp, apparmor);
}

Offset<fb::PodDnsConfig> EncodeDnsConfig(FlatBufferBuilder& b,
                                         const std::optional<PodDnsConfig>& d) {
  if (!d) return 0;
  auto nameservers = StrList(b, d->nameservers);
  auto searches = StrList(b, d->searches);
  auto options = List<fb::PodDnsConfigOption>(
      b, d->options, [](FlatBufferBuilder& bb, const PodDnsConfigOption& o) {
        // A set value is written even when empty (absent and "" differ here).
        return fb::CreatePodDnsConfigOption(bb, Str(bb, o.name),
                                            o.value ? bb.CreateString(*o.value) : 0);
      });
  return fb::CreatePodDnsConfig(b, nameservers, searches, options);
}

Offset<fb::ExecAction> EncodeExec(FlatBufferBuilder& b, const std::optional<ExecAction>& e) {
  return e ? fb::CreateExecAction(b, StrList(b, e->command)) : 0;
}

Offset<fb::HttpGetAction> EncodeHttpGet(FlatBufferBuilder& b,
                                        const std::optional<HttpGetAction>& http) {
  if (!http) return 0;
  const HttpGetAction& h = *http;
  auto headers =
      List<fb::HttpHeader>(b, h.http_headers, [](FlatBufferBuilder& bb, const HttpHeader& hh) {
        return fb::CreateHttpHeader(bb, Str(bb, hh.name), Str(bb, hh.value));
      });
  return fb::CreateHttpGetAction(b, Str(b, h.host), EncodePort(b, h.port), Str(b, h.path),
                                 Str(b, h.scheme), headers);
}

Offset<fb::Probe> EncodeProbe(FlatBufferBuilder& b, const std::optional<Probe>& probe) {
  if (!probe) return 0;
  const Probe& p = *probe;
  auto exec = EncodeExec(b, p.exec);
  auto http = EncodeHttpGet(b, p.http_get);
  Offset<fb::TcpSocketAction> tcp = 0;
  if (p.tcp_socket) {
    tcp =
        fb::CreateTcpSocketAction(b, Str(b, p.tcp_socket->host), EncodePort(b, p.tcp_socket->port));
  }
  Offset<fb::GrpcAction> grpc = 0;
  if (p.grpc) grpc = fb::CreateGrpcAction(b, p.grpc->port, Str(b, p.grpc->service));
  return fb::CreateProbe(b, exec, http, tcp, p.initial_delay_seconds, p.period_seconds,
                         p.timeout_seconds, p.success_threshold, p.failure_threshold, grpc);
}

Offset<fb::LifecycleHandler> EncodeHandler(FlatBufferBuilder& b,
                                           const std::optional<LifecycleHandler>& handler) {
  if (!handler) return 0;
  auto exec = EncodeExec(b, handler->exec);
  auto http = EncodeHttpGet(b, handler->http_get);
  Offset<fb::SleepAction> sleep = 0;
  if (handler->sleep) sleep = fb::CreateSleepAction(b, handler->sleep->seconds);
  return fb::CreateLifecycleHandler(b, exec, http, sleep);
}

Offset<fb::ObjectFieldSelector> EncodeFieldRef(FlatBufferBuilder& b,
                                               const std::optional<ObjectFieldSelector>& r) {
  return r ? fb::CreateObjectFieldSelector(b, Str(b, r->api_version), Str(b, r->field_path)) : 0;
}

Offset<fb::ResourceFieldSelector> EncodeResourceRef(FlatBufferBuilder& b,
                                                    const std::optional<ResourceFieldSelector>& r) {
  if (!r) return 0;
  return fb::CreateResourceFieldSelector(b, Str(b, r->container_name), Str(b, r->resource),
                                         r->divisor ? b.CreateString(r->divisor->text()) : 0);
}

Offset<fb::KeySelector> EncodeKeyRef(FlatBufferBuilder& b, const std::optional<KeySelector>& k) {
  return k ? fb::CreateKeySelector(b, Str(b, k->name), Str(b, k->key), Opt(k->optional)) : 0;
}

Offset<fb::EnvFromRef> EncodeEnvFromRef(FlatBufferBuilder& b, const std::optional<EnvFromRef>& r) {
  return r ? fb::CreateEnvFromRef(b, Str(b, r->name), Opt(r->optional)) : 0;
}

Offset<fb::Container> EncodeContainer(FlatBufferBuilder& b, const Container& c) {
  auto env = List<fb::EnvVar>(b, c.env, [](FlatBufferBuilder& bb, const EnvVar& e) {
    Offset<fb::EnvVarSource> from = 0;
    if (e.value_from) {
      const EnvVarSource& v = *e.value_from;
      from = fb::CreateEnvVarSource(
          bb, EncodeFieldRef(bb, v.field_ref), EncodeResourceRef(bb, v.resource_field_ref),
          EncodeKeyRef(bb, v.config_map_key_ref), EncodeKeyRef(bb, v.secret_key_ref));
    }
    return fb::CreateEnvVar(bb, Str(bb, e.name), Str(bb, e.value), from);
  });
  auto env_from =
      List<fb::EnvFromSource>(b, c.env_from, [](FlatBufferBuilder& bb, const EnvFromSource& e) {
        return fb::CreateEnvFromSource(bb, Str(bb, e.prefix),
                                       EncodeEnvFromRef(bb, e.config_map_ref),
                                       EncodeEnvFromRef(bb, e.secret_ref));
      });
  Offset<fb::Lifecycle> lifecycle = 0;
  if (c.lifecycle) {
    auto post = EncodeHandler(b, c.lifecycle->post_start);
    auto pre = EncodeHandler(b, c.lifecycle->pre_stop);
    lifecycle = fb::CreateLifecycle(b, post, pre);
  }
  auto ports =
      List<fb::ContainerPort>(b, c.ports, [](FlatBufferBuilder& bb, const ContainerPort& p) {
        return fb::CreateContainerPort(bb, Str(bb, p.name), p.container_port, Str(bb, p.protocol),
                                       p.host_port, Str(bb, p.host_ip));
      });
  Offset<fb::ResourceRequirements> resources = 0;
  if (!c.resources.requests.empty() || !c.resources.limits.empty()) {
    auto req = Resources(b, c.resources.requests);
    auto lim = Resources(b, c.resources.limits);
    resources = fb::CreateResourceRequirements(b, req, lim);
  }
  auto mounts =
      List<fb::VolumeMount>(b, c.volume_mounts, [](FlatBufferBuilder& bb, const VolumeMount& m) {
        return fb::CreateVolumeMount(bb, Str(bb, m.name), Str(bb, m.mount_path), m.read_only,
                                     Str(bb, m.sub_path));
      });
  auto liveness = EncodeProbe(b, c.liveness_probe);
  auto readiness = EncodeProbe(b, c.readiness_probe);
  auto startup = EncodeProbe(b, c.startup_probe);
  Offset<fb::SecurityContext> sc = 0;
  if (c.security_context) {
    const SecurityContext& s = *c.security_context;
    Offset<fb::Capabilities> caps = 0;
    if (s.capabilities) {
      caps = fb::CreateCapabilities(b, StrList(b, s.capabilities->add),
                                    StrList(b, s.capabilities->drop));
    }
    auto seccomp = EncodeProfile(b, s.seccomp_profile);
    auto apparmor = EncodeProfile(b, s.app_armor_profile);
    sc = fb::CreateSecurityContext(
        b, Opt(s.run_as_user), Opt(s.run_as_group), Opt(s.run_as_non_root), Opt(s.privileged),
        Opt(s.read_only_root_filesystem), Opt(s.allow_privilege_escalation), caps, seccomp,
        apparmor, Str(b, s.proc_mount));
  }
  return fb::CreateContainer(b, Str(b, c.name), Str(b, c.image), Str(b, c.image_pull_policy),
                             StrList(b, c.command), StrList(b, c.args), Str(b, c.working_dir), env,
                             ports, resources, mounts, liveness, readiness, startup, sc,
                             Str(b, c.termination_message_path), env_from, lifecycle,
                             Str(b, c.termination_message_policy), c.stdin, c.stdin_once, c.tty);
}

Offset<flatbuffers::Vector<Offset<fb::KeyToPath>>> Items(FlatBufferBuilder& b,
                                                         const std::vector<KeyToPath>& items) {
  return List<fb::KeyToPath>(b, items, [](FlatBufferBuilder& bb, const KeyToPath& k) {
    return fb::CreateKeyToPath(bb, Str(bb, k.key), Str(bb, k.path), Opt(k.mode));
  });
}

Offset<fb::Volume> EncodeVolume(FlatBufferBuilder& b, const Volume& v) {
  Offset<fb::EmptyDirVolumeSource> empty_dir = 0;
  if (v.empty_dir) {
    empty_dir = fb::CreateEmptyDirVolumeSource(
        b, Str(b, v.empty_dir->medium),
        v.empty_dir->size_limit ? b.CreateString(v.empty_dir->size_limit->text()) : 0);
  }
  Offset<fb::HostPathVolumeSource> host_path = 0;
  if (v.host_path) {
    host_path =
        fb::CreateHostPathVolumeSource(b, Str(b, v.host_path->path), Str(b, v.host_path->type));
  }
  Offset<fb::ConfigMapVolumeSource> config_map = 0;
  if (v.config_map) {
    const ConfigMapVolumeSource& c = *v.config_map;
    config_map = fb::CreateConfigMapVolumeSource(b, Str(b, c.name), Items(b, c.items),
                                                 Opt(c.default_mode), Opt(c.optional));
  }
  Offset<fb::SecretVolumeSource> secret = 0;
  if (v.secret) {
    const SecretVolumeSource& s = *v.secret;
    secret = fb::CreateSecretVolumeSource(b, Str(b, s.secret_name), Items(b, s.items),
                                          Opt(s.default_mode), Opt(s.optional));
  }
  Offset<fb::DownwardApiVolumeSource> downward = 0;
  if (v.downward_api) {
    auto files = List<fb::DownwardApiVolumeFile>(
        b, v.downward_api->items, [](FlatBufferBuilder& bb, const DownwardApiVolumeFile& f) {
          auto field_ref = EncodeFieldRef(bb, f.field_ref);
          auto resource_ref = EncodeResourceRef(bb, f.resource_field_ref);
          return fb::CreateDownwardApiVolumeFile(bb, Str(bb, f.path), field_ref, resource_ref,
                                                 Opt(f.mode));
        });
    downward = fb::CreateDownwardApiVolumeSource(b, files, Opt(v.downward_api->default_mode));
  }
  return fb::CreateVolume(b, Str(b, v.name), empty_dir, host_path, config_map, secret, downward);
}

}  // namespace

Offset<fb::Pod> PodToFlatBuffer(FlatBufferBuilder& b, const Pod& pod) {
  const ObjectMeta& m = pod.metadata;
  auto labels = StrMap(b, m.labels);
  auto annotations = StrMap(b, m.annotations);
  auto meta = fb::CreateObjectMeta(b, Str(b, m.name), Str(b, m.namespace_name), Str(b, m.uid),
                                   labels, annotations, Opt(m.creation_timestamp),
                                   Opt(m.deletion_timestamp), Opt(m.deletion_grace_period_seconds));
  const PodSpec& s = pod.spec;
  auto init = List<fb::Container>(b, s.init_containers, EncodeContainer);
  auto containers = List<fb::Container>(b, s.containers, EncodeContainer);
  auto volumes = List<fb::Volume>(b, s.volumes, EncodeVolume);
  auto security = EncodePodSecurity(b, s.security_context);
  auto aliases =
      List<fb::HostAlias>(b, s.host_aliases, [](FlatBufferBuilder& bb, const HostAlias& a) {
        return fb::CreateHostAlias(bb, Str(bb, a.ip), StrList(bb, a.hostnames));
      });
  auto dns_config = EncodeDnsConfig(b, s.dns_config);
  auto spec = fb::CreatePodSpec(
      b, init, containers, volumes, Str(b, s.restart_policy),
      Opt(s.termination_grace_period_seconds), Opt(s.active_deadline_seconds), s.host_network,
      Str(b, s.node_name), Str(b, s.runtime_class_name), Str(b, s.service_account_name), s.host_pid,
      s.host_ipc, Opt(s.share_process_namespace), security, Str(b, s.hostname), Str(b, s.subdomain),
      Opt(s.set_hostname_as_fqdn), aliases, Str(b, s.dns_policy), dns_config,
      Str(b, s.priority_class_name), StrList(b, s.image_pull_secrets));
  return fb::CreatePod(b, meta, spec);
}

std::vector<uint8_t> EncodePod(const Pod& pod) {
  FlatBufferBuilder b;
  b.Finish(PodToFlatBuffer(b, pod), fb::PodIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

}  // namespace nodelet::pod

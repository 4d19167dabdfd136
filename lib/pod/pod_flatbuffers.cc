#include "lib/pod/pod_flatbuffers.h"

#include <optional>
#include <string>

namespace nodelet::pod {
namespace fb = ipc::pod;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

// ---- Encoding ----

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

// ---- Decoding ----

std::string S(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::vector<std::string> SList(const flatbuffers::Vector<Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (!v) return out;
  out.reserve(v->size());
  for (const auto* s : *v) out.push_back(S(s));
  return out;
}

template <typename T>
std::optional<T> O(flatbuffers::Optional<T> v) {
  return v ? std::optional<T>(*v) : std::nullopt;
}

std::optional<SecurityProfile> ProfileFrom(const fb::SecurityProfile* p) {
  if (p == nullptr) return std::nullopt;
  return SecurityProfile{S(p->type()), S(p->localhost_profile())};
}

class Decoder {
 public:
  Status status;

  std::optional<Quantity> Qty(const flatbuffers::String* s, const std::string& what) {
    auto q = Quantity::Parse(S(s));
    if (!q.ok()) {
      if (status.ok()) status = InvalidArgument(what + ": " + q.status().message());
      return std::nullopt;
    }
    return *q;
  }

  std::optional<Quantity> OptQty(const flatbuffers::String* s, const std::string& what) {
    if (!s || s->size() == 0) return std::nullopt;
    return Qty(s, what);
  }

  ResourceList Resources(const flatbuffers::Vector<Offset<fb::ResourceQuantity>>* v,
                         const std::string& what) {
    ResourceList out;
    if (!v) return out;
    for (const auto* r : *v) {
      std::string name = S(r->name());
      if (auto q = Qty(r->quantity(), what + "[" + name + "]")) out[name] = *q;
    }
    return out;
  }

  static IntOrString Port(const fb::IntOrString* p) {
    if (!p) return {};
    return p->is_string() ? IntOrString::String(S(p->str_value()))
                          : IntOrString::Int(p->int_value());
  }

  static std::optional<ExecAction> ExecFrom(const fb::ExecAction* e) {
    if (!e) return std::nullopt;
    return ExecAction{SList(e->command())};
  }

  static std::optional<HttpGetAction> HttpGetFrom(const fb::HttpGetAction* h) {
    if (!h) return std::nullopt;
    HttpGetAction a;
    a.host = S(h->host());
    a.port = Port(h->port());
    a.path = S(h->path());
    a.scheme = S(h->scheme());
    if (h->http_headers()) {
      for (const auto* hh : *h->http_headers())
        a.http_headers.push_back({S(hh->name()), S(hh->value())});
    }
    return a;
  }

  static std::optional<LifecycleHandler> HandlerFrom(const fb::LifecycleHandler* h) {
    if (!h) return std::nullopt;
    LifecycleHandler out;
    out.exec = ExecFrom(h->exec());
    out.http_get = HttpGetFrom(h->http_get());
    if (h->sleep()) out.sleep = SleepAction{h->sleep()->seconds()};
    return out;
  }

  static std::optional<ObjectFieldSelector> FieldRefFrom(const fb::ObjectFieldSelector* r) {
    if (!r) return std::nullopt;
    return ObjectFieldSelector{S(r->api_version()), S(r->field_path())};
  }

  std::optional<ResourceFieldSelector> ResourceRefFrom(const fb::ResourceFieldSelector* r,
                                                       const std::string& what) {
    if (!r) return std::nullopt;
    return ResourceFieldSelector{S(r->container_name()), S(r->resource()),
                                 OptQty(r->divisor(), what + " divisor")};
  }

  static std::optional<KeySelector> KeyRefFrom(const fb::KeySelector* k) {
    if (!k) return std::nullopt;
    return KeySelector{S(k->name()), S(k->key()), O(k->optional())};
  }

  static std::optional<EnvFromRef> EnvFromRefFrom(const fb::EnvFromRef* r) {
    if (!r) return std::nullopt;
    return EnvFromRef{S(r->name()), O(r->optional())};
  }

  static std::optional<Probe> ProbeFrom(const fb::Probe* p) {
    if (!p) return std::nullopt;
    Probe out;
    out.exec = ExecFrom(p->exec());
    out.http_get = HttpGetFrom(p->http_get());
    if (const auto* t = p->tcp_socket())
      out.tcp_socket = TcpSocketAction{S(t->host()), Port(t->port())};
    if (const auto* g = p->grpc()) out.grpc = GrpcAction{g->port(), S(g->service())};
    out.initial_delay_seconds = p->initial_delay_seconds();
    out.period_seconds = p->period_seconds();
    out.timeout_seconds = p->timeout_seconds();
    out.success_threshold = p->success_threshold();
    out.failure_threshold = p->failure_threshold();
    return out;
  }

  Container ContainerFrom(const fb::Container* c) {
    Container out;
    out.name = S(c->name());
    out.image = S(c->image());
    out.image_pull_policy = S(c->image_pull_policy());
    out.command = SList(c->command());
    out.args = SList(c->args());
    out.working_dir = S(c->working_dir());
    std::string what = "container " + out.name;
    if (c->env()) {
      for (const auto* e : *c->env()) {
        EnvVar var{S(e->name()), S(e->value()), std::nullopt};
        if (const auto* v = e->value_from()) {
          var.value_from = EnvVarSource{
              FieldRefFrom(v->field_ref()), ResourceRefFrom(v->resource_field_ref(), what + " env"),
              KeyRefFrom(v->config_map_key_ref()), KeyRefFrom(v->secret_key_ref())};
        }
        out.env.push_back(std::move(var));
      }
    }
    if (c->env_from()) {
      for (const auto* e : *c->env_from()) {
        out.env_from.push_back(EnvFromSource{S(e->prefix()), EnvFromRefFrom(e->config_map_ref()),
                                             EnvFromRefFrom(e->secret_ref())});
      }
    }
    if (const auto* l = c->lifecycle()) {
      out.lifecycle = Lifecycle{HandlerFrom(l->post_start()), HandlerFrom(l->pre_stop())};
    }
    out.termination_message_policy = S(c->termination_message_policy());
    out.stdin = c->stdin();
    out.stdin_once = c->stdin_once();
    out.tty = c->tty();
    if (c->ports()) {
      for (const auto* p : *c->ports()) {
        out.ports.push_back(
            {S(p->name()), p->container_port(), S(p->protocol()), p->host_port(), S(p->host_ip())});
      }
    }
    if (const auto* r = c->resources()) {
      out.resources.requests = Resources(r->requests(), what + " resources.requests");
      out.resources.limits = Resources(r->limits(), what + " resources.limits");
    }
    if (c->volume_mounts()) {
      for (const auto* m : *c->volume_mounts()) {
        out.volume_mounts.push_back(
            {S(m->name()), S(m->mount_path()), m->read_only(), S(m->sub_path())});
      }
    }
    out.liveness_probe = ProbeFrom(c->liveness_probe());
    out.readiness_probe = ProbeFrom(c->readiness_probe());
    out.startup_probe = ProbeFrom(c->startup_probe());
    if (const auto* s = c->security_context()) {
      SecurityContext sc;
      sc.run_as_user = O(s->run_as_user());
      sc.run_as_group = O(s->run_as_group());
      sc.run_as_non_root = O(s->run_as_non_root());
      sc.privileged = O(s->privileged());
      sc.read_only_root_filesystem = O(s->read_only_root_filesystem());
      sc.allow_privilege_escalation = O(s->allow_privilege_escalation());
      if (const auto* caps = s->capabilities()) {
        sc.capabilities = Capabilities{SList(caps->add()), SList(caps->drop())};
      }
      sc.seccomp_profile = ProfileFrom(s->seccomp_profile());
      sc.app_armor_profile = ProfileFrom(s->app_armor_profile());
      sc.proc_mount = S(s->proc_mount());
      out.security_context = sc;
    }
    out.termination_message_path = S(c->termination_message_path());
    return out;
  }

  static std::vector<KeyToPath> Items(const flatbuffers::Vector<Offset<fb::KeyToPath>>* v) {
    std::vector<KeyToPath> out;
    if (!v) return out;
    for (const auto* k : *v) out.push_back({S(k->key()), S(k->path()), O(k->mode())});
    return out;
  }

  Volume VolumeFrom(const fb::Volume* v) {
    Volume out;
    out.name = S(v->name());
    std::string what = "volume " + out.name;
    if (const auto* e = v->empty_dir()) {
      out.empty_dir =
          EmptyDirVolumeSource{S(e->medium()), OptQty(e->size_limit(), what + " sizeLimit")};
    }
    if (const auto* h = v->host_path())
      out.host_path = HostPathVolumeSource{S(h->path()), S(h->type())};
    if (const auto* c = v->config_map()) {
      out.config_map = ConfigMapVolumeSource{S(c->name()), Items(c->items()), O(c->default_mode()),
                                             O(c->optional())};
    }
    if (const auto* s = v->secret()) {
      out.secret = SecretVolumeSource{S(s->secret_name()), Items(s->items()), O(s->default_mode()),
                                      O(s->optional())};
    }
    if (const auto* d = v->downward_api()) {
      DownwardApiVolumeSource src;
      src.default_mode = O(d->default_mode());
      if (d->items()) {
        for (const auto* f : *d->items()) {
          DownwardApiVolumeFile file;
          file.path = S(f->path());
          file.field_ref = FieldRefFrom(f->field_ref());
          file.resource_field_ref = ResourceRefFrom(f->resource_field_ref(), what);
          file.mode = O(f->mode());
          src.items.push_back(std::move(file));
        }
      }
      out.downward_api = std::move(src);
    }
    return out;
  }
};

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

Result<Pod> PodFromFlatBuffer(const fb::Pod* p) {
  if (p == nullptr) return InvalidArgument("no pod");
  const fb::ObjectMeta* m = p->metadata();
  const fb::PodSpec* s = p->spec();
  if (m == nullptr) return InvalidArgument("pod has no metadata");
  if (s == nullptr) return InvalidArgument("pod has no spec");
  Pod pod;
  pod.metadata.name = S(m->name());
  pod.metadata.namespace_name = S(m->namespace_name());
  pod.metadata.uid = S(m->uid());
  if (m->labels()) {
    for (const auto* e : *m->labels()) pod.metadata.labels[S(e->key())] = S(e->value());
  }
  if (m->annotations()) {
    for (const auto* e : *m->annotations()) pod.metadata.annotations[S(e->key())] = S(e->value());
  }
  pod.metadata.creation_timestamp = O(m->creation_timestamp());
  pod.metadata.deletion_timestamp = O(m->deletion_timestamp());
  pod.metadata.deletion_grace_period_seconds = O(m->deletion_grace_period_seconds());
  Decoder d;
  if (s->init_containers()) {
    for (const auto* c : *s->init_containers())
      pod.spec.init_containers.push_back(d.ContainerFrom(c));
  }
  if (s->containers()) {
    for (const auto* c : *s->containers()) pod.spec.containers.push_back(d.ContainerFrom(c));
  }
  if (s->volumes()) {
    for (const auto* v : *s->volumes()) pod.spec.volumes.push_back(d.VolumeFrom(v));
  }
  pod.spec.restart_policy = S(s->restart_policy());
  pod.spec.termination_grace_period_seconds = O(s->termination_grace_period_seconds());
  pod.spec.active_deadline_seconds = O(s->active_deadline_seconds());
  pod.spec.host_network = s->host_network();
  pod.spec.node_name = S(s->node_name());
  pod.spec.runtime_class_name = S(s->runtime_class_name());
  pod.spec.service_account_name = S(s->service_account_name());
  pod.spec.host_pid = s->host_pid();
  pod.spec.host_ipc = s->host_ipc();
  pod.spec.share_process_namespace = O(s->share_process_namespace());
  if (const auto* sc = s->security_context()) {
    PodSecurityContext out;
    out.run_as_user = O(sc->run_as_user());
    out.run_as_group = O(sc->run_as_group());
    out.run_as_non_root = O(sc->run_as_non_root());
    out.fs_group = O(sc->fs_group());
    out.fs_group_change_policy = S(sc->fs_group_change_policy());
    if (sc->supplemental_groups()) {
      out.supplemental_groups.assign(sc->supplemental_groups()->begin(),
                                     sc->supplemental_groups()->end());
    }
    if (sc->sysctls()) {
      for (const auto* y : *sc->sysctls()) out.sysctls.push_back({S(y->name()), S(y->value())});
    }
    out.seccomp_profile = ProfileFrom(sc->seccomp_profile());
    out.app_armor_profile = ProfileFrom(sc->app_armor_profile());
    pod.spec.security_context = std::move(out);
  }
  pod.spec.hostname = S(s->hostname());
  pod.spec.subdomain = S(s->subdomain());
  pod.spec.set_hostname_as_fqdn = O(s->set_hostname_as_fqdn());
  pod.spec.priority_class_name = S(s->priority_class_name());
  if (s->image_pull_secrets()) {
    for (const auto* name : *s->image_pull_secrets())
      pod.spec.image_pull_secrets.push_back(S(name));
  }
  if (s->host_aliases()) {
    for (const auto* a : *s->host_aliases()) {
      HostAlias alias{S(a->ip()), {}};
      if (a->hostnames()) {
        for (const auto* h : *a->hostnames()) alias.hostnames.push_back(S(h));
      }
      pod.spec.host_aliases.push_back(std::move(alias));
    }
  }
  pod.spec.dns_policy = S(s->dns_policy());
  if (const auto* dc = s->dns_config()) {
    PodDnsConfig out;
    if (dc->nameservers()) {
      for (const auto* n : *dc->nameservers()) out.nameservers.push_back(S(n));
    }
    if (dc->searches()) {
      for (const auto* n : *dc->searches()) out.searches.push_back(S(n));
    }
    if (dc->options()) {
      for (const auto* o : *dc->options()) {
        PodDnsConfigOption option{S(o->name()), std::nullopt};
        if (o->value()) option.value = S(o->value());
        out.options.push_back(std::move(option));
      }
    }
    pod.spec.dns_config = std::move(out);
  }
  if (!d.status.ok()) return InvalidArgument("pod " + pod.FullName() + ": " + d.status.message());
  return pod;
}

std::vector<uint8_t> EncodePod(const Pod& pod) {
  FlatBufferBuilder b;
  b.Finish(PodToFlatBuffer(b, pod), fb::PodIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

Result<Pod> DecodePod(const void* data, size_t size, size_t max_bytes) {
  if (data == nullptr || size == 0) return InvalidArgument("empty pod buffer");
  if (size > max_bytes) {
    return ResourceExhausted("pod buffer of " + std::to_string(size) +
                             " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  if (size < sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength) {
    return InvalidArgument("pod buffer of " + std::to_string(size) + " bytes is too short");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (!flatbuffers::BufferHasIdentifier(bytes, fb::PodIdentifier())) {
    return InvalidArgument("wrong pod buffer identifier (want 'NLPD')");
  }
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/32, /*max_tables=*/100000);
  if (!fb::VerifyPodBuffer(verifier)) return InvalidArgument("pod buffer failed verification");
  return PodFromFlatBuffer(fb::GetPod(bytes));
}

}  // namespace nodelet::pod

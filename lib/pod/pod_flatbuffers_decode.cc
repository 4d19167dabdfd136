// FlatBuffers -> Pod (pod_flatbuffers.h): DecodePod checks a standalone buffer (size, identifier,
// verifier) and PodFromFlatBuffer reads the table back into the model, failing on a missing
// metadata or spec or a quantity that does not parse.
#include <optional>
#include <string>

#include "lib/pod/pod_flatbuffers.h"

namespace nodelet::pod {
namespace fb = ipc::pod;
using flatbuffers::Offset;

namespace {

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
#include "lib/pod/canonical.h"

namespace nodelet::pod {
namespace {

// Wire format: each present field is varint(tag) followed by its value:
//   string / quantity: varint(length) + bytes (a quantity is its exact value in nano-units,
//                      as a decimal string, so "1000m" and "1" encode alike);
//   integer:           varint(zigzag(value));
//   bool:              one byte, 1 false / 2 true;
//   message:           varint(length) + the message's own encoding.
// Plain fields are omitted at their zero value ("", 0, false, empty list); std::optional fields
// are omitted when unset and written (even as 0/false/empty) when set; list elements and map
// entries are always written, in order (maps are sorted by key).
class Writer {
 public:
  const std::string& data() const { return out_; }

  void Str(uint32_t tag, std::string_view s) {
    if (s.empty()) return;
    Varint(tag);
    Bytes(s);
  }
  void Int(uint32_t tag, int64_t v) {
    if (v == 0) return;
    Varint(tag);
    Varint(ZigZag(v));
  }
  void Bool(uint32_t tag, bool v) {
    if (!v) return;
    Varint(tag);
    out_.push_back(2);
  }
  template <typename T>
  void OptInt(uint32_t tag, const std::optional<T>& v) {
    if (!v) return;
    Varint(tag);
    Varint(ZigZag(static_cast<int64_t>(*v)));
  }
  void OptBool(uint32_t tag, const std::optional<bool>& v) {
    if (!v) return;
    Varint(tag);
    out_.push_back(*v ? 2 : 1);
  }
  void Qty(uint32_t tag, const Quantity& q) {
    Varint(tag);
    Bytes(q.NanosString());
  }
  void OptQty(uint32_t tag, const std::optional<Quantity>& q) {
    if (q) Qty(tag, *q);
  }
  // Always written (list elements, set optionals).
  void Message(uint32_t tag, const Writer& sub) {
    Varint(tag);
    Bytes(sub.out_);
  }
  void StrList(uint32_t tag, const std::vector<std::string>& list) {
    for (const auto& s : list) {
      Varint(tag);
      Bytes(s);
    }
  }

 private:
  static uint64_t ZigZag(int64_t v) {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  }
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Bytes(std::string_view s) {
    Varint(s.size());
    out_.append(s);
  }

  std::string out_;
};

template <typename T, typename F>
void Each(Writer& w, uint32_t tag, const std::vector<T>& list, F encode) {
  for (const T& item : list) {
    Writer sub;
    encode(sub, item);
    w.Message(tag, sub);
  }
}

template <typename T, typename F>
void Opt(Writer& w, uint32_t tag, const std::optional<T>& v, F encode) {
  if (!v) return;
  Writer sub;
  encode(sub, *v);
  w.Message(tag, sub);
}

void StringMap(Writer& w, uint32_t tag, const std::map<std::string, std::string>& m) {
  for (const auto& [k, v] : m) {
    Writer sub;
    sub.Str(1, k);
    sub.Str(2, v);
    w.Message(tag, sub);
  }
}

void Resources(Writer& w, uint32_t tag, const ResourceList& list) {
  for (const auto& [name, q] : list) {
    Writer sub;
    sub.Str(1, name);
    sub.Qty(2, q);
    w.Message(tag, sub);
  }
}

void Port(Writer& w, const IntOrString& p) {
  if (p.is_string) {
    w.Str(2, p.str_value);
  } else {
    w.Int(1, p.int_value);
  }
}

void ExecFields(Writer& s, const ExecAction& e) { s.StrList(1, e.command); }

void HttpGetFields(Writer& s, const HttpGetAction& h) {
  s.Str(1, h.host);
  Writer port;
  Port(port, h.port);
  s.Message(2, port);
  s.Str(3, h.path);
  s.Str(4, h.scheme);
  Each(s, 5, h.http_headers, [](Writer& hs, const HttpHeader& hh) {
    hs.Str(1, hh.name);
    hs.Str(2, hh.value);
  });
}

void FieldRefFields(Writer& r, const ObjectFieldSelector& o) {
  r.Str(1, o.api_version);
  r.Str(2, o.field_path);
}

void ResourceRefFields(Writer& r, const ResourceFieldSelector& o) {
  r.Str(1, o.container_name);
  r.Str(2, o.resource);
  r.OptQty(3, o.divisor);
}

void KeyRefFields(Writer& r, const KeySelector& k) {
  r.Str(1, k.name);
  r.Str(2, k.key);
  r.OptBool(3, k.optional);
}

void EnvFromRefFields(Writer& r, const EnvFromRef& e) {
  r.Str(1, e.name);
  r.OptBool(2, e.optional);
}

void HandlerFields(Writer& w, const LifecycleHandler& h) {
  Opt(w, 1, h.exec, ExecFields);
  Opt(w, 2, h.http_get, HttpGetFields);
  Opt(w, 3, h.sleep, [](Writer& s, const SleepAction& a) { s.Int(1, a.seconds); });
}

void ProfileFields(Writer& w, const SecurityProfile& p) {
  w.Str(1, p.type);
  w.Str(2, p.localhost_profile);
}

void ProbeFields(Writer& w, const Probe& p) {
  Opt(w, 1, p.exec, ExecFields);
  Opt(w, 2, p.http_get, HttpGetFields);
  Opt(w, 3, p.tcp_socket, [](Writer& s, const TcpSocketAction& t) {
    s.Str(1, t.host);
    Writer port;
    Port(port, t.port);
    s.Message(2, port);
  });
  w.Int(4, p.initial_delay_seconds);
  w.Int(5, p.period_seconds);
  w.Int(6, p.timeout_seconds);
  w.Int(7, p.success_threshold);
  w.Int(8, p.failure_threshold);
  Opt(w, 9, p.grpc, [](Writer& s, const GrpcAction& g) {
    s.Int(1, g.port);
    s.Str(2, g.service);
  });
}

// Tags 1..11 and 16..21: the container spec hash's fields (a field left unset writes nothing, so
// fields added later do not change the hash of containers that do not use them).
void ContainerSpecFields(Writer& w, const Container& c) {
  w.Str(1, c.name);
  w.Str(2, c.image);
  w.StrList(3, c.command);
  w.StrList(4, c.args);
  w.Str(5, c.working_dir);
  Each(w, 6, c.env, [](Writer& s, const EnvVar& e) {
    s.Str(1, e.name);
    s.Str(2, e.value);
    Opt(s, 3, e.value_from, [](Writer& v, const EnvVarSource& src) {
      Opt(v, 1, src.field_ref, FieldRefFields);
      Opt(v, 2, src.resource_field_ref, ResourceRefFields);
      Opt(v, 3, src.config_map_key_ref, KeyRefFields);
      Opt(v, 4, src.secret_key_ref, KeyRefFields);
    });
  });
  Each(w, 7, c.ports, [](Writer& s, const ContainerPort& p) {
    s.Str(1, p.name);
    s.Int(2, p.container_port);
    s.Str(3, p.protocol);
    s.Int(4, p.host_port);
    s.Str(5, p.host_ip);
  });
  if (!c.resources.requests.empty() || !c.resources.limits.empty()) {
    Writer r;
    Resources(r, 1, c.resources.requests);
    Resources(r, 2, c.resources.limits);
    w.Message(8, r);
  }
  Each(w, 9, c.volume_mounts, [](Writer& s, const VolumeMount& m) {
    s.Str(1, m.name);
    s.Str(2, m.mount_path);
    s.Bool(3, m.read_only);
    s.Str(4, m.sub_path);
  });
  Opt(w, 10, c.security_context, [](Writer& s, const SecurityContext& sc) {
    s.OptInt(1, sc.run_as_user);
    s.OptInt(2, sc.run_as_group);
    s.OptBool(3, sc.run_as_non_root);
    s.OptBool(4, sc.privileged);
    s.OptBool(5, sc.read_only_root_filesystem);
    s.OptBool(6, sc.allow_privilege_escalation);
    Opt(s, 7, sc.capabilities, [](Writer& c, const Capabilities& caps) {
      c.StrList(1, caps.add);
      c.StrList(2, caps.drop);
    });
    Opt(s, 8, sc.seccomp_profile, ProfileFields);
    Opt(s, 9, sc.app_armor_profile, ProfileFields);
    s.Str(10, sc.proc_mount);
  });
  w.Str(11, c.termination_message_path);
  // 12..15 are ContainerAll's.
  Each(w, 16, c.env_from, [](Writer& s, const EnvFromSource& e) {
    s.Str(1, e.prefix);
    Opt(s, 2, e.config_map_ref, EnvFromRefFields);
    Opt(s, 3, e.secret_ref, EnvFromRefFields);
  });
  Opt(w, 17, c.lifecycle, [](Writer& s, const Lifecycle& l) {
    Opt(s, 1, l.post_start, HandlerFields);
    Opt(s, 2, l.pre_stop, HandlerFields);
  });
  // The default is left out, so defaulting it did not change existing containers' hashes.
  if (c.termination_message_policy != kTerminationMessageReadFile) {
    w.Str(18, c.termination_message_policy);
  }
  // Left out when false, as above.
  if (c.stdin) w.Bool(19, true);
  if (c.stdin_once) w.Bool(20, true);
  if (c.tty) w.Bool(21, true);
}

// Tags 1..11 and 16..21 as above, then 12..15.
void ContainerAll(Writer& w, const Container& c) {
  ContainerSpecFields(w, c);
  w.Str(12, c.image_pull_policy);
  Opt(w, 13, c.liveness_probe, ProbeFields);
  Opt(w, 14, c.readiness_probe, ProbeFields);
  Opt(w, 15, c.startup_probe, ProbeFields);
}

void KeyToPaths(Writer& w, uint32_t tag, const std::vector<KeyToPath>& items) {
  Each(w, tag, items, [](Writer& s, const KeyToPath& k) {
    s.Str(1, k.key);
    s.Str(2, k.path);
    s.OptInt(3, k.mode);
  });
}

void VolumeFields(Writer& w, const Volume& v) {
  w.Str(1, v.name);
  Opt(w, 2, v.empty_dir, [](Writer& s, const EmptyDirVolumeSource& e) {
    s.Str(1, e.medium);
    s.OptQty(2, e.size_limit);
  });
  Opt(w, 3, v.host_path, [](Writer& s, const HostPathVolumeSource& h) {
    s.Str(1, h.path);
    s.Str(2, h.type);
  });
  Opt(w, 4, v.config_map, [](Writer& s, const ConfigMapVolumeSource& c) {
    s.Str(1, c.name);
    KeyToPaths(s, 2, c.items);
    s.OptInt(3, c.default_mode);
    s.OptBool(4, c.optional);
  });
  Opt(w, 5, v.secret, [](Writer& s, const SecretVolumeSource& c) {
    s.Str(1, c.secret_name);
    KeyToPaths(s, 2, c.items);
    s.OptInt(3, c.default_mode);
    s.OptBool(4, c.optional);
  });
  Opt(w, 6, v.downward_api, [](Writer& s, const DownwardApiVolumeSource& d) {
    Each(s, 1, d.items, [](Writer& f, const DownwardApiVolumeFile& file) {
      f.Str(1, file.path);
      Opt(f, 2, file.field_ref, FieldRefFields);
      Opt(f, 3, file.resource_field_ref, ResourceRefFields);
      f.OptInt(4, file.mode);
    });
    s.OptInt(2, d.default_mode);
  });
}

}  // namespace

std::string CanonicalContainerSpec(const Container& container) {
  Writer w;
  ContainerSpecFields(w, container);
  return w.data();
}

uint64_t ContainerSpecHash(const Container& container) {
  return Fnv1a64("nodelet.container-spec.v1\n" + CanonicalContainerSpec(container));
}

std::string ContainerSpecHashHex(const Container& container) {
  static const char kHex[] = "0123456789abcdef";
  uint64_t h = ContainerSpecHash(container);
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = kHex[h & 15];
  return out;
}

std::string CanonicalPod(const Pod& pod) {
  Writer meta;
  const ObjectMeta& m = pod.metadata;
  meta.Str(1, m.name);
  meta.Str(2, m.namespace_name);
  meta.Str(3, m.uid);
  StringMap(meta, 4, m.labels);
  StringMap(meta, 5, m.annotations);
  meta.OptInt(6, m.creation_timestamp);
  meta.OptInt(7, m.deletion_timestamp);
  meta.OptInt(8, m.deletion_grace_period_seconds);

  Writer spec;
  const PodSpec& s = pod.spec;
  Each(spec, 1, s.init_containers, ContainerAll);
  Each(spec, 2, s.containers, ContainerAll);
  Each(spec, 3, s.volumes, VolumeFields);
  spec.Str(4, s.restart_policy);
  spec.OptInt(5, s.termination_grace_period_seconds);
  spec.OptInt(6, s.active_deadline_seconds);
  spec.Bool(7, s.host_network);
  spec.Str(8, s.node_name);
  spec.Str(9, s.runtime_class_name);
  spec.Str(10, s.service_account_name);
  spec.Bool(11, s.host_pid);
  spec.Bool(12, s.host_ipc);
  spec.OptBool(13, s.share_process_namespace);
  Opt(spec, 14, s.security_context, [](Writer& w, const PodSecurityContext& sc) {
    w.OptInt(1, sc.run_as_user);
    w.OptInt(2, sc.run_as_group);
    w.OptBool(3, sc.run_as_non_root);
    w.OptInt(4, sc.fs_group);
    w.Str(5, sc.fs_group_change_policy);
    // As strings: a group 0 would vanish as an Int.
    Each(w, 6, sc.supplemental_groups, [](Writer& y, int64_t g) { y.Str(1, std::to_string(g)); });
    Each(w, 7, sc.sysctls, [](Writer& y, const Sysctl& sysctl) {
      y.Str(1, sysctl.name);
      y.Str(2, sysctl.value);
    });
    Opt(w, 8, sc.seccomp_profile, ProfileFields);
    Opt(w, 9, sc.app_armor_profile, ProfileFields);
  });
  spec.Str(15, s.hostname);
  spec.Str(16, s.subdomain);
  spec.OptBool(17, s.set_hostname_as_fqdn);
  Each(spec, 18, s.host_aliases, [](Writer& w, const HostAlias& a) {
    w.Str(1, a.ip);
    w.StrList(2, a.hostnames);
  });
  // The default is left out, so a manifest that wrote it (accepted and ignored before nodelet
  // honoured the field) keeps its static pod UID.
  if (s.dns_policy != kDnsClusterFirst) spec.Str(19, s.dns_policy);
  Opt(spec, 20, s.dns_config, [](Writer& w, const PodDnsConfig& d) {
    w.StrList(1, d.nameservers);
    w.StrList(2, d.searches);
    Each(w, 3, d.options, [](Writer& o, const PodDnsConfigOption& option) {
      o.Str(1, option.name);
      // A set value is written even when empty: "ndots:" and "ndots" differ.
      if (option.value) {
        Writer v;
        v.Str(1, *option.value);
        o.Message(2, v);
      }
    });
  });

  spec.Str(21, s.priority_class_name);
  spec.StrList(22, s.image_pull_secrets);
  Writer w;
  w.Message(1, meta);
  w.Message(2, spec);
  return w.data();
}

uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

unsigned __int128 Fnv1a128(std::string_view data) {
  const unsigned __int128 kPrime = (static_cast<unsigned __int128>(1) << 88) + 0x13b;
  unsigned __int128 h =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= kPrime;
  }
  return h;
}

std::string Hex128(unsigned __int128 v) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 31; i >= 0; --i, v >>= 4) out[i] = kHex[static_cast<int>(v & 15)];
  return out;
}

}  // namespace nodelet::pod

// PodValidator, the class behind ValidatePod (validation.h), shared by the files that define its
// checks by area: validation.cc (metadata, the pod spec, DNS), validation_containers.cc
// (containers, ports, env, resources, mounts, probes and hooks), validation_volumes.cc (volumes,
// their items and paths, downward API selectors) and validation_security.cc (security contexts,
// profiles, sysctls, AppArmor annotations). Not part of lib/pod's API: validation.h is.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lib/pod/field_error.h"
#include "lib/pod/pod.h"

namespace nodelet::pod::validation_internal {

inline constexpr char kNonNegative[] = "must be greater than or equal to 0";

// Collects every problem of one pod into `errors`, in field order.
class PodValidator {
 public:
  explicit PodValidator(FieldErrors& errors) : errors_(errors) {}

  void Run(const Pod& pod);

 private:
  // validation.cc
  void Invalid(std::string path, std::string_view value, const std::vector<std::string>& msgs);
  void NonNegative(const std::string& path, int64_t v);
  void Meta(const ObjectMeta& m);
  void Spec(const PodSpec& s);
  void Dns(const PodSpec& s);
  static std::string Join(const std::vector<std::string>& list);

  // validation_containers.cc
  void ContainerFields(const Container& c, const std::string& path, std::set<std::string>& names,
                       const std::set<std::string>& volumes, bool host_network, bool init);
  void Ports(const Container& c, const std::string& path, bool host_network);
  void HostPorts(const std::vector<Container>& containers);
  void ResourceName(const std::string& path, const std::string& name);
  void Resources(const ResourceRequirements& r, const std::string& path);
  void Mounts(const Container& c, const std::string& path, const std::set<std::string>& volumes);
  void Env(const EnvVar& e, const std::string& path);
  void EnvFrom(const EnvFromSource& e, const std::string& path);
  void PortRef(const IntOrString& port, const std::string& path);
  void OneHandler(int& handlers, const std::string& p);
  void ExecAndHttpGet(const std::optional<ExecAction>& exec,
                      const std::optional<HttpGetAction>& http_get, const std::string& path,
                      int& handlers);
  void Handler(const LifecycleHandler& h, const std::string& path);
  void ProbeFields(const Probe& probe, const std::string& path, bool success_must_be_one);

  // validation_volumes.cc
  void VolumeFields(const Volume& v, const std::string& path, std::set<std::string>& names);
  void Items(const std::vector<KeyToPath>& items, const std::string& path);
  void Mode(const std::string& path, const std::optional<int32_t>& mode);
  void RelativePath(const std::string& path, const std::string& value, bool required);
  static bool HasDotDot(std::string_view p);
  void FieldPathRef(const ObjectFieldSelector& ref, const std::string& path, bool env = false);
  void ResourceRef(const ResourceFieldSelector& ref, const std::string& path, bool env = false);

  // validation_security.cc
  void Security(const SecurityContext& sc, const std::string& path);
  void Profile(const SecurityProfile& p, const std::string& path, bool seccomp);
  void PodSecurity(const PodSpec& s);
  static bool IsSysctlName(std::string_view name);
  void AppArmorAnnotations(const Pod& pod);

  FieldErrors& errors_;
  std::optional<int64_t> grace_period_;
};

}  // namespace nodelet::pod::validation_internal

// A container's environment, command and args as the kubelet makes them at creation
// (kuberuntime's makeEnvironmentVariables and ExpandContainerCommandAndArgs):
//   1. envFrom, in order: every key of the ConfigMap or Secret, with the prefix; keys that are
//      not valid variable names are skipped and reported (InvalidEnvironmentVariableNames);
//   2. env, in order: `value` with its $(VAR) references expanded against the variables
//      defined so far, or `valueFrom` (fieldRef, resourceFieldRef, configMapKeyRef,
//      secretKeyRef) as is; a later definition replaces an earlier one;
//   3. command and args, $(VAR) expanded against the final environment.
// A missing ConfigMap, Secret or key that is not optional is an error (the container waits in
// CreateContainerConfigError, as with the kubelet).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/downward_api.h"
#include "lib/pod/pod.h"

namespace nodelet::podworkerd {

// What the references read, besides the pod itself.
struct EnvSources {
  pod::ConfigObjectMap config_maps;  // "namespace/name"
  pod::ConfigObjectMap secrets;
  pod::PodRuntimeFields runtime;  // status.podIP, status.hostIP
  pod::NodeAllocatable node;      // a missing limit in resourceFieldRef
};

struct ContainerEnvironment {
  std::vector<std::pair<std::string, std::string>> env;  // in first-definition order
  std::vector<std::string> command;
  std::vector<std::string> args;
  // Warnings for an event (envFrom keys skipped as invalid names).
  std::vector<std::string> warnings;
};

Result<ContainerEnvironment> MakeContainerEnvironment(const pod::Pod& pod,
                                                      const pod::Container& container,
                                                      const EnvSources& sources);

}  // namespace nodelet::podworkerd

// A pod's imagePullSecrets, read as the kubelet reads them (its getPullSecretsForPod and
// credentialprovider/secrets): each named Secret of the pod's namespace that the sources hold,
// of type kubernetes.io/dockerconfigjson (key .dockerconfigjson, a docker config.json) or
// kubernetes.io/dockercfg (key .dockercfg, the older form: the "auths" map alone), adds its
// entries to one keyring; a Secret of another type adds nothing. An empty name is skipped (the
// API allows it); a name no source holds is reported (the kubelet's
// FailedToRetrieveImagePullSecret event) and the pull goes on without it. A Secret whose
// credentials do not parse fails the pull with the reason, as the kubelet's MakeDockerKeyring
// does. The image's matching entries come before the node's (image_puller.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"
#include "lib/pod/config_objects.h"
#include "lib/pod/pod.h"
#include "svc-podworkerd/registry_credentials.h"

namespace nodelet::podworkerd {

struct PodPullCredentials {
  std::vector<RegistryCredential> credentials;  // for the image, most specific first
  std::vector<std::string> missing;             // names of Secrets no source holds
  Status error;                                 // a Secret whose credentials do not parse
};

PodPullCredentials PullCredentialsFor(const pod::Pod& pod, const pod::ConfigObjectMap& secrets,
                                      std::string_view image);

// The kubelet's event message for `missing` ("Unable to retrieve some image pull secrets (a,
// b); attempting to pull the image may not succeed.").
std::string MissingPullSecretsMessage(const std::vector<std::string>& missing);

}  // namespace nodelet::podworkerd

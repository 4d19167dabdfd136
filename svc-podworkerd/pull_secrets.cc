#include "svc-podworkerd/pull_secrets.h"

namespace nodelet::podworkerd {

PodPullCredentials PullCredentialsFor(const pod::Pod& pod, const pod::ConfigObjectMap& secrets,
                                      std::string_view image) {
  PodPullCredentials out;
  const std::string ns =
      pod.metadata.namespace_name.empty() ? pod::kDefaultNamespace : pod.metadata.namespace_name;
  DockerKeyring keyring;
  for (const std::string& name : pod.spec.image_pull_secrets) {
    if (name.empty()) continue;
    auto it = secrets.find(ns + "/" + name);
    if (it == secrets.end()) {
      out.missing.push_back(name);
      continue;
    }
    const pod::ConfigObject& secret = it->second;
    const std::string origin = "imagePullSecrets: secret " + ns + "/" + name;
    Result<DockerKeyring> parsed = DockerKeyring{};
    if (secret.type == "kubernetes.io/dockerconfigjson") {
      auto data = secret.data.find(".dockerconfigjson");
      if (data == secret.data.end() || data->second.empty()) continue;
      parsed = DockerKeyring::Parse(data->second, origin + " .dockerconfigjson");
    } else if (secret.type == "kubernetes.io/dockercfg") {
      auto data = secret.data.find(".dockercfg");
      if (data == secret.data.end() || data->second.empty()) continue;
      parsed = DockerKeyring::ParseDockercfg(data->second, origin + " .dockercfg");
    } else {
      continue;
    }
    if (!parsed.ok()) {
      out.error = parsed.status();
      return out;
    }
    keyring.Add(*parsed);
  }
  out.credentials = keyring.Lookup(image);
  return out;
}

std::string MissingPullSecretsMessage(const std::vector<std::string>& missing) {
  std::string names;
  for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
  return "Unable to retrieve some image pull secrets (" + names +
         "); attempting to pull the image may not succeed.";
}

}  // namespace nodelet::podworkerd

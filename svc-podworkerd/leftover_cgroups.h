// Leftover container cgroups: when a StartContainer is cancelled after runc created the
// container's cgroups but before it wrote its init pid (podworkerd SIGKILLed mid-call, or a
// runtime restart), the shim's cleanup (`runc delete`) cannot find the container's state and
// leaves its cgroup directories behind in every hierarchy, empty, after CRI has removed the
// container (the chaos soak's "cgroup left: .../k8s.io/<id>"). CRI has no call that reaches them.
// The kubelet removes whatever is left in a pod's cgroup when it destroys the pod cgroup; nodelet
// does the same for each container it removes: the cgroup path is read from the runtime's verbose
// status before the removal (the OCI spec's linux.cgroupsPath), and afterwards every hierarchy's
// directory of that path that is still there is removed with rmdir, which only ever removes an
// empty cgroup (no processes, no children). Nothing else is touched.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nodelet::podworkerd {

// linux.cgroupsPath of the OCI runtime spec in a CRI verbose status's "info" JSON (containerd's
// `{"runtimeSpec": {"linux": {"cgroupsPath": "/k8s.io/ID"}}}`), when it is an absolute cgroupfs
// path of plain components ([A-Za-z0-9._-], no "." or ".."); nullopt otherwise (a systemd-driver
// "slice:prefix:name" path, garbage, nothing).
std::optional<std::string> CgroupsPathFromInfo(const std::string& info_json);

// "/NS/ID": where containerd's CRI plugin (cgroupfs driver, no cgroup parent) puts the cgroup of
// task ID of namespace NS; nullopt unless both are plain components as above.
std::optional<std::string> NamespaceCgroupPath(const std::string& ns, const std::string& id);

// The directories under which a cgroupfs path may exist: `cgroup_root` itself (a pure v2 host)
// and every directory in it (each v1 controller mount, the hybrid "unified" one); comounted
// aliases (symlinks such as cpu -> cpu,cpuacct) are left out.
std::vector<std::string> CgroupHierarchies(const std::string& cgroup_root = "/sys/fs/cgroup");

// Removes `path` (as returned above) in every cgroup hierarchy under `cgroup_root` (each v1
// controller directory, the v2 "unified" directory, and `cgroup_root` itself for a pure v2
// host) with rmdir. Returns how many directories were removed; busy or missing ones are skipped.
int RemoveLeftoverCgroups(const std::vector<std::string>& paths,
                          const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace nodelet::podworkerd

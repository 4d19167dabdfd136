# Helpers of the VM scenarios (tests/vm/scenario-*), sourced inside the VM. Every line for the
# host starts with "vm-test: "; a scenario ends with `finish`, which prints the result line
# vm-test waits for.
failures=0
say() { printf 'vm-test: %s\n' "$*"; }
pass() { say "PASS $1"; }
fail() { say "FAIL $1: $2"; failures=$((failures + 1)); }
finish() {
  if [ "$failures" -eq 0 ]; then say "result PASS"; else say "$failures checks failed"; say "result FAIL"; fi
  sync
}

# until_ok SECONDS COMMAND...: runs COMMAND every 200 ms until it succeeds or SECONDS pass (the
# state checked here, a pod's phase or a unit's, has no event a shell can wait on).
until_ok() {
  local deadline=$((SECONDS + $1))
  shift
  while ! "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
ctl() { timeout 30 nodeletctl "$@"; }

manifests=/etc/nodelet/manifests
node=$(hostname)

# install_deb FILE: dpkg -i; a failure ends the scenario.
install_deb() {
  local out
  if out=$(dpkg -i "$1" 2>&1); then
    pass "dpkg -i $(basename "$1")"
  else
    fail "dpkg -i $(basename "$1")" "$(tail -n 5 <<<"$out" | tr '\n' ';')"
    finish
    exit 0
  fi
}

# setup_containerd DRIVER: Debian's containerd with its default configuration, a local sandbox
# image, SystemdCgroup as the driver needs (systemd: true), and the test images imported.
# Two settings are the emulated host's, not nodelet's: containerd re-attaches to each running
# shim when it starts and gives up on a shim that does not answer within
# io.containerd.timeout.shim.load (5 s by default), ending its task; and
# io.containerd.timeout.task.state (2 s) bounds its query of a task's state, and a sandbox whose
# state CRI cannot read when it starts stays UNKNOWN (NOTREADY, never READY again). Under TCG
# right after a restart both can take longer, so the VM gives them 60 s and 30 s. Neither ended
# the pods replaced at a restart of containerd (docs/install.md): their shims end first.
setup_containerd() {
  local systemd_cgroup=false i
  [ "$1" = systemd ] && systemd_cgroup=true
  containerd config default >/etc/containerd/config.toml
  sed -i -e 's|sandbox_image = .*|sandbox_image = "nodelet.local/pause:1.0"|' \
    -e "s|SystemdCgroup = .*|SystemdCgroup = $systemd_cgroup|" \
    -e 's|"io.containerd.timeout.shim.load" = .*|"io.containerd.timeout.shim.load" = "60s"|' \
    -e 's|"io.containerd.timeout.task.state" = .*|"io.containerd.timeout.task.state" = "30s"|' \
    /etc/containerd/config.toml
  for i in shim.load task.state; do
    grep -q "\"io.containerd.timeout.$i\" = \"[36]0s\"" /etc/containerd/config.toml ||
      say "containerd's default configuration has no io.containerd.timeout.$i to raise"
  done
  systemctl restart containerd
  for i in pause busybox; do
    ctr -n k8s.io images import "/payload/images/$i.tar" >/dev/null 2>&1 ||
      fail "image $i imported" "$(ctr -n k8s.io images import "/payload/images/$i.tar" 2>&1 | tail -n 2)"
  done
}

# write_pod NAME RESOURCES COMMAND [RESTART_POLICY]: a static pod on the host network (no CNI
# in the VM), one busybox container (restartPolicy Always unless given); written as a dot-file
# and renamed, so never read half-written.
write_pod() {
  local name=$1 resources=$2 command=$3 restart=${4:-Always}
  cat >"$manifests/.$name.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  hostNetwork: true
  restartPolicy: $restart
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: $command
    resources: $resources
YAML
  mv "$manifests/.$name.yaml" "$manifests/$name.yaml"
}

# pod_field POD FIELD: a field of `nodeletctl pod POD-NODE` ("UID", "Status", "    Container ID").
pod_field() { ctl pod "$1-$node" 2>/dev/null | sed -n "s/^$2: *//p" | head -n 1; }
# running POD...: every one Running.
running() {
  local p
  for p in "$@"; do [ "$(pod_field "$p" Status)" = Running ] || return 1; done
}
# task_pids: "container-id pid" of every running container, sorted.
task_pids() { ctr -n k8s.io tasks ls 2>/dev/null | awk 'NR > 1 {print $1, $2}' | sort; }

# pod_of_task ID: the pod name (io.kubernetes.pod.name) of a container or sandbox.
pod_of_task() {
  ctr -n k8s.io containers info "$1" 2>/dev/null |
    sed -n 's/.*"io.kubernetes.pod.name": "\([^"]*\)".*/\1/p' | head -n 1
}

# split_shim_pods: the pods with a container that runs in a containerd shim of its own instead of
# its sandbox's. containerd's runc shim puts a pod's container into the sandbox's shim when the
# shim answers a connection to its socket within 100 ms; under emulation that check can time
# out, and the container then gets a new shim that takes the sandbox shim's socket path over.
# The pod runs on, but after a restart containerd reaches the sandbox through that path, finds
# a shim that does not know the sandbox's task, and CRI lists the sandbox NOTREADY: the kubelet,
# and nodelet, replace the pod (docs/install.md). Such a pod cannot keep its containers across a
# restart of containerd, whatever nodelet does.
split_shim_pods() {
  local id
  for id in $(pgrep -a containerd-shim | sed -n 's/.* -id \([0-9a-f]*\).*/\1/p'); do
    ctr -n k8s.io containers info "$id" 2>/dev/null |
      grep -q '"io.cri-containerd.kind": "container"' || continue
    pod_of_task "$id"
  done | sort -u
}

# task_pids_except POD...: task_pids without the tasks of the named pods.
task_pids_except() {
  local id pid pod p keep
  task_pids | while read -r id pid; do
    keep=1
    if [ $# -gt 0 ]; then
      pod=$(pod_of_task "$id")
      for p in "$@"; do [ "$pod" = "$p" ] && keep=0; done
    fi
    [ $keep -eq 0 ] || echo "$id $pid"
  done
}

# before_runtime_restart: before a restart of containerd, names the pods whose containers cannot
# survive it (split_shim_pods) in $unkeepable and says so; the caller compares
# `task_pids_except $unkeepable` before and after.
unkeepable=""
before_runtime_restart() {
  unkeepable=$(split_shim_pods | tr '\n' ' ')
  [ -z "$unkeepable" ] || say "containerd started a container of ${unkeepable% } in a shim of its own (its check of the sandbox's shim timed out): its sandbox cannot be reached after a restart of containerd, so the check below leaves that pod out"
}
# check_files NAME DIR "file=value file=value ...": each file of DIR holds its value.
check_files() {
  local name=$1 dir=$2 kv f v got bad=()
  while IFS= read -r kv; do
    [ -n "$kv" ] || continue
    f=${kv%%=*} v=${kv#*=}
    got=$(cat "$dir/$f" 2>&1)
    [ "$got" = "$v" ] || bad+=("$f is '$got', not '$v'")
  done < <(sed 's/ \([a-z]*\.[a-z]*=\)/\n\1/g' <<<"$3")
  if [ ${#bad[@]} -eq 0 ]; then pass "$name"; else fail "$name" "${bad[*]}"; fi
}
# cgroup_of_container ID: the v2 cgroup of the container's first process.
cgroup_of_container() {
  local pid
  pid=$(ctr -n k8s.io tasks ls 2>/dev/null | awk -v c="$1" '$1 == c {print $2}')
  sed -n 's/^0:://p' "/proc/$pid/cgroup" 2>/dev/null
}
# top_row POD TABLE: "CPU MEMORY" of POD in `nodeletctl top pods`' TABLE. millicores and
# mebibytes: its figures as numbers (-1 for "-" or nothing).
top_row() { awk -v n="$1-$node" '$1 == n {print $2, $3}' <<<"$2"; }
millicores() { case "$1" in *m) echo "${1%m}" ;; -|"") echo -1 ;; *) echo $(($1 * 1000)) ;; esac; }
mebibytes() { case "$1" in *Mi) echo "${1%Mi}" ;; *Gi) echo $((${1%Gi} * 1024)) ;; *) echo -1 ;; esac; }
# http_get PATH: the body and head of GET PATH from the supervisor's HTTP endpoint (bash's
# /dev/tcp: the VM has no HTTP client).
http_get() {
  exec 3<>/dev/tcp/127.0.0.1/10255 || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  timeout 10 cat <&3
  exec 3<&-
}
# service_stat SERVICE NAME: a counter of a service's last heartbeat, from /metrics.
service_stat() {
  http_get /metrics | awk -v k="nodelet_service_stat{service=\"$1\",name=\"$2\"}" '$1 == k {print $2}'
}

#include "ctl/logs_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ctl/ctl_client.h"
#include "lib/ipc/endpoints.h"
#include "lib/ipc/peer_access.h"
#include "lib/logs/cri_log.h"
#include "lib/status/status_client.h"

namespace nodelet::ctl {
namespace {

namespace fs = std::filesystem;
using ipc::ctl::RequestKind;

void PrintError(std::ostream& err, const Status& s) { Error(err) << s.message() << "\n"; }

struct Followed {
  logs::LogTarget target;
  UniqueFd dir;
  std::atomic<bool> ended{false};
  Status result;
};

}  // namespace

std::string CriLogText(const std::string& content, int tail) {
  logs::LogReadOptions o;
  o.tail_lines = tail;
  return logs::FormatCriLog(content, o);
}

int RunLogs(const CtlOptions& o, const LogsRequest& r, std::ostream& out, std::ostream& err) {
  logs::LogReadOptions read;
  read.tail_lines = r.tail;
  read.timestamps = r.timestamps;
  if (!r.since.empty()) {
    auto since = logs::ParseGoDuration(r.since);
    if (!since.ok()) {
      Error(err) << "--since: " << since.status().message() << "\n";
      return kExitUsage;
    }
    read.since_unix_ns = o.clock->WallNanos() - since->count();
  }
  if (r.all_containers && !r.container.empty()) {
    Error(err) << "--all-containers=true should not be specified with container name "
               << r.container << "\n";
    return kExitUsage;
  }

  // The log directory, from the supervisor.
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::LogPath, {"plegd"}, o.timeout);
  if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied) {
    return Unreachable(o, reply.status(), err);
  }
  if (!reply.ok() || reply->services.empty()) {
    Error(err) << "nodelet is not running, or not with --run-dir " << o.run_dir << "\n";
    return kExitUnknown;
  }
  const fs::path pods_dir = fs::path(reply->services[0]->log_path).parent_path() / "pods";
  UniqueFd pods_fd(open(pods_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!pods_fd.valid()) {
    Error(err) << "cannot open the pods' log directory " << pods_dir.string() << ": "
               << ErrnoStatus("open", errno).message() << "\n";
    return kExitUnknown;
  }

  // The pod and its containers, from statusd.
  if (Status s = ipc::ProbeIpcSocket(ipc::kStatusEndpoint.Path(o.run_dir));
      s.code() == StatusCode::kPermissionDenied) {
    Error(err) << s.message() << "\n";
    return kExitUnknown;
  }
  ipc::Context ctx;
  status::StatusClientOptions copts;
  copts.sender = ipc::ServiceId::Ctl;
  copts.deadline = o.timeout;
  copts.attempt_timeout = std::min(o.timeout, std::chrono::milliseconds(1000));
  status::StatusClient client(ctx, o.run_dir, copts);
  Status connected = client.Connect();
  auto list = connected.ok() ? client.ListPodStatuses() : Result<status::PodStatusList>(connected);
  if (!list.ok()) {
    Error(err) << "cannot list pods from nodelet-statusd at '"
               << ipc::kStatusEndpoint.Path(o.run_dir) << "': " << list.status().message() << "\n";
    return kExitUnknown;
  }
  std::vector<std::string> containers = {r.container};
  if (r.all_containers) {
    auto pod = logs::FindPod(list->records, "", r.pod);
    if (!pod.ok()) {
      PrintError(err, pod.status());
      return kExitUnknown;
    }
    containers = logs::ContainerNames(**pod);
  }
  auto attempts = [&](const logs::LogTarget& t) {
    auto dir = logs::OpenContainerLogDir(pods_fd.get(), t);
    return dir.ok() ? logs::ListLogAttempts(dir->get()) : std::vector<int>{};
  };
  std::vector<std::unique_ptr<Followed>> targets;
  for (const auto& c : containers) {
    auto t = logs::ResolveLogTarget(list->records, "", r.pod, c, r.previous, attempts);
    if (!t.ok()) {
      PrintError(err, t.status());
      return kExitUnknown;
    }
    auto dir = logs::OpenContainerLogDir(pods_fd.get(), *t);
    if (!dir.ok()) {
      Error(err) << dir.status().message() << "\n";
      return kExitUnknown;
    }
    auto f = std::make_unique<Followed>();
    f->target = std::move(*t);
    f->dir = std::move(*dir);
    targets.push_back(std::move(f));
  }

  std::mutex out_mu;
  auto sink = [&](std::string_view text) {
    std::lock_guard<std::mutex> lock(out_mu);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    return static_cast<bool>(out);
  };
  if (!r.follow) {
    // In the pod's order, one after the other (kubectl prefixes nothing by default).
    for (const auto& f : targets) {
      Status s = logs::ReadCriLog(f->dir.get(), f->target.file, read, sink);
      if (!s.ok()) {
        Error(err) << f->target.container << ": " << s.message() << "\n";
        return kExitUnknown;
      }
    }
    return kExitOk;
  }

  // Follow: one thread per container; this thread asks statusd every second whether each
  // followed instance still runs (the followers wake at least every second to look).
  std::mutex mu;
  std::condition_variable cv;
  size_t finished = 0;
  std::vector<std::thread> threads;
  for (auto& f : targets) {
    f->ended = logs::InstanceEnded(list->records, f->target);
    threads.emplace_back([&, f = f.get()] {
      logs::FollowOptions fo;
      fo.ended = [f] { return f->ended.load(); };
      fo.clock = o.clock;
      f->result = logs::FollowCriLog(f->dir.get(), f->target.file, read, fo, sink);
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    while (finished < threads.size()) {
      if (cv.wait_for(lock, std::chrono::seconds(1), [&] { return finished == threads.size(); }))
        break;
      lock.unlock();
      // Every target is a container of the one pod: its record alone (none once it is gone).
      auto now = client.GetPodStatus(targets.front()->target.pod_uid);
      lock.lock();
      for (auto& f : targets) {
        // Unknown (statusd restarting): asked again in a second.
        if (logs::InstanceEnded(now, f->target).value_or(false)) f->ended = true;
      }
    }
  }
  for (auto& t : threads) t.join();
  int rc = kExitOk;
  for (const auto& f : targets) {
    if (!f->result.ok()) {
      Error(err) << f->target.container << ": " << f->result.message() << "\n";
      rc = kExitUnknown;
    }
  }
  return rc;
}

}  // namespace nodelet::ctl

// ContainerLogManager on the fake runtime and a temporary log directory: rotation naming
// (N.log.YYYYMMDD-HHMMSS, UTC), gzip of older rotated files, at most max-files files, a failed
// reopen renames the log back, the container log symlinks, a removed pod's log directory, and
// symlinks planted where the logs are never followed.
#include "svc-podworkerd/container_log_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lib/service/event_loop.h"
#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/testing/log_files.h"

namespace nodelet::podworkerd {
namespace {

namespace fs = std::filesystem;
using nodelet::testing::ReadLogFile;
using nodelet::testing::SortedNames;
namespace v1 = ::runtime::v1;
using testing::CriCall;
using ::testing::ElementsAre;
using testing::FakeClock;
using testing::FakeCriRuntime;
using ::testing::UnorderedElementsAre;

constexpr char kLogImage[] = "nodelet.local/busybox:1.0";
// FakeClock's wall time at its start: 1'700'000'000 s + 1 h.
constexpr char kStamp0[] = "20231114-231320";

class ContainerLogManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodelet-logrot-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    log_dir_ = root_ + "/log";
    fs::create_directories(log_dir_ + "/pods");
    fs::create_directories(log_dir_ + "/containers");
    runtime_.AddImage(kLogImage);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A running, managed container `name` of pod default/web (uid `uid`) whose log is
  // LOG-DIR/pods/default_web_UID/NAME/ATTEMPT.log, holding `content`. Its id.
  std::string Run(const std::string& uid, const std::string& name, uint32_t attempt,
                  const std::string& content) {
    v1::PodSandboxConfig sb;
    sb.mutable_metadata()->set_name("web");
    sb.mutable_metadata()->set_namespace_("default");
    sb.mutable_metadata()->set_uid(uid);
    (*sb.mutable_labels())[kPodUidLabel] = uid;
    sb.set_log_directory(PodDir(uid));
    if (!sandboxes_.count(uid)) {
      auto id = runtime_.RunPodSandbox(sb, "");
      EXPECT_TRUE(id.ok());
      sandboxes_[uid] = id.ok() ? *id : "";
    }
    v1::ContainerConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_metadata()->set_attempt(attempt);
    c.mutable_image()->set_image(kLogImage);
    (*c.mutable_labels())[kManagedLabel] = "true";
    (*c.mutable_labels())[kPodUidLabel] = uid;
    (*c.mutable_labels())[kContainerNameLabel] = name;
    c.set_log_path(name + "/" + std::to_string(attempt) + ".log");
    fs::create_directories(PodDir(uid) + "/" + name);
    std::ofstream(PodDir(uid) + "/" + c.log_path()) << content;
    auto id = runtime_.CreateContainer(sandboxes_[uid], c, sb);
    EXPECT_TRUE(id.ok());
    if (!id.ok()) return "";
    EXPECT_TRUE(runtime_.StartContainer(*id).ok());
    return *id;
  }
  std::string PodDir(const std::string& uid) const { return log_dir_ + "/pods/default_web_" + uid; }
  // Appends to a log as the container would (the runtime writes to the current file).
  void Append(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::app) << text;
  }

  std::string root_, log_dir_;
  FakeCriRuntime runtime_;
  FakeClock clock_;
  EventLoop loop_{clock_};
  std::map<std::string, std::string> sandboxes_;
};

TEST_F(ContainerLogManagerTest, ASmallLogIsLeftAlone) {
  const std::string id = Run("u1", "app", 0, "short\n");
  ContainerLogManager m(loop_, runtime_, log_dir_, {100, 3, std::chrono::seconds(1)});
  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.rotated, 0);
  EXPECT_EQ(runtime_.ReopenedLogs(id), 0);
  EXPECT_THAT(SortedNames(PodDir("u1") + "/app"), ElementsAre("0.log"));
}

TEST_F(ContainerLogManagerTest, RotationRenamesWithAUtcStampReopensAndCompressesOlderFiles) {
  const std::string id = Run("u1", "app", 2, std::string(200, 'a'));
  const std::string dir = PodDir("u1") + "/app";
  ContainerLogManager m(loop_, runtime_, log_dir_, {100, 3, std::chrono::seconds(1)});

  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.rotated, 1);
  EXPECT_EQ(runtime_.ReopenedLogs(id), 1);
  // The runtime opened a new 2.log; the rotated one stays uncompressed (a reader may follow it).
  EXPECT_THAT(SortedNames(dir), ElementsAre("2.log", std::string("2.log.") + kStamp0));
  EXPECT_EQ(ReadLogFile(dir + "/2.log"), "");
  EXPECT_EQ(ReadLogFile(dir + "/2.log." + kStamp0), std::string(200, 'a'));

  // The next rotation compresses the previous one.
  Append(dir + "/2.log", std::string(150, 'b'));
  clock_.Advance(std::chrono::seconds(2));
  r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.rotated, 1);
  EXPECT_EQ(r.compressed, 1);
  EXPECT_THAT(SortedNames(dir), ElementsAre("2.log", std::string("2.log.") + kStamp0 + ".gz",
                                            "2.log.20231114-231322"));
  EXPECT_EQ(ReadLogFile(dir + "/2.log." + kStamp0 + ".gz"), std::string(200, 'a'));
  EXPECT_EQ(ReadLogFile(dir + "/2.log.20231114-231322"), std::string(150, 'b'));
}

TEST_F(ContainerLogManagerTest, NeverMoreThanMaxFilesTheOldestGoFirst) {
  const std::string id = Run("u1", "app", 0, "");
  const std::string dir = PodDir("u1") + "/app";
  ContainerLogManager m(loop_, runtime_, log_dir_, {5, 3, std::chrono::seconds(1)});
  for (int i = 0; i < 6; ++i) {
    Append(dir + "/0.log", "round " + std::to_string(i) + "\n");
    auto r = m.RotateLogs();
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.rotated, 1);
    EXPECT_LE(SortedNames(dir).size(), 3u) << ::testing::PrintToString(SortedNames(dir));
    clock_.Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(runtime_.ReopenedLogs(id), 6);
  // The current file, the newest rotated (plain) and one older (compressed): rounds 4 and 5.
  EXPECT_THAT(SortedNames(dir),
              ElementsAre("0.log", "0.log.20231114-231324.gz", "0.log.20231114-231325"));
  EXPECT_EQ(ReadLogFile(dir + "/0.log.20231114-231324.gz"), "round 4\n");
  EXPECT_EQ(ReadLogFile(dir + "/0.log.20231114-231325"), "round 5\n");
}

TEST_F(ContainerLogManagerTest, LeftoversOfAnInterruptedCompressionAreCleanedUp) {
  Run("u1", "app", 0, std::string(50, 'x'));
  const std::string dir = PodDir("u1") + "/app";
  // A temp file, and a plain file whose compressed copy was made but not yet removed.
  std::ofstream(dir + "/0.log.20231114-231000.gz.tmp") << "partial";
  std::ofstream(dir + "/0.log.20231114-231100") << "done";
  std::ofstream(dir + "/0.log.20231114-231100.gz") << "compressed";
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 5, std::chrono::seconds(1)});
  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_THAT(SortedNames(dir),
              ElementsAre("0.log", "0.log.20231114-231100.gz", std::string("0.log.") + kStamp0));
}

TEST_F(ContainerLogManagerTest, AFailedReopenRenamesTheLogBackAndTheNextPassRetries) {
  const std::string id = Run("u1", "app", 0, std::string(20, 'z'));
  const std::string dir = PodDir("u1") + "/app";
  runtime_.FailCall(CriCall::kReopenContainerLog, Unavailable("runtime busy"), 1);
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 3, std::chrono::seconds(1)});
  auto r = m.RotateLogs();
  EXPECT_FALSE(r.status.ok());
  EXPECT_THAT(r.status.message(), ::testing::HasSubstr("runtime busy"));
  EXPECT_EQ(r.rotated, 0);
  EXPECT_THAT(SortedNames(dir), ElementsAre("0.log"));
  EXPECT_EQ(ReadLogFile(dir + "/0.log"), std::string(20, 'z'));

  r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.rotated, 1);
  EXPECT_EQ(runtime_.ReopenedLogs(id), 1);
  EXPECT_THAT(SortedNames(dir), ElementsAre("0.log", std::string("0.log.") + kStamp0));
}

TEST_F(ContainerLogManagerTest, OnlyRunningManagedContainersAreRotated) {
  const std::string exited = Run("u1", "done", 0, std::string(50, 'e'));
  ASSERT_TRUE(runtime_.ExitContainer(exited, 0).ok());
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 3, std::chrono::seconds(1)});
  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.rotated, 0);
  EXPECT_THAT(SortedNames(PodDir("u1") + "/done"), ElementsAre("0.log"));
}

// A container's log path is asked of the runtime once, not every pass; a container started
// later is asked for its own.
TEST_F(ContainerLogManagerTest, EachContainersLogPathIsAskedOnce) {
  Run("u1", "app", 0, "short\n");
  ContainerLogManager m(loop_, runtime_, log_dir_, {100, 3, std::chrono::seconds(1)});
  ASSERT_TRUE(m.RotateLogs().status.ok());
  const int after_first = runtime_.CallCount(CriCall::kContainerStatus);
  EXPECT_EQ(after_first, 1);
  ASSERT_TRUE(m.RotateLogs().status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kContainerStatus), after_first) << "known already";
  const std::string second = Run("u1", "side", 0, std::string(200, 's'));
  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kContainerStatus), after_first + 1);
  EXPECT_EQ(r.rotated, 1) << "the new container's log, found through its own status";
  EXPECT_EQ(runtime_.ReopenedLogs(second), 1);
}

// Once podworkerd hands over plegd's running containers, a pass rotates those without listing
// the runtime; a container no longer among them is left alone.
TEST_F(ContainerLogManagerTest, WithPlegdsRunningContainersAPassDoesNotListTheRuntime) {
  const std::string a = Run("u1", "app", 0, std::string(200, 'a'));
  const std::string b = Run("u1", "side", 0, std::string(200, 'b'));
  ContainerLogManager m(loop_, runtime_, log_dir_, {100, 3, std::chrono::seconds(1)});
  m.SetRunning({a});
  const int lists = runtime_.CallCount(CriCall::kListContainers);
  auto r = m.RotateLogs();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kListContainers), lists);
  EXPECT_EQ(r.rotated, 1);
  EXPECT_EQ(runtime_.ReopenedLogs(a), 1);
  EXPECT_EQ(runtime_.ReopenedLogs(b), 0) << "not among plegd's running containers";
}

TEST_F(ContainerLogManagerTest, ALogPathOutsideThePodLogsIsRefused) {
  const std::string outside = root_ + "/outside.log";
  std::ofstream(outside) << std::string(100, 'o');
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 3, std::chrono::seconds(1)});
  for (const std::string& path :
       {outside, log_dir_ + "/pods/../../outside.log", log_dir_ + "/pods/a/../../outside.log",
        log_dir_ + "/pods/p/outside.log"}) {
    auto r = m.RotateLog("c1", path);
    EXPECT_FALSE(r.status.ok()) << path;
  }
  EXPECT_EQ(ReadLogFile(outside), std::string(100, 'o'));
  EXPECT_THAT(SortedNames(root_), UnorderedElementsAre("log", "outside.log"));
}

// Symlinks where the logs are (as a container with a hostPath of the log directory could plant
// them) are never followed: neither the current log, nor a rotated file, nor a directory.
TEST_F(ContainerLogManagerTest, PlantedSymlinksAreNotFollowed) {
  const std::string secret = root_ + "/secret";
  std::ofstream(secret) << std::string(100, 's');
  fs::create_directories(root_ + "/secret-dir");
  std::ofstream(root_ + "/secret-dir/0.log") << std::string(100, 'd');

  // The current log is a link to a file outside: not rotated, the file untouched.
  const std::string id = Run("u1", "app", 0, "");
  const std::string dir = PodDir("u1") + "/app";
  fs::remove(dir + "/0.log");
  fs::create_symlink(secret, dir + "/0.log");
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 2, std::chrono::seconds(1)});
  auto r = m.RotateLog(id, dir + "/0.log");
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/0.log"));
  EXPECT_EQ(ReadLogFile(secret), std::string(100, 's'));

  // A "rotated file" that is a link: neither compressed nor removed through it.
  fs::remove(dir + "/0.log");
  std::ofstream(dir + "/0.log") << std::string(50, 'l');
  fs::create_symlink(secret, dir + "/0.log.20200101-000000");
  for (int i = 0; i < 3; ++i) {
    Append(dir + "/0.log", std::string(50, 'l'));
    r = m.RotateLog(id, dir + "/0.log");
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    clock_.Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(ReadLogFile(secret), std::string(100, 's'));
  EXPECT_TRUE(fs::is_symlink(dir + "/0.log.20200101-000000"));

  // The container directory is a link to a directory outside: refused.
  const std::string id2 = Run("u1", "side", 0, "");
  fs::remove_all(PodDir("u1") + "/side");
  fs::create_symlink(root_ + "/secret-dir", PodDir("u1") + "/side");
  r = m.RotateLog(id2, PodDir("u1") + "/side/0.log");
  EXPECT_FALSE(r.status.ok());
  EXPECT_THAT(SortedNames(root_ + "/secret-dir"), ElementsAre("0.log"));

  // The pod goes: its directory is removed, the link in it as a link, the outside untouched.
  ASSERT_TRUE(runtime_.StopPodSandbox(sandboxes_["u1"]).ok());
  ASSERT_TRUE(runtime_.RemovePodSandbox(sandboxes_["u1"]).ok());
  auto c = m.CleanUp({});
  EXPECT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.pod_dirs_removed, 1);
  EXPECT_FALSE(fs::exists(PodDir("u1")));
  EXPECT_EQ(ReadLogFile(secret), std::string(100, 's'));
  EXPECT_EQ(ReadLogFile(root_ + "/secret-dir/0.log"), std::string(100, 'd'));
}

TEST_F(ContainerLogManagerTest, SymlinksAreMadeRemovedAndSwept) {
  const std::string id = Run("u1", "app", 0, "hello\n");
  const std::string target = PodDir("u1") + "/app/0.log";
  ASSERT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "app", id, target).ok());
  const std::string link = log_dir_ + "/containers/web_default_app-" + id + ".log";
  ASSERT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link).string(), target);
  EXPECT_EQ(ReadLogFile(link), "hello\n");
  // Made again (a new attempt of the same id cannot happen, but a leftover is replaced).
  EXPECT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "app", id, target).ok());

  // Names that are not one path component are refused.
  EXPECT_FALSE(CreateContainerLogSymlink(log_dir_, "../web", "default", "app", id, target).ok());
  EXPECT_FALSE(CreateContainerLogSymlink(log_dir_, "web", "default", "app", "a/b", target).ok());
  EXPECT_FALSE(CreateContainerLogSymlink(log_dir_, "web", "", "app", id, target).ok());

  auto removed = RemoveContainerLogSymlinks(log_dir_, id);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(fs::exists(link) || fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(target));  // the log itself stays

  // The sweep: a link whose container the runtime does not know, and a dangling one of an
  // exited container, go; a live one, a dangling one of a running container (its log is being
  // rotated) and a plain file stay.
  ASSERT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "app", id, target).ok());
  ASSERT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "old", "deadbeef",
                                        PodDir("u1") + "/old/0.log")
                  .ok());
  const std::string id2 = Run("u1", "side", 0, "x\n");
  ASSERT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "side", id2,
                                        PodDir("u1") + "/side/9.log")
                  .ok());
  ASSERT_TRUE(runtime_.ExitContainer(id2, 0).ok());
  const std::string id3 = Run("u1", "busy", 0, "");
  ASSERT_TRUE(CreateContainerLogSymlink(log_dir_, "web", "default", "busy", id3,
                                        PodDir("u1") + "/busy/1.log")
                  .ok());
  std::ofstream(log_dir_ + "/containers/notes.txt") << "not ours";
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 3, std::chrono::seconds(1)});
  auto c = m.CleanUp({"u1"});
  ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.symlinks_removed, 2);
  EXPECT_THAT(SortedNames(log_dir_ + "/containers"),
              UnorderedElementsAre("web_default_app-" + id + ".log",
                                   "web_default_busy-" + id3 + ".log", "notes.txt"));
}

TEST_F(ContainerLogManagerTest, ARemovedPodsLogDirectoryGoesOnlyOnceNothingOfItIsLeft) {
  const std::string id = Run("u1", "app", 0, "log\n");
  Run("u2", "app", 0, "other\n");
  // A uid holding '_' (not a valid one, but nothing here relies on validation).
  fs::create_directories(log_dir_ + "/pods/default_odd_x_u4");
  fs::create_directories(log_dir_ + "/pods/default_gone_u3/app");
  std::ofstream(log_dir_ + "/pods/default_gone_u3/app/0.log") << "gone\n";
  std::ofstream(log_dir_ + "/pods/default_gone_u3/app/0.log.20231114-000000.gz") << "gz";
  ContainerLogManager m(loop_, runtime_, log_dir_, {10, 3, std::chrono::seconds(1)});

  // u3 has nothing in the runtime and is not desired: its directory goes. u1 and u2 have a
  // sandbox (u2 is not desired any more but still there).
  auto c = m.CleanUp({"u1", "x_u4"});
  ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.pod_dirs_removed, 1);
  EXPECT_THAT(SortedNames(log_dir_ + "/pods"),
              ElementsAre("default_odd_x_u4", "default_web_u1", "default_web_u2"));

  // u1 is desired: its directory stays even without a sandbox (one is about to be made).
  ASSERT_TRUE(runtime_.ExitContainer(id, 0).ok());
  ASSERT_TRUE(runtime_.StopPodSandbox(sandboxes_["u1"]).ok());
  ASSERT_TRUE(runtime_.RemovePodSandbox(sandboxes_["u1"]).ok());
  ASSERT_TRUE(runtime_.StopPodSandbox(sandboxes_["u2"]).ok());
  ASSERT_TRUE(runtime_.RemovePodSandbox(sandboxes_["u2"]).ok());
  c = m.CleanUp({"u1"});
  ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_EQ(c.pod_dirs_removed, 2);
  EXPECT_THAT(SortedNames(log_dir_ + "/pods"), ElementsAre("default_web_u1"));

  // Nothing is removed while the runtime cannot be listed.
  runtime_.FailCall(CriCall::kListPodSandbox, Unavailable("down"));
  c = m.CleanUp({});
  EXPECT_FALSE(c.status.ok());
  EXPECT_THAT(SortedNames(log_dir_ + "/pods"), ElementsAre("default_web_u1"));
  runtime_.ClearFailures();
  c = m.CleanUp({});
  ASSERT_TRUE(c.status.ok()) << c.status.ToString();
  EXPECT_THAT(SortedNames(log_dir_ + "/pods"), ElementsAre());
}

// The passes are the loop's timer's, each interval counted from the end of the last pass; the
// clock moves only when the test says so.
TEST_F(ContainerLogManagerTest, APassRunsEveryMonitorIntervalOnceStarted) {
  ContainerLogManager m(loop_, runtime_, log_dir_, {100, 3, std::chrono::seconds(10)});
  auto run_until = [&](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (!loop_.RunOnce(std::chrono::milliseconds(10)).ok()) return false;
    }
    return true;
  };
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_TRUE(loop_.RunOnce(std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(m.passes(), 0u) << "not before Start";
  m.Start();
  clock_.Advance(std::chrono::milliseconds(9999));
  ASSERT_TRUE(loop_.RunOnce(std::chrono::milliseconds(20)).ok());
  EXPECT_EQ(m.passes(), 0u) << "not before its interval";
  clock_.Advance(std::chrono::milliseconds(1));
  ASSERT_TRUE(run_until([&] { return m.passes() == 1; }));
  // Its continuation arms the next interval from the end of the pass.
  ASSERT_TRUE(run_until([&] { return !m.pass_running(); }));
  EXPECT_GT(runtime_.CallCount(testing::CriCall::kListContainers), 0) << "it listed the runtime";
  clock_.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(run_until([&] { return m.passes() == 2; }));
}

}  // namespace
}  // namespace nodelet::podworkerd

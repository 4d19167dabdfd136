// lib/logs: CRI log parsing, tail/since/timestamps/limit, the choice of an instance's file and
// following a file across a rotation until the container ends.
#include "lib/logs/cri_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "tests/testing/harness.h"

namespace nodelet::logs {
namespace {

using namespace std::chrono_literals;

const char* kLog =
    "2024-05-01T12:00:00.1Z stdout F first line\n"
    "2024-05-01T12:00:01.2Z stderr P part one, \n"
    "2024-05-01T12:00:01.3Z stderr F part two\n"
    "2024-05-01T12:00:02Z stdout F last\n";

TEST(CriLogLineTest, ParsesTheFourFields) {
  CriLogLine l;
  ASSERT_TRUE(ParseCriLogLine("2024-05-01T12:00:00.5Z stderr P some text ", &l));
  EXPECT_EQ(l.timestamp, "2024-05-01T12:00:00.5Z");
  EXPECT_EQ(l.time_unix_ns, 1714564800500000000);
  EXPECT_EQ(l.stream, "stderr");
  EXPECT_TRUE(l.partial);
  EXPECT_EQ(l.content, "some text ");
  ASSERT_TRUE(ParseCriLogLine("2024-05-01T12:00:00Z stdout F", &l));  // an empty line
  EXPECT_EQ(l.content, "");
  EXPECT_FALSE(l.partial);
  for (const char* bad : {"", "not cri", "2024-05-01T12:00:00Z stdout X text",
                          "2024-05-01T12:00:00Z other F text", "yesterday stdout F text"}) {
    EXPECT_FALSE(ParseCriLogLine(bad, &l)) << bad;
  }
}

TEST(CriLogLineTest, Rfc3339WithFractionsAndOffsets) {
  EXPECT_EQ(ParseRfc3339Nanos("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:00:00.123456789Z"), 1714564800123456789);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T14:00:00+02:00"), 1714564800000000000);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:00:00"), std::nullopt);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:00:00.Z"), std::nullopt);
  // Out of what 64-bit nanoseconds since 1970 hold (the fuzzer's year 0000): refused, no overflow.
  EXPECT_EQ(ParseRfc3339Nanos("0000-01-01T00:00:00Z"), std::nullopt);
  EXPECT_EQ(ParseRfc3339Nanos("9999-12-31T23:59:59Z"), std::nullopt);
  EXPECT_NE(ParseRfc3339Nanos("2262-01-01T00:00:00Z"), std::nullopt);
  EXPECT_EQ(ParseRfc3339Nanos("2024-13-01T12:00:00Z"), std::nullopt);
}

TEST(GoDurationTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseGoDuration("5s"), 5s);
  EXPECT_EQ(*ParseGoDuration("2m"), 2min);
  EXPECT_EQ(*ParseGoDuration("1h30m"), 90min);
  EXPECT_EQ(*ParseGoDuration("1.5h"), 90min);
  EXPECT_EQ(*ParseGoDuration("300ms"), 300ms);
  EXPECT_EQ(*ParseGoDuration("0"), 0s);
  for (const char* bad : {"", "5", "-1s", "x", "5d", "1h-2m", "."}) {
    EXPECT_FALSE(ParseGoDuration(bad).ok()) << bad;
  }
}

TEST(FormatCriLogTest, StripsPrefixesJoinsPartialLinesAndTails) {
  LogReadOptions o;
  EXPECT_EQ(FormatCriLog(kLog, o), "first line\npart one, part two\nlast\n");
  o.tail_lines = 2;
  EXPECT_EQ(FormatCriLog(kLog, o), "part one, part two\nlast\n");
  o.tail_lines = 0;
  EXPECT_EQ(FormatCriLog(kLog, o), "");
  o.tail_lines = 10;
  EXPECT_EQ(FormatCriLog(kLog, o), "first line\npart one, part two\nlast\n");
  EXPECT_EQ(FormatCriLog("not cri\n", {}), "not cri\n");
}

TEST(FormatCriLogTest, TimestampsAreTheFirstPiecesTime) {
  LogReadOptions o;
  o.timestamps = true;
  EXPECT_EQ(FormatCriLog(kLog, o),
            "2024-05-01T12:00:00.1Z first line\n"
            "2024-05-01T12:00:01.2Z part one, part two\n"
            "2024-05-01T12:00:02Z last\n");
}

TEST(FormatCriLogTest, SinceLeavesOutOlderLines) {
  LogReadOptions o;
  o.since_unix_ns = *ParseRfc3339Nanos("2024-05-01T12:00:01Z");
  EXPECT_EQ(FormatCriLog(kLog, o), "part one, part two\nlast\n");
  o.since_unix_ns = *ParseRfc3339Nanos("2024-05-01T13:00:00Z");
  EXPECT_EQ(FormatCriLog(kLog, o), "");
}

TEST(FormatCriLogTest, LimitBytesCutsTheOutput) {
  LogReadOptions o;
  o.limit_bytes = 14;
  EXPECT_EQ(FormatCriLog(kLog, o), "first line\npar");
  o.limit_bytes = 0;
  EXPECT_EQ(FormatCriLog(kLog, o), "");
}

TEST(FormatCriLogTest, AnUnfinishedLastLineIsShownWithoutNewline) {
  EXPECT_EQ(
      FormatCriLog("2024-05-01T12:00:00Z stdout F done\n2024-05-01T12:00:01Z stdout P half", {}),
      "done\nhalf");
  EXPECT_EQ(FormatCriLog("2024-05-01T12:00:00Z stdout P only partial\n", {}), "only partial");
}

TEST(FormatCriLogTest, AnySplitOfTheInputGivesTheSameText) {
  const std::string whole = kLog;
  for (size_t piece : {1u, 2u, 7u, 40u}) {
    std::string out;
    CriLogFormatter f({}, [&](std::string_view s) {
      out.append(s);
      return true;
    });
    for (size_t i = 0; i < whole.size(); i += piece) f.Feed(whole.substr(i, piece));
    f.Finish();
    EXPECT_EQ(out, "first line\npart one, part two\nlast\n") << piece;
  }
}

// A CRI piece of `n` bytes of 'a', as containerd writes a long line (16 KiB pieces tagged P).
std::string Piece(const char* tag, size_t n) {
  return "2024-05-01T12:00:00Z stdout " + std::string(tag) + " " + std::string(n, 'a') + "\n";
}

TEST(CriLogFormatterTest, PassPartialWritesEachPieceAsItComes) {
  LogReadOptions o;
  o.pass_partial = true;
  o.timestamps = true;
  std::string out;
  CriLogFormatter f(o, [&](std::string_view s) {
    out.append(s);
    return true;
  });
  f.Feed("2024-05-01T12:00:01Z stdout P abc\n");
  EXPECT_EQ(out, "2024-05-01T12:00:01Z abc");  // at once, not when the line ends
  f.Feed("2024-05-01T12:00:02Z stdout P def\n");
  EXPECT_EQ(out, "2024-05-01T12:00:01Z abcdef");  // one time per line: the first piece's
  f.Feed("2024-05-01T12:00:03Z stdout F ghi\n2024-05-01T12:00:04Z stdout F next\n");
  EXPECT_EQ(out, "2024-05-01T12:00:01Z abcdefghi\n2024-05-01T12:00:04Z next\n");
  f.Finish();
  EXPECT_EQ(out, "2024-05-01T12:00:01Z abcdefghi\n2024-05-01T12:00:04Z next\n");
}

TEST(CriLogFormatterTest, ALineThatNeverEndsIsPassedOnWithBoundedMemory) {
  // 64 MiB of one line, in containerd's 16 KiB pieces, never completed: joined (no
  // pass_partial) it is passed on every kMaxJoinedLine bytes; passed through, piece by piece.
  constexpr size_t kPiece = 16 * 1024, kPieces = 4096;
  const std::string piece = Piece("P", kPiece);
  for (bool pass : {false, true}) {
    LogReadOptions o;
    o.pass_partial = pass;
    size_t written = 0, largest = 0;
    CriLogFormatter f(o, [&](std::string_view s) {
      EXPECT_EQ(s.find_first_not_of('a'), std::string_view::npos);
      written += s.size();
      largest = std::max(largest, s.size());
      return true;
    });
    for (size_t i = 0; i < kPieces; ++i) {
      f.Feed(piece);
      // What is held back never grows past the cap (plus one piece).
      ASSERT_GE(written + kMaxJoinedLine + kPiece, (i + 1) * kPiece) << i << " pass " << pass;
    }
    EXPECT_LE(largest, pass ? kPiece : kMaxJoinedLine + kPiece);
    f.Finish();
    EXPECT_EQ(written, kPiece * kPieces) << pass;  // every byte, none twice
  }
}

TEST(CriLogFormatterTest, BytesWithoutANewlineAreNotKeptForEver) {
  // Not a CRI line (no runtime writes 8 MiB without a '\n'): passed on as it is.
  size_t written = 0;
  CriLogFormatter f({}, [&](std::string_view s) {
    written += s.size();
    return true;
  });
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 128; ++i) f.Feed(chunk);
  EXPECT_GE(written + kMaxJoinedLine + chunk.size(), 128 * chunk.size());
  f.Finish();
  EXPECT_EQ(written, 128 * chunk.size());
}

TEST(FormatCriLogTest, StopsWhenTheReaderIsGone) {
  int writes = 0;
  CriLogFormatter f({}, [&](std::string_view) { return ++writes < 2; });
  EXPECT_FALSE(f.Feed(kLog));
  EXPECT_EQ(writes, 2);
  EXPECT_TRUE(f.done());
}

status::PodStatusRecord Pod(const std::string& ns, const std::string& name,
                            const std::string& uid) {
  status::PodStatusRecord r;
  r.pod.namespace_ = ns;
  r.pod.name = name;
  r.pod.uid = uid;
  return r;
}

status::ContainerStatus Running(const std::string& name, int restarts, const std::string& id) {
  status::ContainerStatus c;
  c.name = name;
  c.restart_count = restarts;
  c.container_id = id;
  c.state.running = status::ContainerStateRunning{1};
  if (restarts > 0) c.last_state.terminated = status::ContainerStateTerminated{};
  return c;
}

TEST(ResolveLogTargetTest, PodsContainersAndInstances) {
  std::vector<status::PodStatusRecord> pods = {Pod("default", "web", "u1"),
                                               Pod("kube-system", "one", "u2")};
  pods[0].status.init_container_statuses.push_back(Running("init", 0, ""));
  pods[0].status.init_container_statuses[0].state = {};
  pods[0].status.init_container_statuses[0].state.terminated = status::ContainerStateTerminated{};
  pods[0].status.container_statuses.push_back(Running("app", 2, "c-app"));
  pods[0].status.container_statuses.push_back(Running("side", 0, "c-side"));
  pods[1].status.container_statuses.push_back(Running("only", 0, "c-only"));
  std::map<std::string, std::vector<int>> files = {{"default_web_u1/app", {0, 1, 2}},
                                                   {"default_web_u1/side", {0}},
                                                   {"default_web_u1/init", {0}},
                                                   {"kube-system_one_u2/only", {0}}};
  auto attempts = [&](const LogTarget& t) { return files[t.pod_dir + "/" + t.container]; };

  auto t = ResolveLogTarget(pods, "", "web", "app", false, attempts);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->pod_dir, "default_web_u1");
  EXPECT_EQ(t->file, "2.log");
  EXPECT_EQ(t->running_container_id, "c-app");
  EXPECT_FALSE(InstanceEnded(pods, *t));

  t = ResolveLogTarget(pods, "", "default/web", "app", true, attempts);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->file, "1.log");
  EXPECT_EQ(t->running_container_id, "");  // a previous instance is read, never followed
  EXPECT_TRUE(InstanceEnded(pods, *t));

  // The only container of a pod in another namespace, by its name alone.
  t = ResolveLogTarget(pods, "", "one", "", false, attempts);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->container, "only");
  EXPECT_EQ(ContainerNames(pods[0]), (std::vector<std::string>{"init", "app", "side"}));

  auto err = ResolveLogTarget(pods, "", "nosuch", "", false, attempts);
  EXPECT_EQ(err.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(err.status().message(), "pods \"nosuch\" not found");
  err = ResolveLogTarget(pods, "other", "web", "app", false, attempts);
  EXPECT_EQ(err.status().code(), StatusCode::kNotFound);
  err = ResolveLogTarget(pods, "", "web", "nosuch", false, attempts);
  EXPECT_EQ(err.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(err.status().message(), "container nosuch is not valid for pod web");
  err = ResolveLogTarget(pods, "", "web", "", false, attempts);
  EXPECT_EQ(err.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.status().message(),
            "a container name must be specified for pod web, choose one of: [init app side]");
  err = ResolveLogTarget(pods, "", "web", "side", true, attempts);
  EXPECT_EQ(err.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(err.status().message(),
            "previous terminated container \"side\" in pod \"web\" not found");

  // The followed instance ends when its container stops running or is replaced.
  t = ResolveLogTarget(pods, "", "web", "app", false, attempts);
  auto later = pods;
  later[0].status.container_statuses[0].container_id = "c-app-2";
  EXPECT_TRUE(InstanceEnded(later, *t));
  later = pods;
  later[0].status.container_statuses[0].state = {};
  later[0].status.container_statuses[0].state.terminated = status::ContainerStateTerminated{};
  EXPECT_TRUE(InstanceEnded(later, *t));
  EXPECT_TRUE(InstanceEnded(std::vector<status::PodStatusRecord>{}, *t));
  // From statusd's answer for the pod: its record, NotFound (gone), or no answer (unknown).
  EXPECT_EQ(InstanceEnded(Result<status::PodStatusRecord>(pods[0]), *t), false);
  EXPECT_EQ(InstanceEnded(Result<status::PodStatusRecord>(later[0]), *t), true);
  EXPECT_EQ(InstanceEnded(Result<status::PodStatusRecord>(NotFound("no pod")), *t), true);
  EXPECT_EQ(InstanceEnded(Result<status::PodStatusRecord>(Unavailable("statusd")), *t),
            std::nullopt);
}

TEST(ListLogAttemptsTest, OnlyTheCurrentFilesOfEachInstance) {
  testing::TempDir dir;
  for (const char* f : {"0.log", "2.log", "10.log", "2.log.20240501-120000", "1.log.gz", "01.log",
                        "x.log", "3.log.tmp"}) {
    std::ofstream(dir.Sub(f)) << "";
  }
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(ListLogAttempts(fd.get()), (std::vector<int>{0, 2, 10}));
}

TEST(OpenContainerLogDirTest, NeverLeavesThePodsDirectory) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Sub("pods/ns_p_u/c"));
  std::filesystem::create_directories(dir.Sub("outside/c"));
  std::filesystem::create_directory_symlink(dir.Sub("outside"), dir.Sub("pods/ns_q_u"));
  UniqueFd pods(open(dir.Sub("pods").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  LogTarget t;
  t.pod_dir = "ns_p_u";
  t.container = "c";
  EXPECT_TRUE(OpenContainerLogDir(pods.get(), t).ok());
  t.pod_dir = "ns_q_u";  // a link out of pods/
  EXPECT_FALSE(OpenContainerLogDir(pods.get(), t).ok());
  t.pod_dir = "..";
  EXPECT_FALSE(OpenContainerLogDir(pods.get(), t).ok());
  t.pod_dir = "ns_p_u";
  t.container = "../../outside";
  EXPECT_FALSE(OpenContainerLogDir(pods.get(), t).ok());
}

TEST(ReadCriLogTest, ALinkInPlaceOfTheFileIsRefused) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("secret")) << "2024-05-01T12:00:00Z stdout F secret\n";
  std::filesystem::create_symlink(dir.Sub("secret"), dir.Sub("0.log"));
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::string out;
  EXPECT_FALSE(ReadCriLog(fd.get(), "0.log", {}, [&](std::string_view s) {
                 out.append(s);
                 return true;
               }).ok());
  EXPECT_EQ(out, "");
}

// What a follower has written so far, and a wait for it with a deadline.
class Collected {
 public:
  LogSink Sink() {
    return [this](std::string_view s) {
      std::lock_guard<std::mutex> lock(mu_);
      text_.append(s);
      cv_.notify_all();
      return true;
    };
  }
  bool WaitFor(const std::string& want, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return text_ == want; });
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
};

void Append(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << "2024-05-01T12:00:00Z stdout F " << line << "\n";
}

TEST(FollowCriLogTest, FollowsAppendsAndARotationAndEndsWithTheContainer) {
  testing::TempDir dir;
  const std::string log = dir.Sub("0.log");
  Append(log, "one");
  Append(log, "two");
  Append(log, "three");
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::atomic<bool> ended{false};
  Collected out;
  Status result = Internal("not run");
  LogReadOptions read;
  read.tail_lines = 2;
  std::thread follower([&] {
    FollowOptions fo;
    fo.ended = [&] { return ended.load(); };
    fo.check_interval = 50ms;
    result = FollowCriLog(fd.get(), "0.log", read, fo, out.Sink());
  });
  struct Join {
    std::thread& t;
    std::atomic<bool>& ended;
    ~Join() {
      ended = true;
      if (t.joinable()) t.join();
    }
  } join{follower, ended};

  ASSERT_TRUE(out.WaitFor("two\nthree\n")) << out.text();
  Append(log, "four");
  ASSERT_TRUE(out.WaitFor("two\nthree\nfour\n")) << out.text();
  // A rotation: the file is renamed; the runtime writes one more line to the file it has open,
  // then reopens a new 0.log.
  std::filesystem::rename(log, dir.Sub("0.log.20240501-120000"));
  Append(dir.Sub("0.log.20240501-120000"), "five");
  ASSERT_TRUE(out.WaitFor("two\nthree\nfour\nfive\n")) << out.text();
  Append(log, "six");
  ASSERT_TRUE(out.WaitFor("two\nthree\nfour\nfive\nsix\n")) << out.text();
  // A second rotation, the new file created at once.
  std::filesystem::rename(log, dir.Sub("0.log.20240501-120001"));
  Append(dir.Sub("0.log.20240501-120001"), "seven");
  Append(log, "eight");
  ASSERT_TRUE(out.WaitFor("two\nthree\nfour\nfive\nsix\nseven\neight\n")) << out.text();
  // The container's last line, then it ends: the follower reads it and returns.
  Append(log, "last");
  ended = true;
  follower.join();
  EXPECT_TRUE(result.ok()) << result.message();
  EXPECT_EQ(out.text(), "two\nthree\nfour\nfive\nsix\nseven\neight\nlast\n");
}

TEST(FollowCriLogTest, PartialOutputIsShownBeforeItsLineEnds) {
  testing::TempDir dir;
  const std::string log = dir.Sub("0.log");
  std::ofstream(log) << "2024-05-01T12:00:00Z stdout P no newline yet\n";
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::atomic<bool> ended{false};
  Collected out;
  Status result = Internal("not run");
  std::thread follower([&] {
    FollowOptions fo;
    fo.ended = [&] { return ended.load(); };
    fo.check_interval = 50ms;
    result = FollowCriLog(fd.get(), "0.log", {}, fo, out.Sink());
  });
  struct Join {
    std::thread& t;
    std::atomic<bool>& ended;
    ~Join() {
      ended = true;
      if (t.joinable()) t.join();
    }
  } join{follower, ended};
  ASSERT_TRUE(out.WaitFor("no newline yet")) << out.text();
  std::ofstream(log, std::ios::app) << "2024-05-01T12:00:01Z stdout P , still\n";
  ASSERT_TRUE(out.WaitFor("no newline yet, still")) << out.text();
  std::ofstream(log, std::ios::app) << "2024-05-01T12:00:02Z stdout F  done\n";
  ASSERT_TRUE(out.WaitFor("no newline yet, still done\n")) << out.text();
  ended = true;
  follower.join();
  EXPECT_TRUE(result.ok()) << result.message();
}

TEST(FollowCriLogTest, AnEndedContainerIsReadOnceAndNotWaitedFor) {
  testing::TempDir dir;
  Append(dir.Sub("1.log"), "bye");
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  Collected out;
  FollowOptions fo;
  fo.ended = [] { return true; };
  fo.check_interval = 10s;  // the first check is at once
  EXPECT_TRUE(FollowCriLog(fd.get(), "1.log", {}, fo, out.Sink()).ok());
  EXPECT_EQ(out.text(), "bye\n");
}

TEST(FollowCriLogTest, StopsWhenTheReaderGoesAway) {
  testing::TempDir dir;
  Append(dir.Sub("0.log"), "hello");
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  Collected out;
  Status result = Internal("not run");
  std::thread follower([&] {
    FollowOptions fo;
    fo.ended = [] { return false; };
    fo.cancel_fd = ours.get();
    result = FollowCriLog(fd.get(), "0.log", {}, fo, out.Sink());
  });
  EXPECT_TRUE(out.WaitFor("hello\n"));
  theirs.reset();   // the client closes its connection
  follower.join();  // returns well within the test's timeout
  EXPECT_TRUE(result.ok());
}

TEST(FollowCriLogTest, AMissingFileIsAnError) {
  testing::TempDir dir;
  UniqueFd fd(open(dir.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  FollowOptions fo;
  fo.ended = [] { return true; };
  EXPECT_FALSE(FollowCriLog(fd.get(), "0.log", {}, fo, [](std::string_view) { return true; }).ok());
}

}  // namespace
}  // namespace nodelet::logs

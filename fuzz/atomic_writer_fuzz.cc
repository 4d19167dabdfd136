// libFuzzer target: the configMap/secret/downwardAPI writer (svc-volumed/atomic_writer.h) over
// whatever a container could have left in its volume directory. The input first builds a
// directory state inside a private temporary directory (directories, files and links with
// names the writer cares about, links pointing out of the volume), then is read as one or two
// payloads to write. A write may succeed or fail; it must never change anything outside the
// volume directory: BASE/outer and JAIL/outside/... are sentinels, checked after every input.
//
// Layout: BASE/outer (file), BASE/jail/outside/{sentinel, sub/sentinel}, BASE/jail/vol (the
// volume). Every link target the input can choose stays within BASE, so even a broken writer
// cannot reach past it.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "svc-volumed/atomic_writer.h"

namespace {

namespace fs = std::filesystem;

struct Input {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  bool more() const { return pos < size; }
  uint8_t next() { return pos < size ? data[pos++] : 0; }
};

// Made once per process, removed at exit (never destroyed before that handler runs).
const std::string& Base() {
  static const std::string* base = [] {
    char tmpl[] = "/tmp/nodelet-aw-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) abort();
    auto* path = new std::string(tmpl);
    atexit([] {
      std::error_code ec;
      fs::remove_all(Base(), ec);
    });
    return path;
  }();
  return *base;
}

std::string Jail() { return Base() + "/jail"; }
std::string Vol() { return Jail() + "/vol"; }
std::string Outside() { return Jail() + "/outside"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Names the writer reads, writes or removes, plus ordinary ones; some are nested.
const char* const kNames[] = {"..data", "..data_tmp", "..data_1",   "..data_2",     "..data_9",
                              "a",      "b",          "d",          "..data_1/a",   "..data_1/d",
                              "d/e",    "d/e/f",      "..data_2/x", "..data_1/d/e", "..data"};
// Link targets: inside the volume, into a payload, and out (never past BASE).
const char* const kTargets[] = {"..data_1",
                                "..data_2",
                                "..data/a",
                                "a",
                                "../outside",
                                "../../outside",
                                "../outside/sub",
                                "..",
                                "../..",
                                ".",
                                "..data_1/d",
                                "d",
                                "../outside/sentinel",
                                "nowhere",
                                "..data_1/../..",
                                "../../outer"};
// Payload paths, hostile ones included.
const char* const kKeys[] = {"a",    "b",   "d/e/f", "d/g", "..data", "../a",
                             "/abs", "a/b", "c",     "..x", "e"};

void Reset() {
  std::error_code ec;
  fs::remove_all(Jail(), ec);  // links are removed, never followed
  fs::create_directories(Outside() + "/sub");
  fs::create_directories(Vol());
  std::ofstream(Outside() + "/sentinel") << "keep";
  std::ofstream(Outside() + "/sub/sentinel") << "keep";
  std::ofstream(Base() + "/outer") << "keep";
}

void Check() {
  if (ReadFile(Outside() + "/sentinel") != "keep" ||
      ReadFile(Outside() + "/sub/sentinel") != "keep" || ReadFile(Base() + "/outer") != "keep") {
    fprintf(stderr, "a sentinel outside the volume changed\n");
    abort();
  }
  size_t outside = 0, base = 0;
  for (const auto& e : fs::recursive_directory_iterator(Outside())) (void)e, ++outside;
  for (const auto& e : fs::directory_iterator(Base())) (void)e, ++base;
  if (outside != 3 || base != 2) {
    fprintf(stderr, "entries outside the volume changed: %zu in outside/, %zu in BASE\n", outside,
            base);
    abort();
  }
}

// True when every parent of `rel` under the volume is a real directory (not a link), so that
// building the state never writes through a link itself.
bool ParentsAreDirectories(const std::string& rel) {
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    struct stat st {};
    if (lstat((Vol() + "/" + rel.substr(0, slash)).c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return false;
  }
  return true;
}

void BuildState(Input& in) {
  const size_t ops = in.next() % 24;
  for (size_t i = 0; i < ops && in.more(); ++i) {
    const uint8_t op = in.next();
    const std::string rel = kNames[in.next() % std::size(kNames)];
    const std::string name = Vol() + "/" + rel;
    if (!ParentsAreDirectories(rel)) continue;
    std::error_code ec;
    switch (op % 4) {
      case 0:
        mkdir(name.c_str(), 0755);
        break;
      case 1: {
        int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
        break;
      }
      default: {
        fs::remove(name, ec);
        fs::create_symlink(kTargets[in.next() % std::size(kTargets)], name, ec);
        break;
      }
    }
  }
}

nodelet::volumed::Payload ReadPayload(Input& in) {
  nodelet::volumed::Payload p;
  const size_t n = in.next() % 6;
  for (size_t i = 0; i < n; ++i) {
    const std::string key = kKeys[in.next() % std::size(kKeys)];
    const size_t len = in.next() % 8;
    std::string content;
    for (size_t k = 0; k < len; ++k) content.push_back(static_cast<char>(in.next()));
    p[key] = {content, 0400 | (in.next() & 0377)};
  }
  return p;
}

int OpenVol() { return open(Vol().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reset();
  Input in{data, size};
  BuildState(in);
  for (int round = 0; round < 2 && in.more(); ++round) {
    auto payload = ReadPayload(in);
    int fd = OpenVol();
    if (fd < 0) abort();
    (void)nodelet::volumed::AtomicWriteAt(fd, payload, 1 + static_cast<uint64_t>(round));
    close(fd);
    Check();
    if (round == 0) BuildState(in);  // the container tampers again between updates
  }
  Check();
  return 0;
}

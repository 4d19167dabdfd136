#include "lib/common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace nodelet {
namespace {

std::mutex g_mu;
spdlog::sink_ptr g_sink;
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::sink_ptr Sink() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_sink) {
    g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    g_sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %l [%n] %v");
  }
  return g_sink;
}

// "%*" in a pattern: the sd-daemon(3) priority prefix, "<3>" for error and so on.
class SyslogPriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static const char* kPrefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
    const char* p = kPrefix[static_cast<int>(msg.level)];
    dest.append(p, p + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

}  // namespace

bool StderrIsJournal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (js == nullptr) return false;
  unsigned long dev = 0, ino = 0;
  if (std::sscanf(js, "%lu:%lu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

void InitLogging(const std::string& process_name, const std::string& level) {
  auto sink = Sink();
  if (StderrIsJournal()) {
    // journald adds its own timestamp and maps the "<N>" prefix to the entry's PRIORITY.
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<SyslogPriorityFlag>('*').set_pattern("%*[%n] %v");
    sink->set_formatter(std::move(formatter));
  }
  auto logger = std::make_shared<spdlog::logger>(process_name, sink);
  spdlog::set_default_logger(logger);
  SetLogLevel(level);
}

void SetLogLevel(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_level = lvl;
  }
  spdlog::set_level(lvl);
  spdlog::apply_all([lvl](const std::shared_ptr<spdlog::logger>& l) { l->set_level(lvl); });
}

std::shared_ptr<spdlog::logger> GetLogger(const std::string& component) {
  if (auto l = spdlog::get(component)) return l;
  auto logger = std::make_shared<spdlog::logger>(component, Sink());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    logger->set_level(g_level);
  }
  // Another thread may have registered it in between; prefer the registered one.
  try {
    spdlog::register_logger(logger);
  } catch (const spdlog::spdlog_ex&) {
    if (auto l = spdlog::get(component)) return l;
  }
  return logger;
}

}  // namespace nodelet

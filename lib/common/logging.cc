#include "lib/common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "lib/common/utf8.h"

namespace nodelet {
namespace {

std::mutex g_mu;
spdlog::sink_ptr g_sink;
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::sink_ptr Sink() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_sink) {
    g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    g_sink->set_formatter(LogFormatter("text", false));
  }
  return g_sink;
}

// "%J" in a pattern: the message as the inside of a JSON string (quotes, backslashes and control
// characters escaped, bytes that are not UTF-8 replaced: a message may quote a container's).
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static const char kHex[] = "0123456789abcdef";
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    std::string valid;
    const bool clean = IsValidUtf8(payload);
    if (!clean) valid = ValidUtf8(payload);
    for (char c : clean ? payload : std::string_view(valid)) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (c == '\n') {
        dest.append(std::string_view("\\n"));
      } else if (c == '\t') {
        dest.append(std::string_view("\\t"));
      } else if (u < 0x20 || u == 0x7f) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 15]};
        dest.append(esc, esc + sizeof esc);
      } else {
        dest.push_back(c);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

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

std::unique_ptr<spdlog::formatter> LogFormatter(const std::string& format, bool journal) {
  // UTC, with the zone said: a log read on another machine, or after a change of the local
  // zone, means the same time.
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<SyslogPriorityFlag>('*');
  formatter->add_flag<JsonMessageFlag>('J');
  const std::string prefix = journal ? "%*" : "";
  if (format == "json") {
    formatter->set_pattern(
        prefix + R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","logger":"%n","msg":"%J"})");
  } else if (journal) {
    // journald adds its own timestamp and maps the "<N>" prefix to the entry's PRIORITY.
    formatter->set_pattern("%*[%n] %v");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l [%n] %v");
  }
  return formatter;
}

void InitLogging(const std::string& process_name, const std::string& level,
                 const std::string& format) {
  auto sink = Sink();
  sink->set_formatter(LogFormatter(format, StderrIsJournal()));
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

// Logging setup shared by every nodelet binary (spdlog). One named logger per component;
// an error is logged once, by the code that handles it.
#pragma once

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace nodelet {

// Sets the default sink and level for the process. `format` "text": on stderr
// "2026-11-22T11:00:00.123Z info [plegd.relist] message" (UTC, as the Z says); "json": one
// object a line, {"ts":"2026-11-22T11:00:00.123Z","level":"info","logger":"plegd.relist",
// "msg":"message"} (the message escaped as JSON requires), for log shippers. Under systemd
// (JOURNAL_STREAM set) lines carry a "<N>" syslog priority prefix, so journald records the
// level, and text lines no timestamp (journald adds its own).
// `level` is one of trace, debug, info, warn, error, critical, off.
void InitLogging(const std::string& process_name, const std::string& level,
                 const std::string& format = "text");

// The formatter InitLogging gives the sink for `format` ("text" or "json"), with the journal's
// priority prefix when `journal`.
std::unique_ptr<spdlog::formatter> LogFormatter(const std::string& format, bool journal);

// The logger for a component, created on first use with the process-wide sinks.
std::shared_ptr<spdlog::logger> GetLogger(const std::string& component);

// Sets every logger's level (and that of those made later), as InitLogging did: a reloaded
// --log-level. An unknown name gives "off", as spdlog reads it; callers check the name first.
void SetLogLevel(const std::string& level);

// True when stderr goes to the journal (systemd sets JOURNAL_STREAM).
bool StderrIsJournal();

}  // namespace nodelet

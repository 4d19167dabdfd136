// Logging setup shared by every nodelet binary (spdlog). One named logger per component;
// an error is logged once, by the code that handles it.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace nodelet {

// Sets the default sink and level for the process. Under systemd (JOURNAL_STREAM set) lines
// carry a "<N>" syslog priority prefix and no timestamp, so journald records the level;
// otherwise "2026-11-22 11:00:00.123 info [plegd.relist] message" on stderr.
// `level` is one of trace, debug, info, warn, error, critical, off.
void InitLogging(const std::string& process_name, const std::string& level);

// The logger for a component, created on first use with the process-wide sinks.
std::shared_ptr<spdlog::logger> GetLogger(const std::string& component);

// Sets every logger's level (and that of those made later), as InitLogging did: a reloaded
// --log-level. An unknown name gives "off", as spdlog reads it; callers check the name first.
void SetLogLevel(const std::string& level);

// True when stderr goes to the journal (systemd sets JOURNAL_STREAM).
bool StderrIsJournal();

}  // namespace nodelet

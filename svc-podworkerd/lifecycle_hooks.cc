#include "svc-podworkerd/lifecycle_hooks.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/common/json_text.h"
#include "lib/common/utf8.h"
#include "svc-podworkerd/probe_manager.h"

namespace nodelet::podworkerd {
using nlohmann::json;

HookOutcome RunHook(const Clock& clock, cri::RuntimeService& runtime,
                    const pod::LifecycleHandler& hook, const pod::Container& container,
                    const std::string& container_id, const std::string& host,
                    std::chrono::milliseconds timeout) {
  const int64_t timeout_s =
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
  if (hook.exec) {
    auto r = runtime.ExecSync(container_id, hook.exec->command, timeout_s);
    if (!r.ok()) return {false, r.status().message()};
    if (r->exit_code() == 0) return {true, ""};
    // The container's own bytes: 1 KiB of them, cut on a character boundary, valid UTF-8.
    const std::string output = ValidUtf8(CutUtf8(r->stdout() + r->stderr(), 1024));
    return {false, "command '" + (hook.exec->command.empty() ? "" : hook.exec->command[0]) +
                       "' exited with " + std::to_string(r->exit_code()) + ": " + output};
  }
  if (hook.http_get) {
    ProbeOutcome r = RunHttpGet(clock, *hook.http_get, container, host, timeout);
    if (r.success) return {true, ""};
    return {false, "HTTP lifecycle hook (" + hook.http_get->path + ") for Container \"" +
                       container.name + "\" failed: " + r.message};
  }
  if (hook.sleep) {
    // The hook itself is a pause; it is cut at the deadline like every other hook.
    auto pause =
        std::min<std::chrono::milliseconds>(std::chrono::seconds(hook.sleep->seconds), timeout);
    std::this_thread::sleep_for(pause);
    return {true, ""};
  }
  return {false, "the hook has no handler"};
}

std::string EncodePreStop(const pod::Container& c) {
  if (!c.lifecycle || !c.lifecycle->pre_stop) return "";
  const pod::LifecycleHandler& h = *c.lifecycle->pre_stop;
  json j = json::object();
  if (h.exec) j["exec"]["command"] = h.exec->command;
  if (h.http_get) {
    const auto& g = *h.http_get;
    json hj;
    hj["host"] = g.host;
    // A name that matches no port is kept as the name: the hook then fails, and says why.
    auto port = ResolvePort(g.port, c);
    if (port) {
      hj["port"] = *port;
    } else {
      hj["port"] = g.port.str_value;
    }
    hj["path"] = g.path;
    hj["scheme"] = g.scheme;
    hj["httpHeaders"] = json::array();
    for (const auto& hh : g.http_headers) {
      hj["httpHeaders"].push_back({{"name", hh.name}, {"value", hh.value}});
    }
    j["httpGet"] = std::move(hj);
  }
  if (h.sleep) j["sleep"]["seconds"] = h.sleep->seconds;
  return JsonText(j);
}

std::optional<pod::LifecycleHandler> DecodePreStop(std::string_view text, std::string* error) {
  if (text.size() > kMaxPreStopAnnotationBytes) {
    if (error)
      *error = "the preStop annotation is larger than " +
               std::to_string(kMaxPreStopAnnotationBytes) + " bytes";
    return std::nullopt;
  }
  try {
    json j = json::parse(text);
    pod::LifecycleHandler h;
    if (j.contains("exec")) {
      h.exec = pod::ExecAction{j.at("exec").at("command").get<std::vector<std::string>>()};
    }
    if (j.contains("httpGet")) {
      const json& g = j.at("httpGet");
      pod::HttpGetAction a;
      a.host = g.value("host", "");
      const json& port = g.at("port");
      a.port = port.is_number_integer() ? pod::IntOrString::Int(port.get<int32_t>())
                                        : pod::IntOrString::String(port.get<std::string>());
      a.path = g.value("path", "/");
      a.scheme = g.value("scheme", pod::kSchemeHttp);
      for (const auto& hh : g.value("httpHeaders", json::array())) {
        a.http_headers.push_back({hh.at("name").get<std::string>(), hh.value("value", "")});
      }
      h.http_get = std::move(a);
    }
    if (j.contains("sleep")) h.sleep = pod::SleepAction{j.at("sleep").at("seconds").get<int64_t>()};
    if (!h.exec && !h.http_get && !h.sleep) {
      if (error) *error = "the preStop annotation names no handler";
      return std::nullopt;
    }
    return h;
  } catch (const json::exception& e) {
    if (error) *error = std::string("the preStop annotation does not parse: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace nodelet::podworkerd

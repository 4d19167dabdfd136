// bench-report: merges the JSON each benchmark wrote (bench/bench_report.h: figures and
// details) with the machine and run description into latest.json, and renders latest.md: one
// table per benchmark (figure, result, samples, reference in the same run, ratio, goal), the
// per-process footprint, and the plots. Called by bench/run.
//
//   bench-report --out DIR [--info KEY=VALUE]... [--plot FILE=CAPTION]... [--failed NAME]...
//                NAME=FILE...
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using nlohmann::json;

std::string Num(double v) {
  char buf[64];
  double a = std::fabs(v);
  if (a >= 1000)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 1)
    std::snprintf(buf, sizeof buf, "%.2f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string Result(const json& f, const std::string& unit) {
  if (f.contains("p50")) {
    return "p50 " + Num(f["p50"].get<double>()) + " / p99 " + Num(f["p99"].get<double>()) + " " +
           unit;
  }
  if (f.contains("value")) return Num(f["value"].get<double>()) + " " + unit;
  return "-";
}

// A markdown cell: no pipes, no newlines.
std::string Cell(std::string s) {
  for (auto& c : s) {
    if (c == '|' || c == '\n') c = ' ';
  }
  return s;
}

std::string Title(const std::string& bench) {
  static const std::pair<const char*, const char*> kTitles[] = {
      {"pods", "Pod startup"},
      {"events", "Event latency (container exit → status)"},
      {"pleg", "plegd alone (exit → plegd event, relist cost)"},
      {"restart", "Service restart (kill -9 → RUNNING)"},
      {"footprint", "Footprint"},
      {"ipc", "IPC"},
      {"status", "statusd"},
      {"volumes", "Volume readiness"}};
  for (const auto& [k, v] : kTitles) {
    if (bench == k) return v;
  }
  return bench;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  json info = json::object();
  std::vector<std::pair<std::string, std::string>> benches, plots;
  std::vector<std::string> failed;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto split = [](const std::string& s) {
      auto eq = s.find('=');
      return eq == std::string::npos ? std::make_pair(s, std::string())
                                     : std::make_pair(s.substr(0, eq), s.substr(eq + 1));
    };
    if (a == "--out" && i + 1 < argc)
      out_dir = argv[++i];
    else if (a == "--info" && i + 1 < argc) {
      auto [k, v] = split(argv[++i]);
      info[k] = v;
    } else if (a == "--plot" && i + 1 < argc)
      plots.push_back(split(argv[++i]));
    else if (a == "--failed" && i + 1 < argc)
      failed.push_back(argv[++i]);
    else if (a.find('=') != std::string::npos && a[0] != '-')
      benches.push_back(split(a));
    else {
      std::cerr << "usage: bench-report --out DIR [--info KEY=VALUE]... [--plot FILE=CAPTION]... "
                   "[--failed NAME]... NAME=FILE...\n";
      return 2;
    }
  }
  if (out_dir.empty()) {
    std::cerr << "bench-report: --out DIR is required\n";
    return 2;
  }

  json all;
  all["run"] = info;
  all["figures"] = json::array();
  all["details"] = json::object();
  all["failed"] = failed;
  std::vector<std::pair<std::string, json>> loaded;
  for (const auto& [name, file] : benches) {
    std::ifstream in(file);
    json j;
    try {
      j = json::parse(in);
    } catch (const std::exception& e) {
      std::cerr << "bench-report: " << file << " (" << name << "): not JSON: " << e.what() << "\n";
      all["failed"].push_back(name);
      continue;
    }
    for (auto f : j.value("figures", json::array())) {
      f["bench"] = name;
      all["figures"].push_back(f);
    }
    all["details"][name] = j.value("details", json::object());
    loaded.emplace_back(name, j);
  }
  std::ofstream(out_dir + "/latest.json") << all.dump(2) << "\n";

  auto get = [&](const char* k) { return info.value(k, std::string("?")); };
  std::ostringstream md;
  md << "# nodelet benchmarks\n\n";
  md << "Revision `" << get("git_revision") << "`, " << get("date") << ", `./dev bench"
     << (get("quick") == "1" ? " --quick" : "") << "` in " << get("duration_s") << " s.\n\n";
  md << "Machine: " << get("cores") << " cores (" << get("cpu") << "), " << get("memory_mib")
     << " MiB, kernel " << get("kernel") << ", containerd " << get("containerd") << ".  \n";
  md << "Load average (1/5/15 min) at the start " << get("loadavg_start") << ", at the end "
     << get("loadavg_end") << ": figures taken on a loaded machine are noisy.\n\n";
  md << "Each figure is paired with its reference measured in the same run; the ratio is figure "
        "over reference (p50 over p50 for distributions). Goals are aims, measured and never "
        "asserted; docs/bench.md explains every figure.\n\n";
  for (const auto& [name, j] : loaded) {
    md << "## " << Title(name) << "\n\n";
    md << "| Figure | Result | Samples | Reference (same run) | Ratio | Goal |\n";
    md << "|---|---|---|---|---|---|\n";
    for (const auto& f : j.value("figures", json::array())) {
      std::string unit = f.value("unit", "");
      std::string ref = "-";
      if (f.contains("reference")) {
        const auto& r = f["reference"];
        ref = r.value("name", "") + ": " + Result(r, unit);
      }
      std::string ratio = f.contains("ratio") ? Num(f["ratio"].get<double>()) + "x" : "-";
      std::string goal = "-";
      if (f.contains("goal")) {
        goal = f["goal"].get<std::string>();
        if (f.contains("goal_met")) goal += f["goal_met"].get<bool>() ? ": met" : ": **not met**";
      }
      std::string name_cell = f.value("name", "");
      if (f.contains("note")) name_cell += " (" + f["note"].get<std::string>() + ")";
      md << "| " << Cell(name_cell) << " | " << Cell(Result(f, unit)) << " | "
         << f.value("samples", 0) << " | " << Cell(ref) << " | " << ratio << " | " << Cell(goal)
         << " |\n";
    }
    md << "\n";
    if (name == "footprint") {
      const auto& d = j.value("details", json::object());
      md << "Per process (median PSS and RSS over the window, CPU over the window), relist "
         << d.value("relist_period", std::string("?")) << ":\n\n";
      md << "| Pods | Process | PSS MiB | RSS MiB | CPU cores |\n|---|---|---|---|---|\n";
      for (const auto& ph : d.value("phases", json::array())) {
        for (const auto& p : ph.value("processes", json::array())) {
          md << "| " << ph.value("pods", 0) << " | " << p.value("name", "") << " | "
             << Num(p.value("pss_mib", 0.0)) << " | " << Num(p.value("rss_mib", 0.0)) << " | "
             << Num(p.value("cpu_cores", 0.0)) << " |\n";
        }
        const auto& s = ph.value("sum", json::object());
        md << "| " << ph.value("pods", 0) << " | **sum** | **" << Num(s.value("pss_mib", 0.0))
           << "** | **" << Num(s.value("rss_mib", 0.0)) << "** | **"
           << Num(s.value("cpu_cores", 0.0)) << "** |\n";
      }
      md << "\n";
    }
    for (const auto& [file, caption] : plots) {
      bool mine = file.rfind(name == "pods" ? "startup" : name, 0) == 0;
      if (mine && std::filesystem::exists(out_dir + "/" + file)) {
        md << "![" << caption << "](" << file << ")\n\n";
      }
    }
  }
  if (!all["failed"].empty()) {
    md << "## Failed\n\nThese benchmarks failed in this run (their output is above it in the "
          "log):";
    for (const auto& f : all["failed"]) md << " " << f.get<std::string>();
    md << "\n\n";
  }
  md << "Reproduce: `./dev bench` (all figures, full sample counts) or `./dev bench --quick` "
        "(fewer samples, shorter windows, under 5 min); both write bench/results/.\n";
  std::ofstream(out_dir + "/latest.md") << md.str();
  std::cout << "wrote " << out_dir << "/latest.json and " << out_dir << "/latest.md\n";
  return 0;
}

// The kubelet's names for nodelet's flags and config keys, where the concept is the same: its
// command-line flag and its KubeletConfiguration (kubelet.config.k8s.io/v1beta1) field. The
// table feeds docs/flags.md (generated, tests/unit/config/flags_doc_test.cc); where the
// kubelet's flag name differs from nodelet's, the binaries accept it as an alias.
#pragma once

#include <string>

namespace nodelet {

struct KubeletName {
  const char* key;    // nodelet's key (a flag's long name without the dashes)
  const char* flag;   // the kubelet's flag, "" when it has none
  const char* field;  // the KubeletConfiguration field, "" when it has none
};

// The kubelet's name for nodelet key `key`; null when the kubelet has no such concept.
const KubeletName* KubeletNameOf(const std::string& key);

// The kubelet's --address (or `address`) and --read-only-port (`readOnlyPort`) as nodelet's
// --http-address: HOST:PORT, an IPv6 host in brackets; "" when the port is 0 (no endpoint).
std::string HttpAddressOf(const std::string& host, const std::string& port);

// klog's -v verbosity as a log level: 0 to 2 info (the kubelet's steady-state level is 2), 3 and
// 4 debug, 5 and more trace.
const char* LogLevelOfVerbosity(int verbosity);

}  // namespace nodelet

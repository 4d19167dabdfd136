// The request head of the supervisor's HTTP endpoint, as bytes from a peer give it: where the
// head ends, its request line (method, path, query, HTTP version) and the query's parameters.
// Pure functions over untrusted bytes (fuzz/http_request_fuzz.cc), apart from the server's
// sockets and threads.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace nodelet::supervisor {

struct RequestLine {
  std::string method;  // empty when the line has no space
  std::string path;    // without the query, not decoded
  std::string query;   // after the first '?', not decoded
  bool http10 = false;
};

// The length of the head in `received` up to its blank line ("\r\n\r\n", or "\n\n" from a
// client that sends bare newlines), without the blank line; npos while the head is incomplete.
size_t RequestHeadLength(std::string_view received);

// The request line of `head` (its first line): "METHOD TARGET VERSION". A line without a space
// gives an empty method, which the server answers 400.
RequestLine ParseRequestLine(std::string_view head);

// "a=1&b=x%20y+z" → {a: "1", b: "x y z"}: %XX and '+' decoded; the first of repeated keys wins;
// a '%' not followed by two hex digits stays as it is.
std::map<std::string, std::string> ParseQuery(std::string_view query);

}  // namespace nodelet::supervisor

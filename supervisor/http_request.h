// The request head of the supervisor's HTTP endpoint, read from the bytes a peer sends:
// Boost.Beast's request parser (header only, at most kMaxRequestHeadBytes) finds the head's end and
// checks its syntax; this wrapper hands the server the request line (method, path, query, HTTP
// version) and decodes the query's parameters. No sockets and no threads: the server's event loop
// feeds it, and so does the fuzz target (fuzz/http_request_fuzz.cc).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace nodelet::supervisor {

// The most bytes a request head (request line and headers) may take.
inline constexpr size_t kMaxRequestHeadBytes = 16 * 1024;

struct RequestLine {
  std::string method;
  std::string path;   // the target up to its first '?', not decoded
  std::string query;  // after the first '?', not decoded
  bool http10 = false;
};

enum class HeadStatus {
  kIncomplete,  // no error so far: more bytes are needed
  kComplete,    // line() holds the request line
  kBad,         // not an HTTP/1.0 or 1.1 request head: the server answers 400
  kTooLarge,    // kMaxRequestHeadBytes passed without the head's end: the server closes
};

// One connection's head, fed as its bytes arrive. Lines must end with CRLF; a blank line ended
// by a bare newline ("\n\n") is kBad at once rather than a head that never ends.
class RequestHeadParser {
 public:
  RequestHeadParser();
  ~RequestHeadParser();
  RequestHeadParser(const RequestHeadParser&) = delete;
  RequestHeadParser& operator=(const RequestHeadParser&) = delete;

  // `received`: every byte of the connection so far, the bytes of the last call again with the
  // new ones after them (the parser remembers how many it has taken). Once the answer is not
  // kIncomplete it stays, and `received` is not read any more. A head is too large when it, or
  // what has come of it, reaches kMaxRequestHeadBytes.
  HeadStatus Feed(std::string_view received);
  HeadStatus status() const { return status_; }
  // After kComplete: the request line.
  const RequestLine& line() const { return line_; }

 private:
  struct Beast;
  // Sets the final answer and frees the parser.
  HeadStatus Finish(HeadStatus status);

  std::unique_ptr<Beast> beast_;
  HeadStatus status_ = HeadStatus::kIncomplete;
  size_t consumed_ = 0;  // bytes the parser has taken (the request line, once whole)
  size_t scanned_ = 0;   // bytes already searched for a bare-newline blank line
  RequestLine line_;
};

// A fresh parser fed `received` once: its status, and the request line when kComplete.
HeadStatus ParseRequestHead(std::string_view received, RequestLine* line);

// "a=1&b=x%20y+z" → {a: "1", b: "x y z"}: %XX and '+' decoded; the first of repeated keys wins;
// a '%' not followed by two hex digits stays as it is.
std::map<std::string, std::string> ParseQuery(std::string_view query);

}  // namespace nodelet::supervisor

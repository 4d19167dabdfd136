// The request head's parsing for the supervisor's HTTP endpoint (http_request.h): Beast's
// request parser behind RequestHeadParser, and the query's decoding.
#include "supervisor/http_request.h"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <utility>

namespace nodelet::supervisor {

namespace http = boost::beast::http;

struct RequestHeadParser::Beast {
  http::request_parser<http::empty_body> parser;
};

namespace {

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string UnescapeQueryPart(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && HexDigitValue(s[i + 1]) >= 0 &&
               HexDigitValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexDigitValue(s[i + 1]) * 16 + HexDigitValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

RequestHeadParser::RequestHeadParser() : beast_(std::make_unique<Beast>()) {
  beast_->parser.header_limit(static_cast<std::uint32_t>(kMaxRequestHeadBytes));
  beast_->parser.eager(false);  // the head only: a body is never read
}

RequestHeadParser::~RequestHeadParser() = default;

HeadStatus RequestHeadParser::Feed(std::string_view received) {
  if (status_ != HeadStatus::kIncomplete || received.size() <= consumed_) return status_;
  // Beast takes the request line as soon as it is whole (those bytes are consumed), the headers
  // only once the blank line has come.
  boost::beast::error_code ec;
  const std::string_view rest = received.substr(consumed_);
  consumed_ += beast_->parser.put(boost::asio::const_buffer(rest.data(), rest.size()), ec);
  if (ec == http::error::need_more) {
    if (received.size() >= kMaxRequestHeadBytes) return Finish(HeadStatus::kTooLarge);
    // Beast ends lines at CRLF only: a client that ends them with bare newlines would wait for
    // the request deadline. A valid head never holds "\n\n".
    const size_t from = scanned_ == 0 ? 0 : scanned_ - 1;
    scanned_ = received.size();
    if (received.find("\n\n", from) != std::string_view::npos) return Finish(HeadStatus::kBad);
    return status_;
  }
  if (ec == http::error::header_limit || consumed_ > kMaxRequestHeadBytes) {
    return Finish(HeadStatus::kTooLarge);
  }
  if (ec || !beast_->parser.is_header_done()) return Finish(HeadStatus::kBad);
  const auto& head = beast_->parser.get();
  const std::string_view method(head.method_string().data(), head.method_string().size());
  std::string_view target(head.target().data(), head.target().size());
  line_.method = std::string(method);
  if (size_t q = target.find('?'); q != std::string_view::npos) {
    line_.query = std::string(target.substr(q + 1));
    target = target.substr(0, q);
  }
  line_.path = std::string(target);
  line_.http10 = head.version() == 10;
  return Finish(HeadStatus::kComplete);
}

HeadStatus RequestHeadParser::Finish(HeadStatus status) {
  status_ = status;
  beast_.reset();  // the parser's copy of the head is not needed any more
  return status_;
}

HeadStatus ParseRequestHead(std::string_view received, RequestLine* line) {
  RequestHeadParser parser;
  const HeadStatus status = parser.Feed(received);
  if (status == HeadStatus::kComplete && line != nullptr) *line = parser.line();
  return status;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key = UnescapeQueryPart(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : UnescapeQueryPart(pair.substr(eq + 1));
    out.emplace(std::move(key), std::move(value));  // the first of repeated keys wins
  }
  return out;
}

}  // namespace nodelet::supervisor

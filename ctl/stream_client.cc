#include "ctl/stream_client.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/common/json_text.h"

namespace nodelet::ctl {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

// How long connecting and the WebSocket handshake may take.
constexpr std::chrono::seconds kOpenTimeout{10};

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed stdout: the output is dropped, the session goes on
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// One WebSocket session to the streaming server. Every member runs on the io_context's thread.
class Channel : public std::enable_shared_from_this<Channel> {
 public:
  explicit Channel(net::io_context& io) : resolver_(io), ws_(io) {}

  // Connects and upgrades; `done` gets the error or the negotiated protocol.
  void Open(const StreamUrl& url, std::function<void(const Status&, const std::string&)> done) {
    auto self = shared_from_this();
    beast::get_lowest_layer(ws_).expires_after(kOpenTimeout);
    resolver_.async_resolve(
        url.host, url.port,
        [self, url, done](beast::error_code ec, tcp::resolver::results_type results) {
          if (ec) return done(self->Failed("resolving " + url.host, ec), "");
          beast::get_lowest_layer(self->ws_).async_connect(
              results, [self, url, done](beast::error_code ec, const tcp::endpoint&) {
                if (ec) {
                  return done(self->Failed("connecting to " + url.host + ":" + url.port, ec), "");
                }
                self->Handshake(url, done);
              });
        });
  }

  void Send(std::string frame) {
    if (ended_ || closing_) return;
    queue_.push_back(std::move(frame));
    if (!writing_) WriteNext();
  }

  // Closes once what is queued is written.
  void Close() {
    if (ended_ || closing_) return;
    closing_ = true;
    if (!writing_) CloseNow();
  }

  std::function<void(uint8_t, std::string_view)> on_message;
  // Once, when the session is over (error or close).
  std::function<void(const beast::error_code&)> on_end;

 private:
  Status Failed(const std::string& what, const beast::error_code& ec) {
    return Unavailable(what + ": " + ec.message());
  }

  void Handshake(const StreamUrl& url,
                 std::function<void(const Status&, const std::string&)> done) {
    ws_.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
      req.set(beast::http::field::sec_websocket_protocol,
              std::string(kV5ChannelProtocol) + ", " + kV4ChannelProtocol);
      req.set(beast::http::field::user_agent, "nodeletctl");
    }));
    auto self = shared_from_this();
    ws_.async_handshake(
        response_, url.host + ":" + url.port, url.target, [self, done](beast::error_code ec) {
          if (ec) {
            std::string why = ec.message();
            if (ec == websocket::error::upgrade_declined) {
              why = "the streaming server answered " +
                    std::to_string(self->response_.result_int()) + " " +
                    std::string(self->response_.reason());
              std::string body = self->response_.body();
              while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
              if (!body.empty()) why += ": " + body.substr(0, 300);
            }
            return done(Unavailable(why), "");
          }
          // From here the WebSocket keeps its own (client) timeouts: no idle
          // limit, as an interactive session may be quiet for hours.
          beast::get_lowest_layer(self->ws_).expires_never();
          self->ws_.set_option(
              websocket::stream_base::timeout::suggested(beast::role_type::client));
          self->ws_.binary(true);
          std::string protocol(self->response_[beast::http::field::sec_websocket_protocol]);
          done(Status::Ok(), protocol);
          self->Read();
        });
  }

  void Read() {
    auto self = shared_from_this();
    ws_.async_read(buffer_, [self](beast::error_code ec, std::size_t) {
      if (ec) return self->End(ec);
      std::string data = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      if (!data.empty() && self->on_message) {
        self->on_message(static_cast<uint8_t>(data[0]), std::string_view(data).substr(1));
      }
      if (!self->ended_) self->Read();
    });
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      if (closing_) CloseNow();
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    ws_.async_write(net::buffer(queue_.front()), [self](beast::error_code ec, std::size_t) {
      self->queue_.pop_front();
      if (ec) return self->End(ec);
      self->WriteNext();
    });
  }

  void CloseNow() {
    if (close_sent_ || ended_) return;
    close_sent_ = true;
    auto self = shared_from_this();
    // The pending read ends with `closed` once the server answers the close.
    ws_.async_close(websocket::close_code::normal, [self](beast::error_code ec) {
      if (ec) self->End(ec);
    });
  }

  void End(const beast::error_code& ec) {
    if (ended_) return;
    ended_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    if (on_end) on_end(ec);
  }

  tcp::resolver resolver_;
  websocket::stream<beast::tcp_stream> ws_;
  websocket::response_type response_;
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;
  bool writing_ = false, closing_ = false, close_sent_ = false, ended_ = false;
};

// The terminal on `fd` in raw mode for the life of this object.
class RawTerminal {
 public:
  explicit RawTerminal(int fd) : fd_(fd) {
    if (tcgetattr(fd_, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    active_ = tcsetattr(fd_, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(fd_, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool active_ = false;
};

std::string ResizeFrame(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return "";
  nlohmann::json size = {{"Width", ws.ws_col}, {"Height", ws.ws_row}};
  return Frame(kResize, JsonText(size));
}

// Reads `fd` on its own thread (a regular file cannot be polled) and hands each chunk to the
// loop; the end (or a read error) is an empty chunk. The thread is detached: a read blocked on a
// terminal must not keep the session from ending.
void PumpInput(std::shared_ptr<net::io_context> io, int fd,
               std::function<void(std::string)> deliver) {
  std::thread([io, fd, deliver = std::move(deliver)] {
    std::array<char, 16384> buf{};
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      std::string chunk = n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string();
      net::post(*io, [deliver, chunk] { deliver(chunk); });
      if (n <= 0) return;
    }
  }).detach();
}

}  // namespace

Result<CommandOutcome> RunRemoteCommand(const std::string& url_text,
                                        const RemoteCommandOptions& options) {
  auto url = ParseStreamUrl(url_text);
  if (!url.ok()) return url.status();
  auto io = std::make_shared<net::io_context>();
  auto channel = std::make_shared<Channel>(*io);
  std::string status_json;
  Status failure;
  int interrupted = 0;
  std::optional<RawTerminal> raw;
  net::signal_set resize(*io);
  net::signal_set stop(*io, SIGINT, SIGTERM, SIGHUP);
  // With v4, the end of stdin cannot be passed on: said once the command has gone on for a
  // while after it (a command that already read what it wanted ends before).
  net::steady_timer stdin_note(*io);

  std::function<void()> await_resize = [&] {
    resize.async_wait([&](const beast::error_code& ec, int) {
      if (ec) return;
      if (std::string frame = ResizeFrame(options.in_fd); !frame.empty()) {
        channel->Send(frame);
      }
      await_resize();
    });
  };
  channel->on_message = [&](uint8_t ch, std::string_view data) {
    if (ch == kStdout) WriteAll(options.out_fd, data);
    if (ch == kStderr) WriteAll(options.err_fd, data);
    if (ch == kErrorChannel) status_json.append(data);
  };
  channel->on_end = [&](const beast::error_code& ec) {
    if (status_json.empty() && ec && ec != websocket::error::closed && interrupted == 0) {
      failure = Unavailable("the session ended: " + ec.message());
    }
    resize.cancel();
    stop.cancel();
    stdin_note.cancel();
  };
  stop.async_wait([&](const beast::error_code& ec, int signo) {
    if (ec) return;
    interrupted = signo;
    channel->Close();
  });
  channel->Open(*url, [&](const Status& s, const std::string& protocol) {
    if (!s.ok()) {
      failure = s;
      resize.cancel();
      stop.cancel();
      return;
    }
    if (options.on_open) options.on_open(protocol);
    if (options.tty) {
      raw.emplace(options.in_fd);
      resize.add(SIGWINCH);
      if (std::string frame = ResizeFrame(options.in_fd); !frame.empty()) channel->Send(frame);
      await_resize();
    }
    if (options.stdin) {
      const bool v5 = protocol == kV5ChannelProtocol;
      const bool terminal = options.tty;
      const int err_fd = options.err_fd;
      // The handlers run only inside io->run() below, while `stdin_note` exists.
      net::steady_timer* note = &stdin_note;
      PumpInput(io, options.in_fd, [channel, v5, terminal, err_fd, note](std::string chunk) {
        if (!chunk.empty()) {
          channel->Send(Frame(kStdin, chunk));
        } else if (v5) {
          channel->Send(std::string{static_cast<char>(kCloseChannel), static_cast<char>(kStdin)});
        } else if (!terminal) {
          note->expires_after(std::chrono::seconds(2));
          note->async_wait([err_fd](const beast::error_code& ec) {
            if (ec) return;
            WriteAll(err_fd,
                     "nodeletctl: end of stdin; the runtime's streaming server speaks "
                     "v4.channel.k8s.io, which cannot pass that on: the command keeps its "
                     "stdin open\n");
          });
        }
      });
    }
  });
  io->run();
  raw.reset();
  if (!failure.ok()) return failure;
  if (interrupted != 0) {
    CommandOutcome out;
    out.exit_code = 128 + interrupted;
    out.message = "interrupted";
    return out;
  }
  if (status_json.empty()) {
    return Unavailable("the session ended without the command's exit status");
  }
  return OutcomeFromStatus(status_json);
}

namespace {

// One forwarded connection: a local socket and its session.
class Forwarded : public std::enable_shared_from_this<Forwarded> {
 public:
  Forwarded(net::io_context& io, tcp::socket socket, uint16_t remote,
            std::function<void(const std::string&)> on_error)
      : socket_(std::move(socket)),
        channel_(std::make_shared<Channel>(io)),
        remote_(remote),
        on_error_(std::move(on_error)) {}

  void Start(const StreamUrl& url) {
    auto self = shared_from_this();
    // The channel's callbacks hold this weakly (the channel is ours: no cycle); this lives while
    // its socket has an operation pending.
    std::weak_ptr<Forwarded> weak = self;
    channel_->on_message = [weak](uint8_t ch, std::string_view data) {
      auto self = weak.lock();
      if (!self) return;
      // Each channel starts with the port number (two bytes).
      size_t& skip = ch == 0 ? self->data_header_ : self->error_header_;
      size_t n = std::min(skip, data.size());
      skip -= n;
      data.remove_prefix(n);
      if (data.empty()) return;
      if (ch == 0) {
        self->ToSocket(std::string(data));
      } else if (ch == 1 && self->on_error_) {
        self->on_error_(std::string(data));
      }
    };
    channel_->on_end = [weak](const beast::error_code&) {
      auto self = weak.lock();
      if (!self) return;
      self->channel_done_ = true;
      if (!self->writing_) self->ShutdownSocket();
    };
    channel_->Open(url, [self](const Status& s, const std::string&) {
      if (!s.ok()) {
        if (self->on_error_) {
          self->on_error_("port " + std::to_string(self->remote_) + ": " + s.message());
        }
        self->ShutdownSocket();
        return;
      }
      self->ReadSocket();
    });
  }

 private:
  void ReadSocket() {
    auto self = shared_from_this();
    socket_.async_read_some(net::buffer(buf_), [self](beast::error_code ec, std::size_t n) {
      if (ec) {
        self->channel_->Close();
        return;
      }
      self->channel_->Send(Frame(0, std::string(self->buf_.data(), n)));
      self->ReadSocket();
    });
  }

  void ToSocket(std::string data) {
    out_.push_back(std::move(data));
    if (!writing_) WriteSocket();
  }

  void WriteSocket() {
    if (out_.empty()) {
      writing_ = false;
      if (channel_done_) ShutdownSocket();
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    net::async_write(socket_, net::buffer(out_.front()), [self](beast::error_code ec, std::size_t) {
      self->out_.pop_front();
      if (ec) {
        self->channel_->Close();
        self->out_.clear();
      }
      self->WriteSocket();
    });
  }

  void ShutdownSocket() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  std::shared_ptr<Channel> channel_;
  uint16_t remote_;
  std::function<void(const std::string&)> on_error_;
  std::array<char, 32768> buf_{};
  std::deque<std::string> out_;
  bool writing_ = false, channel_done_ = false;
  size_t data_header_ = 2, error_header_ = 2;
};

}  // namespace

Status RunPortForward(const PortForwardOptions& options) {
  net::io_context io;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::shared_ptr<std::function<void()>>> loops;
  Status failure;
  for (const auto& address : options.addresses) {
    beast::error_code ec;
    auto ip = net::ip::make_address(address, ec);
    if (ec) return InvalidArgument("--address " + address + ": not an IP address");
    for (const auto& pair : options.ports) {
      auto acceptor = std::make_unique<tcp::acceptor>(io);
      tcp::endpoint endpoint(ip, pair.local);
      acceptor->open(endpoint.protocol(), ec);
      if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor->bind(endpoint, ec);
      if (!ec) acceptor->listen(net::socket_base::max_listen_connections, ec);
      if (ec) {
        return Unavailable("listening on " + address + ":" + std::to_string(pair.local) + ": " +
                           ec.message());
      }
      const uint16_t local = acceptor->local_endpoint().port();
      if (options.on_listen) options.on_listen(address, local, pair.remote);
      acceptors.push_back(std::move(acceptor));
      tcp::acceptor* a = acceptors.back().get();
      const uint16_t remote = pair.remote;
      auto accept = std::make_shared<std::function<void()>>();
      *accept = [&io, a, remote, &options, accept_weak = std::weak_ptr(accept)] {
        a->async_accept(
            [&io, remote, &options, accept_weak](beast::error_code ec, tcp::socket socket) {
              if (ec) return;  // the acceptor was closed
              // A new session for every connection.
              auto url = options.open_url ? options.open_url(remote)
                                          : Result<std::string>(Unavailable("no session source"));
              auto parsed = url.ok() ? ParseStreamUrl(*url) : Result<StreamUrl>(url.status());
              if (!parsed.ok()) {
                if (options.on_error) options.on_error(parsed.status().message());
                beast::error_code ignored;
                socket.close(ignored);
              } else {
                std::make_shared<Forwarded>(io, std::move(socket), remote, options.on_error)
                    ->Start(*parsed);
              }
              if (auto again = accept_weak.lock()) (*again)();
            });
      };
      // The accept loops live as long as the run (their handlers hold them only weakly).
      loops.push_back(accept);
      (*accept)();
    }
  }
  net::steady_timer tick(io);
  std::function<void()> check = [&] {
    tick.expires_after(std::chrono::milliseconds(200));
    tick.async_wait([&](const beast::error_code& ec) {
      if (ec) return;
      if (options.stop && options.stop()) {
        io.stop();
        return;
      }
      check();
    });
  };
  check();
  io.run();
  return failure;
}

}  // namespace nodelet::ctl

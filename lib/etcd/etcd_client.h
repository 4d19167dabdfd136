// etcd::Client: nodelet's client of an etcd v3 cluster (gRPC, lib/etcd/etcd.proto), for taking
// pods from etcd and writing statuses back (fleet mode, docs/etcd.md).
//
// Every call has a deadline (ClientOptions::timeout) and fails over between the members: one
// gRPC channel per endpoint; an attempt that meets a member that is down, has no leader, or
// hangs past ClientOptions::attempt_timeout moves on to the next member until the call's
// deadline. While the cluster has no leader a write fails with kUnavailable when the deadline
// comes; it never hangs. Errors name the call, the key, the member and etcd's own message; auth
// denial is kPermissionDenied, a compacted revision kOutOfRange (IsCompacted).
//
// Thread-safe: calls may come from any number of threads. A Watch belongs to one thread, but
// for Watch::Cancel.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/etcd/etcd_rules.h"

namespace nodelet::etcd {

struct ClientOptions {
  // "http://127.0.0.1:2379", "https://host:port", or "host:port" (TLS when any TLS file is
  // given). At least one.
  std::vector<std::string> endpoints;
  // Client TLS, PEM files: the CA that signed the members' certificates (empty: the system's
  // roots), and this client's certificate and key (both or neither; with etcd's
  // --client-cert-auth, the certificate's CN is the etcd user when no password is given).
  std::string ca_file, cert_file, key_file;
  // etcd auth by password: the client authenticates once, sends the token (metadata "token")
  // with every call, and authenticates again when a member refuses the token.
  std::string username, password;
  // The deadline of one call, failover included.
  std::chrono::milliseconds timeout{5000};
  // The longest one member is given within a call before the next one is tried: a member
  // that accepted the request but cannot commit it (its leader just died) is left in time.
  std::chrono::milliseconds attempt_timeout{2000};
  // The longest a call waits for its connection to one member (a member that is down costs
  // this once: the client then starts its calls at the next member).
  std::chrono::milliseconds connect_timeout{500};
  // Keys per Range request of GetPrefix (a large prefix is read page by page at one revision).
  int64_t page_size = 1000;
};

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // in key order
  int64_t revision = 0;       // the store revision the read saw: watch from revision + 1
};

// One member's view, from Maintenance.Status.
struct MemberStatus {
  std::string endpoint;
  uint64_t member_id = 0;
  uint64_t leader_id = 0;  // 0: the member knows of no leader
  int64_t revision = 0;
  uint64_t raft_term = 0;
  std::string version;  // etcd's ("3.4.23")
  bool is_leader() const { return member_id != 0 && member_id == leader_id; }
};

enum class Permission { kRead, kWrite, kReadWrite };

struct LeaseInfo {
  int64_t ttl = -1;  // seconds left; -1: expired or never existed
  int64_t granted_ttl = 0;
};

class Watch;

class Client {
 public:
  // Validates the options and reads the TLS files; builds the channels without connecting (the
  // first call does). `clock` measures the calls' deadlines and must move in real time
  // (RealClock): gRPC waits in real time.
  static Result<std::unique_ptr<Client>> Connect(ClientOptions options, const Clock& clock);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const;

  // The key, or no kvs when it does not exist.
  Result<RangeResult> Get(const std::string& key);
  // Every key that starts with `prefix`, in key order, read page by page (page_size keys, one
  // call each) at one revision: the first page's, or `revision` when > 0. A revision that was
  // compacted (also between two pages) is kOutOfRange (IsCompacted): list again at 0.
  Result<RangeResult> GetPrefix(const std::string& prefix, int64_t revision = 0);
  // Writes the key (attached to `lease` when non-zero); returns the revision of the write.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Deletes the key (deleting a missing key is not an error); returns the store's revision.
  Result<int64_t> Delete(const std::string& key);
  // Deletes every key under `prefix` (an empty prefix is refused); returns the revision.
  Result<int64_t> DeletePrefix(const std::string& prefix);
  // Compare-and-swap on mod_revision: writes only if the key's mod_revision is
  // `expected_mod_revision` (0: the key must not exist). True if written; false if the compare
  // failed, and then `current`, when given, holds the key as it is (nullopt: it does not exist).
  // Never repeated after an attempt that may have been applied: such a failure is kUnavailable
  // saying the outcome is unknown (read the key again).
  Result<bool> PutIf(const std::string& key, const std::string& value,
                     int64_t expected_mod_revision, int64_t lease = 0,
                     std::optional<KeyValue>* current = nullptr);
  // Deletes the key only if its mod_revision is `expected_mod_revision`; as PutIf.
  Result<bool> DeleteIf(const std::string& key, int64_t expected_mod_revision);
  // Drops the history before `revision` (reads and watches below it become kOutOfRange).
  // Returns the store's revision. Like PutIf, not repeated after an attempt that may have been
  // applied.
  Result<int64_t> Compact(int64_t revision);

  // A lease of `ttl_seconds` (`id` 0: etcd picks the id); returns its id.
  Result<int64_t> GrantLease(int64_t ttl_seconds, int64_t id = 0);
  // Renews the lease once; returns its TTL. kNotFound when it already expired.
  Result<int64_t> KeepAliveOnce(int64_t lease);
  // Seconds the lease has left; -1 when it expired or never existed.
  Result<int64_t> LeaseTimeToLive(int64_t lease);
  // Its seconds left (-1 as above) and the TTL it was granted: its age since the last renewal
  // is granted_ttl - ttl.
  Result<LeaseInfo> GetLeaseInfo(int64_t lease);
  // Ends the lease and deletes its keys. kNotFound when it does not exist (also when an attempt
  // of this same call that seemed to fail had ended it).
  Status RevokeLease(int64_t lease);

  // The view of the member at `endpoint` (one of options().endpoints), without failover.
  Result<MemberStatus> GetMemberStatus(const std::string& endpoint);

  // Watches every key under `prefix` from `start_revision` (0: from now on). Returns once the
  // member has created the watch, trying the members in turn within the call's deadline; the
  // stream then stays open until the Watch is cancelled or destroyed. A start revision that
  // was compacted is reported by the first Batch (compacted). The stream asks for a member with
  // a leader ("hasleader"): a member that loses its leader ends the stream instead of going
  // silent.
  Result<std::unique_ptr<Watch>> WatchPrefix(const std::string& prefix, int64_t start_revision);
  // The key alone, as WatchPrefix otherwise (a role granted that one key may watch it).
  Result<std::unique_ptr<Watch>> WatchKey(const std::string& key, int64_t start_revision);

  // Administration, for tests and the docs' setup steps. AddUser with an empty password adds a
  // user that cannot log in by password (a client certificate's CN names it). A user or role
  // that exists already is kAlreadyExists.
  Status EnableAuth();
  Status AddUser(const std::string& name, const std::string& password);
  Status AddRole(const std::string& role);
  // Grants `role` `permission` on [key, range_end) (range_end empty: the key alone;
  // PrefixRangeEnd(key): the prefix).
  Status GrantPermission(const std::string& role, const std::string& key,
                         const std::string& range_end, Permission permission);
  Status GrantRole(const std::string& user, const std::string& role);

  struct Shared;  // the channels, the token and the current member; shared with each Watch

 private:
  // [key, range_end) from start_revision; range_end empty: the key alone.
  Result<std::unique_ptr<Watch>> WatchRange(const std::string& key, const std::string& range_end,
                                            int64_t start_revision);
  explicit Client(std::shared_ptr<Shared> shared);
  std::shared_ptr<Shared> shared_;
};

// One watch on its own stream. Next is called from one thread; Cancel from any.
class Watch {
 public:
  struct Event {
    enum class Type { kPut, kDelete } type = Type::kPut;
    KeyValue kv;  // for kDelete: the key and the deletion's mod_revision
  };
  struct Batch {
    std::vector<Event> events;  // in revision order
    // Every change up to this revision has been delivered (the last event's mod_revision, or
    // the progress a batch without events reports): resume from revision + 1.
    int64_t revision = 0;
    // The watch's start revision was compacted: nothing more comes; list again and watch from
    // the list's revision + 1. compact_revision is the oldest revision left.
    bool compacted = false;
    int64_t compact_revision = 0;
  };

  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // The next batch within `timeout`. kDeadlineExceeded when none came (the watch stays
  // usable); kUnavailable when the stream broke (watch again from the last revision + 1: the
  // client starts at another member); kPermissionDenied when etcd ended the watch for want of
  // permission; kCancelled after Cancel; kFailedPrecondition after the compacted batch. Once
  // the watch is over, every later call returns the same error.
  Result<Batch> Next(std::chrono::milliseconds timeout);
  // Ends the stream; a Next blocked in another thread returns kCancelled at once.
  void Cancel();
  // The member the watch runs on.
  const std::string& endpoint() const;

  struct Stream;  // the gRPC stream and its reader thread

 private:
  friend class Client;
  explicit Watch(std::shared_ptr<Stream> stream);
  std::shared_ptr<Stream> stream_;
  // Once the watch is over (compacted, broken, refused): what every later Next returns.
  std::optional<Status> over_;
};

}  // namespace nodelet::etcd

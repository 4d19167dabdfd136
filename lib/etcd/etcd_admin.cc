// etcd::Client's calls that only the tests and the docs' setup steps make: one member's status
// (Maintenance.Status, on that member alone, without failover) and the auth administration
// (enable auth, add users and roles, grant permissions and roles).
#include <string>

#include "lib/etcd/etcd.grpc.pb.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/etcd_client_private.h"
#include "lib/etcd/etcd_rules.h"

namespace nodelet::etcd {

Result<MemberStatus> Client::GetMemberStatus(const std::string& endpoint) {
  Conn* conn = nullptr;
  for (auto& c : shared_->conns) {
    if (c.endpoint.url == endpoint || c.endpoint.target == endpoint) conn = &c;
  }
  if (conn == nullptr) {
    return InvalidArgument("etcd Status: '" + endpoint + "' is not one of the client's endpoints");
  }
  // One member, no failover, and no "hasleader": a member without a leader answers too.
  CallSpec spec{"Status", "", true, true, /*need_leader=*/false};
  auto token = shared_->Token(shared_->clock.Now() + shared_->options.timeout);
  if (!token.ok()) return token.status();
  const MonoTime deadline = shared_->clock.Now() + shared_->options.timeout;
  const grpc_connectivity_state state =
      shared_->Connect(*conn, TimeUntil(shared_->clock, deadline));
  pb::StatusRequest request;
  pb::StatusResponse response;
  grpc::Status s = Shared::NotConnected(shared_->options.timeout);
  if (state == GRPC_CHANNEL_READY || state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::ClientContext context;
    context.set_deadline(RelativeDeadline(CeilMillis(TimeUntil(shared_->clock, deadline))));
    shared_->Prepare(&context, spec, *token);
    s = conn->maintenance->Status(&context, request, &response);
  }
  if (!s.ok()) {
    const ErrorClass error = ClassifyError(s.error_code(), s.error_message());
    if (error.stale_token) shared_->DropToken(*token);
    return Status(error.code, shared_->Describe(spec, *conn, s));
  }
  MemberStatus out;
  out.endpoint = conn->endpoint.url;
  out.member_id = response.header().member_id();
  out.leader_id = response.leader();
  out.revision = response.header().revision();
  out.raft_term = response.raftterm();
  out.version = response.version();
  return out;
}

Status Client::EnableAuth() {
  pb::AuthEnableRequest request;
  pb::AuthEnableResponse response;
  return shared_->Run({"AuthEnable", ""}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->AuthEnable(ctx, request, &response);
  });
}

Status Client::AddUser(const std::string& name, const std::string& password) {
  pb::AuthUserAddRequest request;
  request.set_name(name);
  request.set_password(password);
  request.mutable_options()->set_no_password(password.empty());
  pb::AuthUserAddResponse response;
  return shared_->Run({"UserAdd", name}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->UserAdd(ctx, request, &response);
  });
}

Status Client::AddRole(const std::string& role) {
  pb::AuthRoleAddRequest request;
  request.set_name(role);
  pb::AuthRoleAddResponse response;
  return shared_->Run({"RoleAdd", role}, [&](Conn& c, grpc::ClientContext* ctx) {
    return c.auth->RoleAdd(ctx, request, &response);
  });
}

Status Client::GrantPermission(const std::string& role, const std::string& key,
                               const std::string& range_end, Permission permission) {
  pb::AuthRoleGrantPermissionRequest request;
  request.set_name(role);
  auto* perm = request.mutable_perm();
  perm->set_key(key);
  perm->set_range_end(range_end);
  switch (permission) {
    case Permission::kRead:
      perm->set_permtype(pb::Permission::READ);
      break;
    case Permission::kWrite:
      perm->set_permtype(pb::Permission::WRITE);
      break;
    case Permission::kReadWrite:
      perm->set_permtype(pb::Permission::READWRITE);
      break;
  }
  pb::AuthRoleGrantPermissionResponse response;
  return shared_->Run({"RoleGrantPermission", role + " on " + key},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.auth->RoleGrantPermission(ctx, request, &response);
                      });
}

Status Client::GrantRole(const std::string& user, const std::string& role) {
  pb::AuthUserGrantRoleRequest request;
  request.set_user(user);
  request.set_role(role);
  pb::AuthUserGrantRoleResponse response;
  return shared_->Run({"UserGrantRole", user + " -> " + role},
                      [&](Conn& c, grpc::ClientContext* ctx) {
                        return c.auth->UserGrantRole(ctx, request, &response);
                      });
}

}  // namespace nodelet::etcd

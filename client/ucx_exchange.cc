#include "client/ucx_exchange.h"

#include <array>
#include <map>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/ucx/piece_mac.h"
#include "core/ucx/piece_transfers.h"
#include "core/ucx/transfer_set.h"
#include "core/ucx/ucx_worker.h"
#include "core/wire/protocol.h"

namespace farcall::client_internal {
namespace {

static_assert(std::is_same_v<std::array<uint8_t, 24>, ucx::ReadyBytes>);

// The handler ran (and its effects stand); what came back is not its.
absl::Status ResultsFailedTheirCheck(const absl::Status& s) {
  return absl::DataLossError(
      absl::StrCat(s.message(), " The handler ran; its results did not reach this caller."));
}

}  // namespace

bool UcxBuiltIn() { return true; }

absl::StatusOr<ucx::Worker*> ProcessUcxWorker(const std::string& transports) {
  static absl::Mutex mu(absl::kConstInit);
  // Never freed: calls of any Client may use it until the process ends.
  static auto* workers = new std::map<std::string, ucx::Worker*>();
  absl::MutexLock l(&mu);
  auto it = workers->find(transports);
  if (it != workers->end()) return it->second;
  ucx::Worker::Options o;
  o.transports = transports;
  // Agents send only what the client asked for (results, ready): anything
  // else, such as a cancelled call's late results, is thrown away.
  o.discard_unexpected = true;
  absl::StatusOr<std::unique_ptr<ucx::Worker>> w = ucx::Worker::Create(o);
  if (!w.ok()) return w.status();
  ucx::Worker* raw = w->release();
  workers->emplace(transports, raw);
  return raw;
}

std::shared_ptr<UcxExchange> UcxExchange::Start(ucx::Worker& worker, PreparedCall& call,
                                                const std::string& agent_address,
                                                const std::vector<uint8_t*>& result_data,
                                                std::function<void()> on_failure) {
  auto ex = std::make_shared<UcxExchange>();
  const uint64_t tag = ucx::NewCallTag();
  const std::string key = ucx::NewMacKey();
  v1::UcxTensors* u = call.header.mutable_ucx();
  u->set_worker_address(worker.address());
  u->set_tag(tag);
  u->set_key(key);
  ex->set_ =
      ucx::TransferSet::Create(worker, [on_failure = std::move(on_failure)](const absl::Status& s) {
        if (!s.ok() && !absl::IsCancelled(s)) on_failure();
      });
  ucx::TransferSet& set = *ex->set_;
  ucx::ReceivePieces(set, key, tag, ucx::Carries::kResult,
                     ucx::PiecesOf(call.validated.result_bytes), result_data);
  // The args go once the agent has posted their receives, under the tag it
  // names. Their MACs are computed here, not on the worker's thread. `call`
  // outlives the exchange's transfers (Conclude waits for them).
  std::vector<ucx::Piece> args = ucx::PiecesOf(call.validated.arg_bytes);
  std::vector<const uint8_t*> arg_data;
  for (const Arg& a : call.args) arg_data.push_back(a.data());
  auto macs = ucx::MacListOf(key, ucx::Carries::kArg, args, arg_data);
  UcxExchange* e = ex.get();  // outlives its set's transfers
  set.AddReceive(ucx::TagOf(tag, ucx::Carries::kReady, 0), ex->ready_.data(), ucx::kReadyBytes,
                 [e, key, agent_address, args = std::move(args), arg_data = std::move(arg_data),
                  macs = std::move(macs)](const absl::Status& st) {
                   if (!st.ok()) return;
                   absl::StatusOr<uint64_t> agent_tag = ucx::ReadReady(key, e->ready_);
                   if (agent_tag.ok()) e->args_asked_ = true;
                   if (!agent_tag.ok()) {
                     e->args_failed_ = true;
                     return e->set_->Fail(agent_tag.status());
                   }
                   ucx::SendPieces(*e->set_, agent_address, *agent_tag, ucx::Carries::kArg, args,
                                   arg_data, macs, [e](const absl::Status& sent) {
                                     if (!sent.ok() && !absl::IsCancelled(sent)) {
                                       e->args_failed_ = true;
                                     }
                                   });
                 });
  set.Seal();
  // The receives are posted before the header leaves: nothing the agent
  // sends can arrive unasked (and be thrown away).
  worker.Flush();
  return ex;
}

absl::StatusOr<CallResult> UcxExchange::Conclude(absl::StatusOr<CallResult> rpc,
                                                 absl::Time deadline) {
  if (rpc.ok()) {
    absl::Status s = set_->Wait(deadline);
    if (ucx::IsIntegrityFailure(s)) return ResultsFailedTheirCheck(s);
    if (!s.ok()) return s;
    rpc->transport = Transport::kUcx;
    return rpc;
  }
  set_->Cancel();
  absl::Status s = set_->Wait(absl::InfiniteFuture());
  // The RPC was cancelled here because a transfer failed: that is why.
  if (absl::IsCancelled(rpc.status()) && !s.ok() && !absl::IsCancelled(s)) {
    if (ucx::IsIntegrityFailure(s) && !args_failed_) return ResultsFailedTheirCheck(s);
    if (args_failed_) {
      return absl::UnavailableError(
          absl::StrCat(kUcxInputsFailed, " (", s.message(), "); the handler did not run."));
    }
    return absl::UnavailableError(
        absl::StrCat("ucx: the call's results did not arrive (", s.message(), ")."));
  }
  return rpc;
}

}  // namespace farcall::client_internal

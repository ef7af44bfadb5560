#include "client/ucx_exchange.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/wire/protocol.h"

namespace farcall::client_internal {

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
  v1::UcxTensors* u = call.header.mutable_ucx();
  u->set_worker_address(worker.address());
  u->set_tag(tag);
  ex->set_ =
      ucx::TransferSet::Create(worker, [on_failure = std::move(on_failure)](const absl::Status& s) {
        if (!s.ok() && !absl::IsCancelled(s)) on_failure();
      });
  ucx::TransferSet& set = *ex->set_;
  const std::vector<ucx::Piece> results = ucx::PiecesOf(call.validated.result_bytes);
  for (size_t k = 0; k < results.size(); ++k) {
    const ucx::Piece& p = results[k];
    set.AddReceive(ucx::TagOf(tag, ucx::Carries::kResult, k), result_data[p.tensor] + p.offset,
                   p.size);
  }
  // The args go once the agent has posted their receives. `call` outlives
  // the exchange's transfers (Conclude waits for them).
  std::vector<ucx::Piece> args = ucx::PiecesOf(call.validated.arg_bytes);
  std::vector<const uint8_t*> arg_data;
  for (const Arg& a : call.args) arg_data.push_back(a.data());
  UcxExchange* e = ex.get();  // outlives its set's transfers
  set.AddReceive(ucx::TagOf(tag, ucx::Carries::kReady, 0), &ex->ready_, 1,
                 [e, tag, agent_address, args = std::move(args),
                  arg_data = std::move(arg_data)](const absl::Status& st) {
                   if (!st.ok()) return;
                   for (size_t k = 0; k < args.size(); ++k) {
                     const ucx::Piece& p = args[k];
                     e->set_->AddSend(agent_address, ucx::TagOf(tag, ucx::Carries::kArg, k),
                                      arg_data[p.tensor] + p.offset, p.size,
                                      [e](const absl::Status& sent) {
                                        if (!sent.ok() && !absl::IsCancelled(sent)) {
                                          e->args_failed_ = true;
                                        }
                                      });
                   }
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
    if (!s.ok()) return s;
    rpc->transport = Transport::kUcx;
    return rpc;
  }
  set_->Cancel();
  absl::Status s = set_->Wait(absl::InfiniteFuture());
  // The RPC was cancelled here because a transfer failed: that is why.
  if (absl::IsCancelled(rpc.status()) && !s.ok() && !absl::IsCancelled(s)) {
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

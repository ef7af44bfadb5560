// The calls a server has in flight, so that a drain that runs out ends each
// one itself, with the status contract's answer (DrainCutError in
// core/wire/grpc_server.h, reason DRAIN_CUT), before gRPC's shutdown cancels
// what is left with its own "Cancelling all calls".
//
//   class MyReactor : public grpc::ServerUnaryReactor, public LiveCalls::Call { ... };
//   live.Add(this);          // when the call starts
//   live.Remove(this);       // in OnDone, before the reactor may go
//   live.CutAll(DrainCutAnswers("agent", drain));   // the drain ran out
//
// Thread safety: every method may be called from any thread; CutAll holds
// each call (Hold/Release) while it cuts it, outside the lock.
#ifndef FARCALL_CORE_LIVE_CALLS_H_
#define FARCALL_CORE_LIVE_CALLS_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace farcall {

class LiveCalls {
 public:
  // What a drain that ran out answers: a call whose handler may have run
  // (reason DRAIN_CUT: only a call without side effects is sent again), and
  // one that certainly had not reached it (the draining reason: its caller
  // sends it elsewhere, side effects or not).
  struct Answers {
    absl::Status may_have_run;
    absl::Status did_not_run;
  };
  class Call {
   public:
    // Ends the call with the answer that fits it: at once, or as soon as
    // what it waits for lets it; a call past the point of answering is
    // left to end.
    virtual void CutByDrain(const Answers& answers) = 0;
    // The call's own reference count, held while it is cut.
    virtual void Hold() = 0;
    virtual void Release() = 0;

   protected:
    ~Call() = default;
  };

  void Add(Call* call) {
    absl::MutexLock l(&mu_);
    calls_.insert(call);
  }
  void Remove(Call* call) {
    absl::MutexLock l(&mu_);
    calls_.erase(call);
  }
  void CutAll(const Answers& answers) {
    std::vector<Call*> calls;
    {
      absl::MutexLock l(&mu_);
      for (Call* c : calls_) {
        c->Hold();
        calls.push_back(c);
      }
    }
    for (Call* c : calls) {
      c->CutByDrain(answers);
      c->Release();
    }
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<Call*> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farcall

#endif  // FARCALL_CORE_LIVE_CALLS_H_

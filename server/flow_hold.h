// One flow's hold on a client stream that a server reactor forwards to
// (grpc::ClientBidiReactor's AddHold/RemoveHold). The router's
// ForwardingExecute holds its agent stream open with two: the write flow
// (the caller's frames going to the agent) and the read flow (the agent's
// frames going back). Several threads may end a flow (the caller half-closes,
// the agent ends its stream, a write fails), and the hold must go exactly
// once, or gRPC never calls OnDone (once too few) or aborts (once too many).
//
//   FlowHold<Stream> writes, reads;
//   writes.Take(stream); reads.Take(stream);   // before stream->StartCall()
//   ...
//   reads.Release();                           // any thread; the first one counts
//   if (writes.Claim()) {                      // the end is this thread's
//     stream->StartWritesDone();
//     stream->RemoveHold();
//   }
//
// Thread safety: Release and Claim may race from any threads.
#ifndef FARCALL_SERVER_FLOW_HOLD_H_
#define FARCALL_SERVER_FLOW_HOLD_H_

#include <atomic>

namespace farcall::router {

template <typename Stream>
class FlowHold {
 public:
  // Puts the hold on `stream`, before the stream starts.
  void Take(Stream* stream) {
    stream_ = stream;
    held_.store(true, std::memory_order_release);
    stream->AddHold();
  }
  // Ends the flow: removes the hold unless it was released or claimed
  // already. True when this call removed it.
  bool Release() {
    if (!Claim()) return false;
    stream_->RemoveHold();
    return true;
  }
  // Takes the flow's end upon the caller, which then removes the hold itself
  // (stream->RemoveHold()) once it has started what the hold must cover,
  // such as the last write. True for the first of Claim and Release only.
  bool Claim() { return held_.exchange(false, std::memory_order_acq_rel); }
  bool held() const { return held_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> held_{false};
  Stream* stream_ = nullptr;
};

}  // namespace farcall::router

#endif  // FARCALL_SERVER_FLOW_HOLD_H_

// A base for objects whose lifetime ends when the last of several owners is
// done, such as a gRPC reactor that a worker still uses after OnDone().
// Starts with one reference; Unref() deletes on the last one.
#ifndef FARCALL_CORE_REF_COUNTED_H_
#define FARCALL_CORE_REF_COUNTED_H_

#include <atomic>

namespace farcall {

class RefCounted {
 public:
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  RefCounted() = default;
  virtual ~RefCounted() = default;

 private:
  std::atomic<int> refs_{1};
};

}  // namespace farcall

#endif  // FARCALL_CORE_REF_COUNTED_H_

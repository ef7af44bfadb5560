#include "device_agents/resident_store.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/error_reason.h"
#include "core/resident_handle.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

class HostBytes final : public DeviceMemory {
 public:
  explicit HostBytes(int64_t n) : bytes_(static_cast<size_t>(n)) {}
  void* device_ptr() override { return bytes_.data(); }
  uint8_t* host_ptr() override { return bytes_.data(); }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr char kAgent[] = "cpu-agent-1";

ResidentStore::Options Small(absl::Time* now = nullptr) {
  ResidentStore::Options o;
  if (now != nullptr) o.clock = [now] { return *now; };
  o.max_bytes = 1000;
  o.max_bytes_per_principal = 600;
  o.max_count = 4;
  o.default_ttl = absl::Seconds(30);
  o.reap_every = absl::Hours(1);  // the tests expire by hand
  return o;
}

// A resident of `bytes` for `principal`, as a call keeps one: reserved,
// admitted, kept.
std::string KeepOne(ResidentStore& store, Admission& admission, const std::string& principal,
                    int64_t bytes) {
  EXPECT_TRUE(store.Reserve(principal, bytes, 1).ok());
  EXPECT_TRUE(admission.TryAcquire(bytes, {principal, 0}));
  return store.Keep(principal, principal, TensorSpec{DType::kU8, {bytes}}, bytes,
                    std::make_shared<HostBytes>(bytes), nullptr, absl::Seconds(30), kAgent);
}

TEST(ResidentStoreTest, KeptBytesStayInTheBudgetUntilReleased) {
  Admission admission(10000);
  ResidentStore store(Small(), &admission);
  const std::string h = KeepOne(store, admission, "alice", 100);
  EXPECT_EQ(store.bytes(), 100);
  EXPECT_EQ(store.count(), 1);
  EXPECT_EQ(admission.held(), 100);
  EXPECT_EQ(admission.held("alice"), 0);  // out of the caller's in-flight quota
  store.Release(h);
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_EQ(admission.held(), 0);
}

TEST(ResidentStoreTest, AnotherPrincipalGetsTheSameAnswerAsAnUnknownHandle) {
  Admission admission(10000);
  ResidentStore store(Small(), &admission);
  const std::string h = KeepOne(store, admission, "alice", 8);
  ASSERT_TRUE(store.Find(h, "alice", kAgent, "args[0]").ok());
  absl::StatusOr<std::shared_ptr<ResidentArray>> other = store.Find(h, "bob", kAgent, "args[0]");
  std::string unknown = h;
  unknown[4] = unknown[4] == 'a' ? 'b' : 'a';  // another secret
  absl::StatusOr<std::shared_ptr<ResidentArray>> none =
      store.Find(unknown, "alice", kAgent, "args[0]");
  ASSERT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  // The same words, but for the handle's own short form.
  EXPECT_EQ(std::string(other.status().message()).substr(30),
            std::string(none.status().message()).substr(30));
  EXPECT_EQ(ReasonOf(other.status()), ErrorReason::kUnspecified);
  EXPECT_EQ(other.status().message().find(h), absl::string_view::npos);  // never the whole handle
}

TEST(ResidentStoreTest, AHandleFromAnEarlierRunIsLost) {
  Admission admission(10000);
  std::string old;
  {
    ResidentStore first(Small(), &admission);
    old = KeepOne(first, admission, "alice", 8);
  }
  EXPECT_EQ(admission.held(), 0);  // a store that goes frees its bytes
  ResidentStore second(Small(), &admission);
  absl::StatusOr<std::shared_ptr<ResidentArray>> r = second.Find(old, "alice", kAgent, "args[0]");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReasonOf(r.status()), ErrorReason::kResidentLost);
}

TEST(ResidentStoreTest, AnotherAgentsHandleIsSentThere) {
  Admission admission(10000);
  ResidentStore store(Small(), &admission);
  const std::string h = NewResidentHandle(store.boot(), "cpu-agent-2");
  absl::StatusOr<std::shared_ptr<ResidentArray>> r = store.Find(h, "", kAgent, "args[1]");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cpu-agent-2"), absl::string_view::npos);
  EXPECT_EQ(store.Find("res-forged", "", kAgent, "args[1]").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResidentStoreTest, QuotasAreCheckedBeforeAnyMemory) {
  Admission admission(10000);
  ResidentStore store(Small(), &admission);
  absl::Status s = store.Reserve("alice", 601, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--resident_bytes_per_principal=600"), absl::string_view::npos);
  KeepOne(store, admission, "alice", 500);
  KeepOne(store, admission, "bob", 400);
  s = store.Reserve("carol", 200, 1);  // 900 + 200 > 1000 in all
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--resident_bytes=1000"), absl::string_view::npos);
  KeepOne(store, admission, "carol", 10);
  KeepOne(store, admission, "carol", 10);
  s = store.Reserve("carol", 1, 1);  // a fifth resident
  EXPECT_NE(s.message().find("--resident_max_count=4"), absl::string_view::npos);
  store.Unreserve("nobody", 5, 1);  // harmless
}

// Residents leave a tenant's in-flight quota: without a resident quota of
// its own, a tenant held to one may keep no more than it.
TEST(ResidentStoreTest, ATenantsInFlightQuotaBoundsItsResidents) {
  Admission admission(10000);
  ResidentStore::Options o = Small();
  o.max_bytes_per_principal = 0;
  ResidentStore store(o, &admission);
  EXPECT_TRUE(store.Reserve("alice", 300, 1, 500, "--tenant_max_bytes").ok());
  absl::Status s = store.Reserve("alice", 300, 1, 500, "--tenant_max_bytes");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--tenant_max_bytes=500"), absl::string_view::npos);
  EXPECT_TRUE(store.Reserve("bob", 600, 1).ok());  // no quota: --resident_bytes
}

TEST(ResidentStoreTest, UseRenewsTheTtlAndExpiryFrees) {
  Admission admission(10000);
  absl::Time now = absl::FromUnixSeconds(1000);
  ResidentStore store(Small(&now), &admission);
  const std::string h = KeepOne(store, admission, "alice", 8);  // until 1030
  now += absl::Seconds(20);
  store.Expire();
  ASSERT_TRUE(store.Find(h, "alice", kAgent, "args[0]").ok());  // until 1050
  now += absl::Seconds(15);
  store.Expire();
  EXPECT_EQ(store.count(), 1);  // 35 s after it was made, but used since
  now += absl::Seconds(15);
  store.Expire();
  EXPECT_EQ(store.count(), 0);
  EXPECT_EQ(admission.held(), 0);
  EXPECT_EQ(store.Find(h, "alice", kAgent, "args[0]").status().code(), absl::StatusCode::kNotFound);
}

TEST(ResidentStoreTest, TtlsAreBounded) {
  Admission admission(10000);
  ResidentStore store(Small(), &admission);
  EXPECT_EQ(*store.TtlFor(0), absl::Seconds(30));
  EXPECT_EQ(*store.TtlFor(1500), absl::Milliseconds(1500));
  EXPECT_EQ(store.TtlFor(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.TtlFor(int64_t{1} << 50).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResidentHandleTest, HoldersAreParsedAndTwoAreRefused) {
  const std::string a = NewResidentHandle(NewResidentBoot(), "cpu-a");
  const std::string b = NewResidentHandle(NewResidentBoot(), "cpu-b");
  EXPECT_EQ(*ResidentHolder({}), "");
  EXPECT_EQ(*ResidentHolder({{"args[0]", a}, {"args[2]", a}}), "cpu-a");
  absl::StatusOr<std::string> two = ResidentHolder({{"args[0]", a}, {"args[1]", b}});
  ASSERT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("'cpu-a'"), absl::string_view::npos);
  EXPECT_NE(two.status().message().find("'cpu-b'"), absl::string_view::npos);
  EXPECT_NE(a, NewResidentHandle(NewResidentBoot(), "cpu-a"));
  for (const char* bad : {"", "res-", "res-xyz@a", "res-0123456789abcdef0123456789abcdef-0123@a"}) {
    EXPECT_FALSE(ParseResidentHandle(bad, "x").ok()) << bad;
  }
}

}  // namespace
}  // namespace farcall::agent

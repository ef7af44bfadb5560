#include "core/wire/header_digest.h"

#include "gtest/gtest.h"

namespace farcall {
namespace {

v1::CallHeader Scale(double alpha) {
  v1::CallHeader h;
  h.set_handler("scale");
  h.add_platforms("cpu");
  v1::TensorSpec* x = h.add_args();
  x->set_dtype(v1::F32);
  x->add_dims(4);
  *h.add_results() = *x;
  h.set_has_side_effect(true);
  (*h.mutable_attributes())["alpha"].set_f64(alpha);
  (*h.mutable_attributes())["beta"].set_i64(1);
  (*h.mutable_input_output_aliases())[0] = 0;
  return h;
}

TEST(HeaderDigestTest, TheSameWorkHasTheSameDigestHoweverItTravels) {
  v1::CallHeader a = Scale(2.0);
  v1::CallHeader b = Scale(2.0);
  b.set_call_id("retry-of-a");
  b.mutable_shm()->set_region("r");
  b.mutable_ucx()->set_tag(42);
  EXPECT_EQ(HeaderDigest(a), HeaderDigest(b));
  EXPECT_EQ(HeaderDigest(a).size(), 32u);
}

TEST(HeaderDigestTest, OtherWorkHasAnotherDigest) {
  const std::string base = HeaderDigest(Scale(2.0));
  EXPECT_NE(HeaderDigest(Scale(3.0)), base);
  v1::CallHeader h = Scale(2.0);
  h.set_handler("axpy");
  EXPECT_NE(HeaderDigest(h), base);
  h = Scale(2.0);
  h.mutable_args(0)->set_dims(0, 5);
  EXPECT_NE(HeaderDigest(h), base);
  h = Scale(2.0);
  h.mutable_input_output_aliases()->clear();
  EXPECT_NE(HeaderDigest(h), base);
}

}  // namespace
}  // namespace farcall

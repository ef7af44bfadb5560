#include "device_agents/handler_registry.h"

#include <unistd.h>

#include "device_agents/handler_runtime.h"
#include "device_agents/plugin_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace farcall::agent {
namespace {

using ::testing::HasSubstr;

FarcallError* Nop(const FarcallCallFrame*) { return nullptr; }

TEST(HandlerRegistryTest, RegistersAndFinds) {
  HandlerRegistry r;
  FarcallHandlerDef def{sizeof(def), "h", "cpu", 0, &Nop};
  ASSERT_TRUE(r.Register(def, "builtin").ok());
  ASSERT_NE(r.Find("h", "cpu"), nullptr);
  EXPECT_EQ(r.Find("h", "cpu")->source, "builtin");
  EXPECT_EQ(r.Find("h", "cuda"), nullptr);
  EXPECT_EQ(r.Find("g", "cpu"), nullptr);
}

TEST(HandlerRegistryTest, RefusesDuplicates) {
  HandlerRegistry r;
  FarcallHandlerDef def{sizeof(def), "h", "cpu", 0, &Nop};
  ASSERT_TRUE(r.Register(def, "builtin").ok());
  absl::Status s = r.Register(def, "x.so");
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("already registered by builtin"));
}

TEST(HandlerRegistryTest, RefusesIncompleteDefs) {
  HandlerRegistry r;
  FarcallHandlerDef def{sizeof(def), "h", "cpu", 0, nullptr};
  EXPECT_EQ(r.Register(def, "x.so").code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandlerRegistryTest, InProcessHandlersRunThroughTheirFunction) {
  HandlerRegistry r;
  RegisteredHandler h;
  h.name = "py";
  h.platform = "CPU";
  h.source = "python:h.py";
  int calls = 0;
  h.invoke = [&calls](const HandlerInvocation& inv) {
    ++calls;
    return absl::FailedPreconditionError(inv.platform);
  };
  ASSERT_TRUE(r.RegisterInProcess(h).ok());
  const RegisteredHandler* found = r.Find("py", "cpu");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->platform, "cpu");
  HandlerInvocation inv;
  absl::Status s = RunHandler(*found, inv);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s, absl::FailedPreconditionError("cpu"));
  // A name the built-ins hold, and a def without a function, are refused.
  FarcallHandlerDef def{sizeof(def), "copy", "cpu", 0, &Nop};
  ASSERT_TRUE(r.Register(def, "builtin").ok());
  h.name = "copy";
  EXPECT_EQ(r.RegisterInProcess(h).code(), absl::StatusCode::kAlreadyExists);
  h.name = "other";
  h.invoke = nullptr;
  EXPECT_EQ(r.RegisterInProcess(h).code(), absl::StatusCode::kInvalidArgument);
  h.invoke = [](const HandlerInvocation&) { return absl::OkStatus(); };
  h.platform = "tpu";
  EXPECT_EQ(r.RegisterInProcess(h).code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandlerRegistryTest, DisabledHandlersAreGoneOnEveryPlatform) {
  HandlerRegistry r;
  for (const char* platform : {"cpu", "cuda"}) {
    FarcallHandlerDef sleep{sizeof(sleep), "sleep", platform, 0, &Nop};
    FarcallHandlerDef copy{sizeof(copy), "copy", platform, 0, &Nop};
    ASSERT_TRUE(r.Register(sleep, "builtin").ok());
    ASSERT_TRUE(r.Register(copy, "builtin").ok());
  }
  ASSERT_TRUE(r.Disable("sleep").ok());
  EXPECT_EQ(r.Find("sleep", "cpu"), nullptr);
  EXPECT_EQ(r.Find("sleep", "cuda"), nullptr);
  EXPECT_NE(r.Find("copy", "cpu"), nullptr);
  absl::Status s = r.Disable("slep");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "--disable_handlers names 'slep', which this agent does not have.");
}

TEST(PluginLoaderTest, LoadsExamplePluginAndRunsIt) {
  HandlerRegistry r;
  ASSERT_TRUE(LoadPlugin(FARCALL_EXAMPLE_PLUGIN, r).ok());
  const RegisteredHandler* h = r.Find("example.negate", "cpu");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->source, FARCALL_EXAMPLE_PLUGIN);

  float x[3] = {1, -2, 3};
  float y[3] = {};
  int64_t dims[1] = {3};
  HandlerInvocation inv;
  inv.args.push_back({sizeof(FarcallBuffer), FARCALL_DTYPE_F32, 1, dims, x, 12, -1});
  inv.results.push_back({sizeof(FarcallBuffer), FARCALL_DTYPE_F32, 1, dims, y, 12, -1});
  ASSERT_TRUE(InvokeHandler(h->fn, inv).ok());
  EXPECT_EQ(y[0], -1);
  EXPECT_EQ(y[1], 2);
  EXPECT_EQ(y[2], -3);

  // Its own validation comes back as the handler's status.
  inv.args[0].dtype = FARCALL_DTYPE_S32;
  absl::Status s = InvokeHandler(h->fn, inv);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("example.negate"));
}

TEST(PluginLoaderTest, RefusesOtherAbiMajor) {
  HandlerRegistry r;
  absl::Status s = LoadPlugin(FARCALL_WRONG_ABI_PLUGIN, r);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("was built for farcall handler ABI 99.0"));
  EXPECT_THAT(s.message(), HasSubstr("this agent speaks ABI 1.2"));
  EXPECT_EQ(r.Find("example.negate", "cpu"), nullptr);
}

TEST(PluginLoaderTest, ABareNameIsFoundInTheWorkingDirectory) {
  const std::string path = FARCALL_EXAMPLE_PLUGIN;
  const size_t slash = path.rfind('/');
  ASSERT_NE(slash, std::string::npos);
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(path.substr(0, slash).c_str()), 0);
  HandlerRegistry r;
  absl::Status s = LoadPlugin(path.substr(slash + 1), r);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(r.Find("example.negate", "cpu"), nullptr);
  absl::Status missing = LoadPlugin("no_such_plugin.so", r);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("looked for in the working directory"));
  ASSERT_EQ(chdir(cwd), 0);
}

TEST(PluginLoaderTest, MissingFileIsNotFound) {
  HandlerRegistry r;
  absl::Status s = LoadPlugin("/nonexistent/plugin.so", r);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/plugin.so"));
}

}  // namespace
}  // namespace farcall::agent

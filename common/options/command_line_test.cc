#include <cstdint>
#include <string>
#include <vector>

#include "common/options/option_set.h"
#include "common/options/test_util.h"
#include "common/options/validators.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flashserve::options {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CommandLineTest : public ::testing::Test {
 protected:
  CommandLineTest() {
    set_.Add("verbose", &verbose_, false, "Log more.");
    set_.Add("cache.ttl_hours", &ttl_hours_, 72, "Hours.", AtLeast<int64_t>(1));
    set_.Add("cache.tiers", &tiers_, {"dram"}, "Tiers.");
    set_.Add("server.listen", &listen_, "0.0.0.0:8000", "Address.");
    set_.Add("cache.ids", &ids_, {}, "Ids.");
  }
  absl::StatusOr<CommandLine> Load(std::vector<std::string> args) {
    return set_.LoadCommandLine(args);
  }

  testing_util::TempConfigDir dir_;
  bool verbose_ = false;
  int64_t ttl_hours_ = 0;
  std::vector<std::string> tiers_;
  std::vector<int64_t> ids_;
  std::string listen_;
  OptionSet set_;
};

TEST_F(CommandLineTest, FlagsWinOverFileWhereverConfigAppears) {
  const std::string path =
      dir_.Write("c.yaml", "cache:\n  ttl_hours: 24\nserver:\n  listen: f:1\n");
  absl::StatusOr<CommandLine> cl =
      Load({"--cache.ttl_hours=48", "--config", path, "--cache.tiers", "ssd, dram", "--verbose"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config_path, path);
  EXPECT_EQ(ttl_hours_, 48);  // flag before --config still wins
  EXPECT_EQ(listen_, "f:1");  // from the file
  EXPECT_THAT(tiers_, ElementsAre("ssd", "dram"));
  EXPECT_TRUE(verbose_);  // bare bool flag
  EXPECT_EQ(set_.SourceOf("cache.ttl_hours"), "flag --cache.ttl_hours");
  EXPECT_EQ(set_.SourceOf("server.listen"), path + ":4:11");
  EXPECT_FALSE(cl->help);
  EXPECT_FALSE(cl->print_config);
}

TEST_F(CommandLineTest, LaterFlagWinsAndValuesMayContainEquals) {
  absl::StatusOr<CommandLine> cl =
      Load({"--cache.ttl_hours=2", "--cache.ttl_hours", "3", "--server.listen=a=b",
            "--verbose=false", "--cache.ids=1,-2,3", "--config=" + dir_.Write("e.json", "{}")});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(ttl_hours_, 3);
  EXPECT_EQ(listen_, "a=b");
  EXPECT_FALSE(verbose_);
  EXPECT_THAT(ids_, ElementsAre(1, -2, 3));
}

TEST_F(CommandLineTest, PositionalHelpAndPrintConfig) {
  absl::StatusOr<CommandLine> cl = Load({"serve", "--print-config", "-", "--", "--verbose", "x"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->print_config);
  EXPECT_THAT(cl->positional, ElementsAre("serve", "-", "--verbose", "x"));
  EXPECT_FALSE(verbose_);

  // --help returns before anything is loaded, even with a broken line around it.
  cl = Load({"--cache.ttl_hours=nope", "--help", "--no-such-flag"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_TRUE(cl->help);
  EXPECT_EQ(ttl_hours_, 72);
}

TEST_F(CommandLineTest, UnknownFlagIsNamedWithSuggestion) {
  absl::StatusOr<CommandLine> cl = Load({"--cache.ttl_hour=5"});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(),
            "unknown option 'cache.ttl_hour' in flag --cache.ttl_hour (did you mean "
            "'cache.ttl_hours'?)");
  cl = Load({"-v"});
  ASSERT_FALSE(cl.ok());
  EXPECT_THAT(cl.status().message(), HasSubstr("unknown flag '-v'"));
  cl = Load({"--cache=5"});
  ASSERT_FALSE(cl.ok());
  EXPECT_THAT(cl.status().message(), HasSubstr("'cache' in flag --cache is a group of options"));
}

TEST_F(CommandLineTest, BadFlagValuesAndMissingValues) {
  absl::StatusOr<CommandLine> cl = Load({"--cache.ttl_hours=ten"});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(),
            "option 'cache.ttl_hours' (int64) in flag --cache.ttl_hours: expected an integer, "
            "got 'ten'");
  cl = Load({"--cache.ids=1,x"});
  ASSERT_FALSE(cl.ok());
  EXPECT_THAT(cl.status().message(), HasSubstr("item 1: expected an integer, got 'x'"));
  cl = Load({"--server.listen"});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(), "flag --server.listen needs a value");
  cl = Load({"--server.listen", "--verbose"});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(), "flag --server.listen needs a value");
  cl = Load({"--config", "a.yaml", "--config", "b.yaml"});
  ASSERT_FALSE(cl.ok());
  EXPECT_THAT(cl.status().message(), HasSubstr("more than once"));
}

TEST_F(CommandLineTest, FileErrorsAndValidationSurface) {
  absl::StatusOr<CommandLine> cl = Load({"--config", dir_.Path("missing.yaml")});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().code(), absl::StatusCode::kNotFound);

  const std::string path = dir_.Write("c.yaml", "cache:\n  ttl_hours: 24\n");
  cl = Load({"--config", path, "--cache.ttl_hours=0"});
  ASSERT_FALSE(cl.ok());
  EXPECT_EQ(cl.status().message(),
            "option 'cache.ttl_hours' = 0 (from flag --cache.ttl_hours): must be at least 1");
}

TEST_F(CommandLineTest, ArgcArgvSkipsProgramName) {
  const char* argv[] = {"flashserve", "--cache.ttl_hours=9", "pos"};
  absl::StatusOr<CommandLine> cl = set_.LoadCommandLine(3, argv);
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(ttl_hours_, 9);
  EXPECT_THAT(cl->positional, ElementsAre("pos"));
}

}  // namespace
}  // namespace flashserve::options

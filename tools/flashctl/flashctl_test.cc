// Runs the real flashctl binary and checks what an operator sees.
#include <stdio.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

Result Flashctl(const std::string& args) {
  const char* bin_dir = std::getenv("FS_BINARY_DIR");
  std::string cmd = std::string(bin_dir ? bin_dir : "build") + "/bin/flashctl " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CheckpointInspect, ReleasedConfigJson) {
  Result r = Flashctl("checkpoint inspect configs/deepseek-v41-flash/inference_config.json --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["kv"]["global_kv_bytes_per_token"].get<double>(), 890.0);
  EXPECT_EQ(doc["kv"]["swa_bytes_per_token_per_layer"].get<int>(), 528);
  EXPECT_EQ(doc["kv"]["global_kv_bytes_per_block"].get<int>(), 890 * 64);
  // Spec §3: the schedule of the released model.
  const auto& s = doc["schedule"];
  ASSERT_EQ(s.size(), 43u);
  auto mode = [&](int l) { return s[l]["mode"].get<std::string>(); };
  auto kv = [&](int l) { return s[l]["kv_from"].get<int>(); };
  auto topk = [&](int l) { return s[l]["topk_from"].get<int>(); };
  for (int l = 0; l < 43; ++l) {
    std::string expected_mode;
    int expected_kv = -1, expected_topk = -1;
    if (l < 2 || l >= 40) {
      expected_mode = "SwaOnly";
    } else if (l == 2 || l == 8 || l == 14 || l == 20) {
      expected_mode = "Full";
      expected_kv = expected_topk = l;
    } else if (l < 20) {
      expected_mode = "Reuse";
      expected_kv = expected_topk = l < 8 ? 2 : (l < 14 ? 8 : 14);
    } else if (l % 4 == 0) {
      expected_mode = "Reindex";
      expected_kv = 20;
      expected_topk = l;
    } else {
      expected_mode = "Reuse";
      expected_kv = 20;
      expected_topk = l < 24 ? 20 : l / 4 * 4;
    }
    EXPECT_EQ(mode(l), expected_mode) << "layer " << l;
    EXPECT_EQ(kv(l), expected_kv) << "layer " << l;
    EXPECT_EQ(topk(l), expected_topk) << "layer " << l;
    EXPECT_EQ(s[l]["ratio"].get<int>(), l < 2 || l >= 40 ? 0 : (l < 20 ? 2 : 1)) << l;
    EXPECT_EQ(s[l]["role"].get<std::string>(),
              l >= 40 ? "drafter" : (l < 20 ? "encoder" : "decoder"))
        << l;
  }
  EXPECT_NE(s[20]["extras"].get<std::string>().find("candidate source"), std::string::npos);
  EXPECT_NE(s[28]["extras"].get<std::string>().find("candidate-masked"), std::string::npos);
  EXPECT_NE(s[14]["extras"].get<std::string>().find("engram"), std::string::npos);
  EXPECT_NE(s[38]["extras"].get<std::string>().find("dspark tap"), std::string::npos);
}

TEST(CheckpointInspect, HfConfigGivesTheSameReport) {
  Result flat =
      Flashctl("checkpoint inspect configs/deepseek-v41-flash/inference_config.json --json");
  Result hf = Flashctl("checkpoint inspect configs/deepseek-v41-flash/config.json --json");
  ASSERT_EQ(hf.exit_code, 0) << hf.out;
  nlohmann::json a = nlohmann::json::parse(flat.out), b = nlohmann::json::parse(hf.out);
  a.erase("source");
  b.erase("source");
  EXPECT_EQ(a, b);
}

TEST(CheckpointInspect, TinyCheckpointTables) {
  Result r = Flashctl("checkpoint inspect tests/conformance/data/v41-tiny");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("checkpoint: 841 tensors present"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Layer schedule"), std::string::npos);
  EXPECT_NE(r.out.find("routed_experts"), std::string::npos);
  EXPECT_NE(r.out.find("global KV (main + index K)"), std::string::npos);
}

TEST(CheckpointInspect, ClearErrors) {
  Result missing = Flashctl("checkpoint inspect /nonexistent/ckpt");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/ckpt"), std::string::npos) << missing.out;
  Result usage = Flashctl("checkpoint inspect");
  EXPECT_EQ(usage.exit_code, 2) << usage.out;
}

}  // namespace

namespace {

TEST(Tokenize, RoundTripThroughTheCli) {
  Result enc = Flashctl(
      "tokenize --tokenizer tests/conformance/data/v41-tiny/tokenizer.json --text "
      "'def main():\n    return 42' --json");
  ASSERT_EQ(enc.exit_code, 0) << enc.out;
  nlohmann::json doc = nlohmann::json::parse(enc.out);
  ASSERT_FALSE(doc["ids"].empty());
  EXPECT_EQ(doc["ids"].size(), doc["tokens"].size());
  std::string ids;
  for (const auto& id : doc["ids"]) ids += std::to_string(id.get<int>()) + ",";
  ids.pop_back();
  Result dec = Flashctl("detokenize --tokenizer tests/conformance/data/v41-tiny --ids " + ids);
  ASSERT_EQ(dec.exit_code, 0) << dec.out;
  EXPECT_EQ(dec.out, "def main():\n    return 42\n");
}

TEST(Tokenize, Errors) {
  EXPECT_EQ(Flashctl("tokenize --tokenizer /nonexistent --text hi").exit_code, 1);
  EXPECT_EQ(Flashctl("tokenize --tokenizer tests/conformance/data/v41-tiny").exit_code, 2);
  Result bad = Flashctl("detokenize --tokenizer tests/conformance/data/v41-tiny --ids 1,x");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  Result unknown = Flashctl("detokenize --tokenizer tests/conformance/data/v41-tiny --ids 999999");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.out;
}

}  // namespace

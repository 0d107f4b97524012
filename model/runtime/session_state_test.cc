// SessionState: serialise then deserialise is exact (continuing from a restored state gives the
// same logits bit for bit), malformed input is rejected without touching the state, the pool hands
// out reset states, and the global tier of the released config measures 890 bytes per token from
// the allocated buffers (state only, no weights).
#include "model/runtime/session_state.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "model/config/config_parser.h"
#include "model/runtime/runtime_fixture.h"

namespace flashserve::model {
namespace {

TEST(SessionStateTest, SerializeRoundTripContinuesBitIdentically) {
  auto model = testing::MakeTinyModel(kernels::LinearMode::kExact);
  const std::vector<int32_t> prompt = testing::LoadPrompt("a").ids;  // odd: open ratio-2 group
  auto s = model->NewSession(256);
  ASSERT_TRUE(s.ok());
  ForwardOutput out;
  ASSERT_TRUE(model->Forward(*s, {.tokens = prompt}, &out).ok());
  auto bytes = SerializeSessionState(*s, model->schedule());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto restored = model->NewSession(240);  // another capacity, still >= the position
  ASSERT_TRUE(restored.ok());
  ASSERT_TRUE(DeserializeSessionState(*bytes, model->schedule(), *restored).ok());
  EXPECT_EQ(restored->position, s->position);
  auto again = SerializeSessionState(*restored, model->schedule());
  ASSERT_TRUE(again.ok());
  // Same bytes except the capacity field (bytes 8..15).
  ASSERT_EQ(again->size(), bytes->size());
  EXPECT_EQ(0, std::memcmp(again->data() + 16, bytes->data() + 16, bytes->size() - 16));
  const std::vector<int32_t> more = {5, 6, 7};
  ForwardOutput a, b;
  ASSERT_TRUE(model->Forward(*s, {.tokens = more}, &a).ok());
  ASSERT_TRUE(model->Forward(*restored, {.tokens = more}, &b).ok());
  EXPECT_EQ(a.logits, b.logits);
  DraftOutput da, db;
  ASSERT_TRUE(model->Draft(*s, 9, &da).ok());
  ASSERT_TRUE(model->Draft(*restored, 9, &db).ok());
  EXPECT_EQ(da.logits, db.logits);
}

TEST(SessionStateTest, MalformedBytesAreRejectedAndChangeNothing) {
  auto model = testing::MakeTinyModel();
  auto s = model->NewSession(64);
  ASSERT_TRUE(s.ok());
  ForwardOutput out;
  const std::vector<int32_t> prompt = {0, 5, 9, 11, 13};
  ASSERT_TRUE(model->Forward(*s, {.tokens = prompt}, &out).ok());
  auto bytes = SerializeSessionState(*s, model->schedule());
  ASSERT_TRUE(bytes.ok());
  auto target = model->NewSession(64);
  ASSERT_TRUE(target.ok());
  auto check = [&](std::vector<uint8_t> b, absl::StatusCode code, const char* what) {
    const absl::Status st = DeserializeSessionState(b, model->schedule(), *target);
    EXPECT_EQ(st.code(), code) << what << ": " << st;
    EXPECT_EQ(target->position, 0) << what;
  };
  std::vector<uint8_t> b = *bytes;
  b[0] = 'X';
  check(b, absl::StatusCode::kInvalidArgument, "magic");
  b = *bytes;
  b.resize(b.size() - 3);
  check(b, absl::StatusCode::kDataLoss, "truncated");
  b = *bytes;
  b.push_back(0);
  check(b, absl::StatusCode::kInvalidArgument, "trailing");
  b = *bytes;
  b[20] = 99;  // layer count
  check(b, absl::StatusCode::kInvalidArgument, "layers");
  auto small = model->NewSession(4);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(DeserializeSessionState(*bytes, model->schedule(), *small).code(),
            absl::StatusCode::kInvalidArgument);  // position 5 beyond capacity 4
}

TEST(SessionStateTest, ReleasedConfigGlobalKvIs890BytesPerToken) {
  auto config = LoadModelConfig("configs/deepseek-v41-flash/inference_config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const LayerSchedule schedule = BuildSchedule(*config);
  constexpr int64_t kTokens = 1024;
  auto s = MakeSessionState(*config, schedule, kTokens);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->GlobalKvBytes(), 890 * kTokens);
  // Every layer (40 backbone + 3 DSpark stages) holds a 128-row ring of 528-byte rows.
  EXPECT_EQ(s->SwaBytes(), 43 * 128 * 528);
}

TEST(SessionStateTest, PoolHandsOutResetStates) {
  auto model = testing::MakeTinyModel();
  auto pool = SessionPool::Create(model->config(), model->schedule(), 2, 64);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto a = pool->Acquire();
  auto b = pool->Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(pool->Acquire().status().code(), absl::StatusCode::kResourceExhausted);
  ForwardOutput first, second;
  const std::vector<int32_t> prompt = {0, 7, 8, 9, 10};
  ASSERT_TRUE(model->Forward(**a, {.tokens = prompt}, &first).ok());
  ASSERT_TRUE(pool->Release(*a).ok());
  EXPECT_EQ(pool->Release(*a).code(), absl::StatusCode::kInvalidArgument);
  auto c = pool->Acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->position, 0);
  ASSERT_TRUE(model->Forward(**c, {.tokens = prompt}, &second).ok());
  EXPECT_EQ(first.logits, second.logits);
  const SessionPool::Bytes bytes = pool->bytes();
  EXPECT_EQ(bytes.global, 2 * (*c)->GlobalKvBytes());
  EXPECT_EQ(bytes.total, bytes.swa + bytes.global + bytes.compressor + bytes.mirrors);
}

}  // namespace
}  // namespace flashserve::model

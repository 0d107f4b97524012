// Round trips of the flashserve.v1 messages, pinned wire bytes of two common types, and one real
// gRPC call (DecodeService.Health) over a loopback channel.

#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "flashserve/v1/admin.pb.h"
#include "flashserve/v1/cache.pb.h"
#include "flashserve/v1/common.pb.h"
#include "flashserve/v1/decode.grpc.pb.h"
#include "flashserve/v1/encoder.pb.h"
#include "flashserve/v1/gateway.pb.h"
#include "flashserve/v1/prefill.pb.h"

namespace flashserve::proto {
namespace {

namespace v1 = ::flashserve::v1;
using ::google::protobuf::Message;
using ::google::protobuf::util::MessageDifferencer;

// Serialises `original`, parses the bytes into a fresh message of the same type and expects
// equality. Also expects the message to be non-trivial so the comparison proves something.
void ExpectRoundTrip(const Message& original) {
  SCOPED_TRACE(original.GetTypeName());
  ASSERT_GT(original.ByteSizeLong(), 0u) << "fill the message before testing it";
  std::string bytes;
  ASSERT_TRUE(original.SerializeToString(&bytes));
  std::unique_ptr<Message> parsed(original.New());
  ASSERT_TRUE(parsed->ParseFromString(bytes));
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(original, *parsed)) << diff;
}

std::string Sha(char fill) { return std::string(32, fill); }

v1::ModelFingerprint Fingerprint() {
  v1::ModelFingerprint fp;
  fp.set_digest(Sha('\x11'));
  fp.set_display("v41-tiny@1111/layout1");
  fp.set_layout_version(1);
  return fp;
}

v1::TransferDescriptor UcxRegion(uint64_t offset, uint64_t length) {
  v1::TransferDescriptor d;
  d.set_backend(v1::TRANSFER_BACKEND_UCX);
  d.set_endpoint("127.0.0.1:7100");
  d.set_remote_key(std::string("\x01\x02\x00\x03", 4));  // embedded NUL must survive
  d.set_remote_address(0x7f0000001000);
  d.set_offset(offset);
  d.set_length(length);
  d.set_transfer_id(42);
  return d;
}

TEST(ProtoRoundTrip, GatewayChat) {
  v1::ChatCompletionRequest req;
  req.set_model("v41-tiny");
  auto* sys = req.add_messages();
  sys->set_role("system");
  sys->set_content("Be brief.");
  auto* user = req.add_messages();
  user->set_role("user");
  user->add_parts()->set_text("What is this?");
  auto* image = user->add_parts()->mutable_image();
  image->set_data(std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  image->set_mime_type("image/png");
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_sampling()->set_top_k(40);
  req.mutable_sampling()->set_top_logprobs(3);
  req.mutable_stop()->add_stop_strings("\n\n");
  req.mutable_stop()->add_stop_token_ids(1);
  req.mutable_stop()->set_max_tokens(64);
  req.set_thinking(false);
  req.set_reasoning_effort("high");
  ExpectRoundTrip(req);

  v1::ChatCompletionChunk chunk;
  chunk.set_id("chatcmpl-1");
  auto* choice = chunk.add_choices();
  choice->mutable_delta()->set_content("A cat.");
  auto* call = choice->mutable_delta()->add_tool_calls();
  call->set_name("lookup");
  call->set_arguments_json("{\"q\": \"cat\"}");
  choice->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
  chunk.mutable_usage()->set_cached_tokens(128);
  chunk.mutable_usage()->set_replayed_tokens(128);
  ExpectRoundTrip(chunk);

  v1::CompletionRequest completion;
  completion.mutable_tokens()->add_ids(0);
  completion.mutable_tokens()->add_ids(129279);
  completion.set_n(2);
  ExpectRoundTrip(completion);
  EXPECT_EQ(completion.prompt_case(), v1::CompletionRequest::kTokens);
}

TEST(ProtoRoundTrip, EncoderPrefillDecode) {
  v1::EncodeImagesRequest encode;
  auto* input = encode.add_images();
  input->set_data(std::string("\xff\xd8\xff\xe0\0\x10JFIF", 10));
  input->set_mime_type("image/jpeg");
  *encode.mutable_fingerprint() = Fingerprint();
  ExpectRoundTrip(encode);

  v1::EncodeImagesResponse encoded;
  auto* handle = encoded.add_images()->mutable_handle();
  handle->set_id("emb-1");
  handle->set_content_sha256(Sha('\x22'));
  handle->set_n_rows(64);
  handle->set_n_llm_h(8);
  handle->set_n_llm_w(8);
  handle->set_dtype(v1::TENSOR_DTYPE_BF16);
  ExpectRoundTrip(encoded);

  v1::PrefillRequest prefill;
  prefill.set_request_id("req-1");
  for (uint32_t t = 0; t < 200; ++t) prefill.mutable_tokens()->add_ids(t * 641);
  auto* span = prefill.add_images();
  *span->mutable_handle() = *handle;
  span->set_start(5);
  prefill.set_mode(v1::PREFILL_MODE_CED);
  prefill.mutable_cache()->set_tenant_salt("salt");
  prefill.set_decode_worker("127.0.0.1:9301");
  prefill.add_decode_backends(v1::TRANSFER_BACKEND_NCCL);
  prefill.add_decode_backends(v1::TRANSFER_BACKEND_INLINE);
  *prefill.mutable_fingerprint() = Fingerprint();
  ExpectRoundTrip(prefill);

  v1::PrefillResponse prefilled;
  prefilled.set_first_token(7);
  prefilled.set_hit_tokens(128);
  prefilled.set_replayed_tokens(128);
  auto* session = prefilled.mutable_session();
  session->set_session_id("s-1");
  *session->add_segments() = UcxRegion(0, 4096);
  session->add_cached_blocks()->set_sha256(Sha('\x33'));
  ExpectRoundTrip(prefilled);

  v1::StartSessionRequest start;
  start.set_request_id("req-1");
  *start.mutable_state() = prefilled.session();
  start.set_first_token(7);
  start.mutable_sampling()->set_seed(1234);
  start.mutable_stop()->set_ignore_eos(true);
  start.mutable_speculation()->set_enabled(false);
  ExpectRoundTrip(start);
  EXPECT_TRUE(start.speculation().has_enabled());

  v1::TokenEvent event;
  event.add_token_ids(9);
  event.add_token_ids(10);
  auto* lp = event.add_logprobs();
  lp->mutable_sampled()->set_token_id(9);
  lp->mutable_sampled()->set_logprob(-0.25f);
  event.mutable_draft()->set_drafted_tokens(5);
  event.mutable_draft()->set_accepted_tokens(1);
  event.set_finish_reason(v1::FINISH_REASON_LENGTH);
  ExpectRoundTrip(event);
}

TEST(ProtoRoundTrip, CacheAndAdmin) {
  v1::LookupRequest ask;
  *ask.mutable_fingerprint() = Fingerprint();
  for (uint32_t t = 0; t < 150; ++t) ask.mutable_tokens()->add_ids(t);
  ask.set_touch(true);
  ExpectRoundTrip(ask);

  v1::LookupResponse lookup;
  lookup.set_hit_tokens(128);
  for (char c : {'\x01', '\x02'}) {
    auto* block = lookup.add_blocks();
    block->mutable_key()->set_sha256(Sha(c));
    block->set_residency(v1::TIER_SSD);
    block->set_size_bytes(56960);
  }
  lookup.mutable_swa_snapshot()->set_prefix_tokens(150);
  ExpectRoundTrip(lookup);

  v1::PutBlocksRequest put;
  *put.mutable_fingerprint() = Fingerprint();
  auto* block = put.add_blocks();
  block->mutable_key()->set_sha256(Sha('\x01'));
  for (uint32_t t = 0; t < 64; ++t) block->add_token_ids(t);
  block->mutable_source()->set_backend(v1::TRANSFER_BACKEND_INLINE);
  block->mutable_source()->set_inline_data(std::string(300, '\0'));
  ExpectRoundTrip(put);

  v1::GetBlocksResponse got;
  auto* payload = got.add_blocks();
  payload->mutable_key()->set_sha256(Sha('\x01'));
  payload->set_status(v1::ENTRY_STATUS_OK);
  *payload->mutable_data() = UcxRegion(0, 56960);
  got.add_blocks()->set_status(v1::ENTRY_STATUS_CORRUPT);
  ExpectRoundTrip(got);

  v1::ListResponse listed;
  auto* entry = listed.add_entries();
  entry->mutable_key()->mutable_swa()->set_sha256(Sha('\x44'));
  entry->set_prefix_tokens(150);
  listed.set_next_page_token("page-2");
  ExpectRoundTrip(listed);

  v1::FlushRequest flush;
  flush.mutable_filter()->set_fingerprint(Sha('\x11'));
  flush.set_dry_run(true);
  ExpectRoundTrip(flush);

  v1::CacheStatsResponse stats;
  auto* tier = stats.add_tiers();
  tier->set_tier(v1::TIER_HOST);
  tier->set_checksum_failures(3);
  ExpectRoundTrip(stats);
}

// Explicit presence: a temperature of 0 (greedy) must stay distinguishable from "not set".
TEST(ProtoWire, OptionalZeroIsPresentOnTheWire) {
  v1::SamplingParams params;
  params.set_temperature(0.0f);
  std::string bytes;
  ASSERT_TRUE(params.SerializeToString(&bytes));
  // Field 1, wire type 5 (fixed32): tag 0x0d, then four zero bytes.
  EXPECT_EQ(bytes, std::string("\x0d\x00\x00\x00\x00", 5));
  v1::SamplingParams parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_TRUE(parsed.has_temperature());
  EXPECT_FALSE(parsed.has_top_p());
}

// Pins field numbers and packed encoding of TokenSequence: a renumbering would change these bytes.
TEST(ProtoWire, TokenSequenceBytesArePinned) {
  v1::TokenSequence tokens;
  tokens.add_ids(1);
  tokens.add_ids(2);
  tokens.add_ids(300);
  std::string bytes;
  ASSERT_TRUE(tokens.SerializeToString(&bytes));
  // Field 1, wire type 2 (packed), length 4: varints 01, 02, ac 02.
  EXPECT_EQ(bytes, std::string("\x0a\x04\x01\x02\xac\x02", 6));
}

class FakeDecode final : public v1::DecodeService::Service {
 public:
  grpc::Status Health(grpc::ServerContext*, const v1::HealthCheckRequest*,
                      v1::HealthCheckResponse* response) override {
    response->set_status(v1::SERVING_STATUS_DRAINING);
    response->set_role("decode");
    response->set_detail("draining for test");
    return grpc::Status::OK;
  }
};

TEST(ProtoGrpc, HealthOverLoopback) {
  FakeDecode service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = v1::DecodeService::NewStub(channel);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::HealthCheckResponse response;
  grpc::Status status = stub->Health(&context, v1::HealthCheckRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), v1::SERVING_STATUS_DRAINING);
  EXPECT_EQ(response.role(), "decode");
  EXPECT_EQ(response.detail(), "draining for test");

  // An RPC the fake does not implement reaches the real dispatcher and comes back UNIMPLEMENTED.
  grpc::ClientContext cancel_context;
  cancel_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::CancelSessionRequest cancel;
  cancel.set_request_id("req-1");
  v1::CancelSessionResponse cancelled;
  status = stub->CancelSession(&cancel_context, cancel, &cancelled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);

  server->Shutdown();
}

}  // namespace
}  // namespace flashserve::proto

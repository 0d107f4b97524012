// The whole decoder-layer step of bench_decoder_layer_step (decoder_layer_step_bench.cc): the
// released dims, the synthetic weights and activations filled on the device, and the stages of a
// Reuse-layer step and of a Reindex layer's indexer, each a launch plus its model bytes and FLOPs.
// Bench-only (needs a CUDA device at run time).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_fill.h"
#include "common/base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/gemm/gemm_float_cuda.h"
#include "kernels/moe/moe_gpu_test_util.h"
#include "kernels/norm_rope/rope_table.h"

namespace flashserve::bench {

using kernels::DeviceBuffer;

// Released dims (spec §2, §4).
inline constexpr int64_t kD = 5120;
inline constexpr int64_t kStreams = 4;
// --float-pdl's default (-1): the float Linears as programmatic dependents from this many tokens
// (below it only the gate's CUDA-core kernel).
inline constexpr int64_t kFloatPdlMinTokens = 8;
inline constexpr int64_t kHeads = 64;
inline constexpr int64_t kHeadDim = 512;
inline constexpr int64_t kRope = 64;
inline constexpr int64_t kQLora = 1280;
// Columns of wq_a | wkv stacked (Options::stack_qkv): q_lora, then kv.
inline constexpr int64_t kQkvCols = kQLora + kHeadDim;
inline constexpr int64_t kOGroups = 8;
inline constexpr int64_t kOLora = 1024;
inline constexpr int64_t kWindow = 128;
inline constexpr int64_t kTopk = 512;
inline constexpr int64_t kExperts = 384;
inline constexpr int64_t kTopkExperts = 6;
inline constexpr int64_t kInter = 2304;
inline constexpr int64_t kIdxHeads = 32;
inline constexpr int64_t kIdxDim = 128;
inline constexpr int64_t kCompressedRows = 65536;
inline constexpr int64_t kSwaRowBytes = 528;
inline constexpr int64_t kMainRowBytes = 288;  // FP4 main-KV serving row of 512 channels
inline constexpr int64_t kIdxKRowBytes = 68;   // index-key serving row: 64 code bytes + 4 scales

// Bench options (decoder_layer_step_flags.cc parses them and documents each flag).
struct Options {
  int iters = 20;
  int warmup = 5;
  std::vector<int64_t> tokens = {1, 8, 64, 256};
  std::vector<int64_t> reindex_tokens = {1, 8};
  // Batch sizes of the optional groups of decoder_layer_extras.h (layer 20's compressor and
  // candidate source; an Engram layer's memory); empty: not run.
  std::vector<int64_t> extra_tokens = {1, 8};
  std::vector<int64_t> compress_ratios = {1, 2};  // 1: layer 20; 2: layers 2/8/14
  int64_t engram_rows = 8'000'000;                // rows of the synthetic Engram table (264 B each)
  int64_t context = 65536;
  bool stages = true;
  // true: branches off the critical path run on forked streams — each mHC site's mixes next to
  // its sublayer (the collapse by the incoming pre stays on the main stream as hc_pre), and the
  // kv projection (wkv, kv_norm + RoPE + the window row) next to the q projection; false: one
  // stream, with the mixes and the collapse fused in one launch. Same bits either way (checked).
  bool overlap = true;
  // MoeCudaParams::fused_front (route + permute in one block at decode sizes; A/B).
  bool moe_front = true;
  // MoeCudaParams::gemm: the routed experts' GEMM (MoeCudaGemm; 0 = kAuto, 2 = kStream,
  // 7 = kStreamRing, ...): the A/B of an expert GEMM inside the whole step.
  int moe_gemm = 0;
  // MoeCudaParams::ring_fused_combine (A/B; the same bits).
  bool moe_ring_combine = true;
  // MoeCudaParams::ring_cut (MoeCudaRingCut: 0 kAuto, 1 kStatic, 2 kDynamic; A/B).
  int moe_ring_cut = 0;
  // With overlap: the shared expert as its own branch forked after ffn_norm (MoeCuda joins it
  // before the combine); false: MoeCuda runs it (forked inside MoeCuda, after the gate). A/B.
  bool shared_branch = true;
  // Print each main-stream stage's share of the graph's critical path: the queued graph replay of
  // the step without that stage, against the whole step's (a diagnostic; outputs of such a step
  // are not meaningful).
  bool ablate = false;
  // false: the bf16 / fp32 Linears that the automatic plan gives the CUDA-core kernel (M <= 4:
  // the gate, weights_proj, wk) run the mma.sync plan instead (A/B).
  bool float_gemv = true;
  // The main stream at the highest priority, the branches' streams at the lowest, and graphs
  // instantiated with per-node priorities (cudaGraphInstantiateFlagUseNodePriority); false: all
  // streams at the default priority (A/B).
  bool priorities = true;
  // With overlap: each mHC site boundary — the attention site's collapse + attn_norm, and the
  // attention hc_post + the FFN collapse + ffn_norm — as one kernels::LaunchHcBoundary launch
  // (kernels/mhc hc_boundary.h; the same bits) instead of two or three launches (A/B).
  bool fuse_boundary = true;
  // With overlap: q's RoPE and the attention output's inverse RoPE inside LaunchSparseAttn
  // (SparseAttnParams::rope, reading the step's cos/sin table rope_cos_sin, built at setup: one
  // LaunchRopeCosSin per step serves every layer; the same bits) instead of two RoPE launches
  // (A/B).
  bool fuse_rope = true;
  // The attention reads the KV as the serving rows (kernels/attention SparseAttnKvRows: each
  // sequence's window as 528-byte FP8 SWA rows, the compressed rows as 288-byte FP4 main-KV rows,
  // decoded in the kernel), as a server does; false: the bf16 pool of their decoded values (A/B).
  bool kv_rows = true;
  // The attention's split-combine form (kernels attention_internal::SparseAttnCombineForm, set
  // for the process): "auto" (default: the combine kernel), "shared", "per-thread", or "cluster"
  // (session 85: the row kernel merges its splits inside thread-block clusters; measured slower,
  // 1 token graph 186 -> 194 µs on an H100; A/B, the same bits).
  std::string attn_combine = "auto";
  // Each mHC site's fn prepared once at setup (LaunchMhcPrepareFn -> MhcMixesParams::fn_frags),
  // as a server does at weight upload; false: split on every call (A/B; the same bits).
  bool mhc_prepared = true;
  // kernels::MhcMixesParams::small_batch_ctas of both sites' mixes (0: one CTA per item, 160 at
  // D 5120; A/B, the same bits): fewer leave the weight streams beside them SM slots.
  int64_t mixes_ctas = 0;
  // The FFN site's alone (0: mixes_ctas). Its mixes are needed only by the MoE's combine, but
  // forked at the FFN boundary they hold SM slots while the gate and the MoE's front wait for one
  // (session 78's trace: the front starts 5.8 µs after the gate). Measured (session 78, H100): 40
  // level at 1 token, 5 µs slower at 8; 20 slower at both.
  int64_t ffn_mixes_ctas = 0;
  // kernels::LinearCudaParams::split_k of the FP8 Linears on a forked branch (the kv projection
  // wkv): 0 (default) the plan's (at 1 token 260 CTAs for its 2.6 MB), N forces N K splits, so
  // fewer CTAs hold SM slots beside wq_a / wq_b (A/B; the bits of wkv follow its split count, in
  // both schedules alike).
  int64_t branch_splits = 0;
  // wq_a and wkv, which read the same normed x, as one FP8 Linear over their stacked rows
  // (kernels' ConcatLinearRows layout: wq_a's 1,280 rows, then wkv's 512; one weight stream of
  // 9.2 MB on the main stream instead of wq_a there and wkv on the kv branch); the kv branch then
  // forks after it with kv_norm + RoPE on the stacked output's kv columns. Both schedules run the
  // stack, so the bit-identity check covers it; its K splits are the stack's plan's, so q and kv
  // may differ by an ulp from the unstacked Linears' (StackedQkvAgrees prints how many). Default
  // since session 79 with wqb_ctas 256 (H100, three alternations: 1 token graph 203.8–204.4 ->
  // 201.0–201.1 µs, 8 tokens 490.7–491.5 -> 486.8–487.3; either alone level or slower). With
  // wqb_qnorm the fused wq_b reads the stack's q_lora columns (x_stride 1,792).
  bool stack_qkv = true;
  // With overlap: q_norm fused into wq_b (kernels::LinearCudaParams::x_norm: the weight-streaming
  // kernel normalises the rows it quantises; one launch fewer, the same bits); false: its own
  // RMSNorm launch (A/B).
  bool wqb_qnorm = false;
  // kernels::MoeSharedExpertParams::split_k of the forked shared expert: 0 (default) its Linears'
  // plans (259 CTAs for w1 | w3 at one token), N forces N K splits (A/B; the shared expert's bits
  // follow the split count; the one-stream schedule then runs it as its own stage with the same
  // splits). Meant to leave SM slots to the MoE beside it; measured slower (session 78: the
  // stream plan keeps ~264 CTAs with thinner rows each, and w1 | w3 took 107 µs at 1 split).
  int64_t shared_splits = 0;
  // kernels::MoeSharedExpertParams::stream_ctas of the forked shared expert: 0 (default) the
  // weight-streaming plan's 264 CTAs; N plans its Linears toward N CTAs (132: one per SM), leaving
  // SM slots to the gate, the MoE's front and its rings (A/B; its bits follow the resulting
  // splits; the one-stream schedule then runs it as its own stage with the same plans). Session
  // 78 (H100): 132 level at 1 token, 3–4 µs faster at 8 (within the runs' spread); 66 slower.
  int64_t shared_ctas = 0;
  // Where the forked shared expert starts (overlapped schedule with the shared branch): 0
  // (default) at the FFN site's boundary, beside the gate, the MoE's front and its up stage; 1
  // once the MoE's up stage has run (kernels::MoeCudaParams::after_up), beside the down stage and
  // the combine's wait — the up stage's weight stream and the front's SM slots then have the GPU
  // to themselves (session 83, A/B; the same bits; session 84, H100: slower, 1 token graph ~187.4
  // -> 208.2 µs: beside the down ring its stream does not overlap).
  int shared_at = 0;
  // kernels::HcBoundaryParams::cluster_ctas of the fused site boundaries: 0 (default) the
  // launcher's automatic choice (8 CTAs per token up to 64 tokens since session 78), 1 one block
  // per token, 2 / 4 / 8 a cluster of CTAs per token (A/B; the same bits).
  int64_t boundary_cluster = 0;
  // The fp32-weight Linears (the MoE gate; the extras' r = 2 compressor wkv / wgate) hold bf16
  // checkpoint weights promoted to fp32 (spec §4.4, §4.7): uploaded as bf16, their narrowed form
  // (kernels::NarrowFloatLinearWeight; the same exact products), as a server does; false: as
  // fp32 (the three-piece mma.sync path; A/B).
  bool narrow_fp32 = true;
  // The Reindex layer's candidate mask (layer 20's, from CandidateBlocks): blocks of 8 positions,
  // each kept with probability 1/4 (2,048 of 8,192 blocks at 65,536 positions on average), per
  // sequence; false: each position kept with probability 1/2 (the mask before session 46).
  bool candidate_blocks = true;
  // With overlap: MB of each targeted weight asked into the L2 (kernels LaunchL2Prefetch) on a
  // forked stream while the kernels before its Linear leave the HBM idle; 0: none (A/B; the same
  // bits). A weight within the budget goes whole, a larger one as the same prefix of each row.
  // Targets (l2_prefetch_targets, any of): "wq" wq_a whole + wq_b, from the step's start (the
  // boundary, wq_a and q_norm run meanwhile); "wo_a" and "wo_b" from the attention's start; "gate"
  // from the FFN boundary's start; "wq_next" wq_a + wq_b again before the last hc_post (a model's
  // next layer; here the next replay's).
  int64_t l2_prefetch_mb = 0;
  // With overlap and fuse_boundary: the step as one layer of a layer loop runs it — its last
  // stage is the FFN hc_post fused with the next layer's collapse (by the FFN site's pre) and
  // attn_norm (one LaunchHcBoundary), and its first boundary (this layer's collapse + attn_norm)
  // belongs to the previous layer's step (PrepareLoopInput, outside the timed stages); wq_a is the
  // graph's one root and the branches fork after it (as after a loop's previous boundary); the
  // one-stream schedule appends the next collapse and attn_norm as launches, so the bit-identity
  // check covers them. false: the step starts with its collapse + attn_norm and ends with the
  // FFN hc_post (the default; A/B).
  bool layer_loop = false;
  // With overlap and fuse_boundary: the attention site's mixes forked after wq_b and the FFN
  // site's after the gate, instead of at each site's start (where they take SMs from wkv / wq_a
  // and from the gate; A/B; the same bits).
  bool mixes_late = false;
  // With overlap and fuse_boundary: the FFN site's mixes alone forked after the gate (they are
  // needed only by the MoE's combine; at the FFN boundary they hold SM slots while the gate, the
  // front and the shared expert start; A/B, the same bits).
  bool ffn_mixes_late = false;
  // With overlap and fuse_boundary (and not mixes_late): where the attention site's mixes fork —
  // 0 (default) at the step's start, beside wq_a, wkv and wq_b; 1 after wq_b, beside the
  // attention (mixes_late's place); 2 after the attention, beside wo_a (64 CTAs: the other SMs
  // idle), which the FFN boundary joins; 3 before the boundary, beside it (they read only the
  // streams; a second graph root) (A/B, the same bits).
  int attn_mixes_at = 0;
  // kernels::LinearCudaParams::stream_ctas of wq_b (decode sizes, M <= 8): 0 the weight-streaming
  // plan's 264 CTAs (its 256 128-row tiles spread over two per SM: every slot until its first
  // CTAs retire); 256 (default since session 79) its tiles unspread, which leaves 8 slots to the
  // kv branch's one-CTA kernels (kv_norm + RoPE, the SWA row) while it streams; N another target.
  // wq_b's bits follow its plan's splits, in both schedules. Measured with stack_qkv (above).
  int64_t wqb_ctas = 256;
  // wo_b (decode sizes, M <= 8) on the weight-streaming kernel's TMA-ring variant
  // (kernels::LinearCudaParams::stream_tma; the same plan and bits; faster alone, session 31, but
  // slower in that session's step). Default since session 79 (H100, twice each): with wo_a_trigger
  // 1 token graph 200.3–200.9 -> 197.5–198.1 µs, 2 tokens 244.1–244.9 -> 240.3–240.8; with wo_a
  // programmatic (8 tokens) 485.3–486.5 -> 477.2–479.9. Alone at 1–4 tokens level (its ring can
  // fill only once wo_a lets it be scheduled). false: the stream kernel (A/B).
  bool wob_tma = true;
  // wo_a's swapped-role kernel lets its programmatic dependent (wo_b) be scheduled at its start
  // even where it is launched plainly (kernels::FloatLinearCudaParams::trigger_dependents: below
  // kFloatPdlMinTokens, where --float-pdl's automatic 3 launches wo_a plainly), so that wo_b's
  // ring fills during wo_a (default since session 79, with wob_tma; the same bits).
  bool wo_a_trigger = true;
  // wo_a from its FP8 form (kernels::FloatLinearCudaParams::w_fp8; session 80, the default): the
  // weight is filled as E4M3 codes times a power of two per 32 × 32 block (as attn.wo_a's
  // checkpoint) in every setting; 1 or 2 hands LaunchFloatLinear the codes too, whose plan then
  // streams 33.5 MB instead of 67: the CUDA-core kernel at 1 token (H100: graph 198.1, 199.1 ->
  // 188.6, 189.3 µs; the same bits as that kernel on the bf16 weight) and from 2 to 8 tokens the
  // FP8 form's swapped-role kernel (session 81: 2 tokens ~243 -> ~236 µs graph, 4 ~322.6 -> ~316.6,
  // 8 ~473 -> ~470; the same bits as the bf16 swapped-role kernel). 1: launched as LaunchFloat's
  // --float-pdl rule says (below 8 tokens the CUDA-core kernels are programmatic dependents, the
  // swapped-role kernels plain launches); 2: launched plainly; 3: as 1 with the CUDA-core kernel
  // forced up to 4 tokens; 4: the FP8 swapped-role kernel forced at 1 to 8 tokens, plainly (with
  // wo_a_trigger, wo_b may be scheduled at its start); 5: the same as a programmatic dependent
  // (A/B); 6: the FP8 swapped-role kernel at every token count, x streamed through wo_a's own
  // workspace above 8 (session 82, A/B); 7: the FP8 form alone, no bf16 weight (session 84:
  // kernels::FloatLinearCudaParams "FP8 only"; the same kernels as 1 up to 64 tokens; from 65
  // the FP8 kernel's one-warpgroup 128-row tiles, whose sums are in the bf16 swapped-role
  // kernel's order; H100: level with 1 at 8 / 64 / 128 / 256 tokens). 0: the bf16 weight only
  // (the bf16 swapped-role kernel).
  int wo_a_fp8 = 1;
  // The FP8 swapped-role kernel's form (kernels::FloatLinearCudaParams::swap_fp8_warpgroups /
  // swap_fp8_chains; 0 / 1 the default): 1, 2 or 3 consumer warpgroups, 0 the kernel's automatic
  // choice (3 up to 32 tokens, 2 above; session 83), 1 or 4 accumulator chains (session 82, H100:
  // 2 warpgroups 2-5 µs faster at 2-8 tokens than 1, 4 chains level; session 83: 3 level to 1-5
  // µs faster than 2 at 2-32 tokens).
  int wo_a_swap_wgs = 0;
  int wo_a_swap_chains = 1;
  // wo_a's CUDA-core kernel (at 1 token with wo_a_fp8) in its wide geometry
  // (kernels::FloatLinearCudaParams::gemv_wide: 8 rows per CTA, a warp per row; a quarter of the
  // CTAs and of x's re-reads; other bits). The default since session 82 (H100, 1 token, graph):
  // 188.3, 188.0 -> 186.3, 186.6 µs; standalone 20.35 -> 19.87 µs on the FP8 form.
  bool wo_a_wide = true;
  // wq_b on the TMA-ring variant (not with its x_norm fusion): measured slower (session 79: 1
  // token 200.2, 201.1 -> 207.0, 206.7 µs; 8 tokens 477.5, 478.9 -> 483.2, 484.1) (A/B).
  bool wqb_tma = false;
  // The decode-size bf16 / fp32 Linears (wo_a, the gate, the Reindex indexer's weights_proj)
  // launched as programmatic dependents (kernels::FloatLinearCudaParams::programmatic: their first
  // weights requested while the kernel ahead runs): 1 all of them, 2 all but the CUDA-core
  // kernel's (the gate at 1–4 tokens), 3 only the CUDA-core kernel's, 0 none; -1 (default) = 1
  // from kFloatPdlMinTokens tokens, else 3 (session 77, H100: 8 tokens graph 507–508 -> 498–500
  // µs with 1; session 78, H100: 1 token 208.0–209.4 -> 206.2–206.8 with 3, where 1 lost 1–2 µs:
  // wo_a's early weights slow the attention; docs/performance_layer_step.md "Session 78"). The
  // same bits either way.
  int float_pdl = -1;
  // kernels::MoeCudaParams::early_ring: the fused front lets the up ring's CTAs be scheduled at
  // its start (A/B; the same bits).
  bool moe_early_ring = false;
  // kernels::MoeCudaParams::front_programmatic: the MoE's fused front launched as a programmatic
  // dependent of the gate, so that its CTAs take SM slots before the forked shared expert and
  // mixes do (the same bits; default since session 78, H100: 1 token graph 205.4–206.0 ->
  // 203.8–203.9 µs, 8 tokens level; before, the front started 5.8 µs after the gate).
  bool moe_front_pdl = true;
  // kernels::MoeCudaParams::hc_post: the FFN site's hc_post applied by the MoE's combine (the
  // session-21 form with overlapped branches; one launch fewer; default since session 77, H100:
  // 1 token graph 207.6–208.2 -> 203.8–205.8 µs, 8 tokens 508–509 -> 505–506; false: its own
  // LaunchHcPost (A/B, the same bits)).
  bool moe_hc_post = true;
  // Print a kernel timeline of one graph replay per token count (kernels/common kernel_trace.h:
  // each kernel's start, end and the time no kernel ran before it, from CUPTI).
  bool trace = false;
  // The bench's list of budgets (--l2-prefetch 0,32,...): each token count runs once per entry,
  // in order (LayerStep::SetL2PrefetchMb), so an A/B alternates inside one process.
  std::vector<int64_t> l2_prefetch_list = {0};
  std::set<std::string> l2_prefetch_targets = {"wq", "wo_a", "gate"};
};

// The bench's command line (decoder_layer_step_flags.cc, whose top holds the usage text); an
// unknown flag or a value out of range prints a message to stderr and exits with status 2.
Options ParseDecoderLayerStepOptions(int argc, char** argv);

// An FP8 block-scaled Linear [n, k] on the device (kernels/gemm layout), synthetic.
struct Fp8Weight {
  DeviceBuffer codes, scales;
  kernels::Fp8LinearDevice view;
  // The rows of `top`, then those of `bottom` (same K; top's N a multiple of 32, so the 32-row
  // scale blocks stack too): ConcatLinearRows' layout of the two weights' values.
  Fp8Weight(const Fp8Weight& top, const Fp8Weight& bottom) {
    CHECK_EQ(top.view.k, bottom.view.k);
    CHECK_EQ(top.view.n % 32, 0);
    const int64_t n = top.view.n + bottom.view.n, k = top.view.k;
    codes = DeviceBuffer(static_cast<size_t>(n * k));
    scales = DeviceBuffer(top.scales.bytes() + bottom.scales.bytes());
    CUDA_CHECK(cudaMemcpy(codes.get(), top.codes.get(), top.codes.bytes(), cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(codes.get<uint8_t>() + top.codes.bytes(), bottom.codes.get(),
                          bottom.codes.bytes(), cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(scales.get(), top.scales.get(), top.scales.bytes(), cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(scales.get<uint8_t>() + top.scales.bytes(), bottom.scales.get(),
                          bottom.scales.bytes(), cudaMemcpyDefault));
    view.n = n;
    view.k = k;
    view.codes = codes.get<uint8_t>();
    view.scales = scales.get<uint8_t>();
  }
  Fp8Weight(uint64_t seed, int64_t n, int64_t k) {
    codes = DeviceBuffer(static_cast<size_t>(n * k));
    const int64_t sn = (n + 31) / 32, sk = k / 32;
    scales = DeviceBuffer(static_cast<size_t>(sn * sk));
    FillFp8Codes(seed, static_cast<size_t>(n * k), codes.get<uint8_t>());
    FillBytes(seed + 1, static_cast<size_t>(sn * sk), 112, 116, scales.get<uint8_t>());
    view.n = n;
    view.k = k;
    view.codes = codes.get<uint8_t>();
    view.scales = scales.get<uint8_t>();
  }
  double bytes() const { return static_cast<double>(codes.bytes() + scales.bytes()); }
};

// One stage of the step: its launch and its model cost for B tokens.
struct Stage {
  std::string name;
  std::function<void()> launch;
  double bytes = 0;
  double flops = 0;
  // Set for a stage whose work goes to a forked stream (the overlapped mixes): orders the main
  // stream after it. The step joins at a later stage; timing the stage alone calls this so the
  // events measure the stage's own work.
  std::function<void()> settle;
  // Set for a stage that joins forked branches: only those joins (the step without this stage's
  // work, for --ablate, must still join them before its capture ends).
  std::function<void()> joins;
};

class LayerStep {
 public:
  LayerStep(const Options& o, int64_t max_tokens) : opt_(o), max_b_(max_tokens) {
    // With priorities the main stream (the critical path) outranks the forked branches: the
    // block scheduler dispatches its CTAs first when both have work waiting.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(
        cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, o.priorities ? greatest : 0));
    for (cudaStream_t& side : side_) {
      CUDA_CHECK(
          cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, o.priorities ? least : 0));
    }
    for (int i = 0; i < kBranches; ++i) {
      CUDA_CHECK(cudaEventCreateWithFlags(&fork_[i], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&join_[i], cudaEventDisableTiming));
    }
    AllocateWeights();
    AllocateActivations();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~LayerStep() {
    for (int i = 0; i < kBranches; ++i) {
      cudaEventDestroy(fork_[i]);
      cudaEventDestroy(join_[i]);
    }
    for (cudaStream_t side : side_) cudaStreamDestroy(side);
    cudaStreamDestroy(stream_);
  }

  cudaStream_t stream() const { return stream_; }
  // Options::l2_prefetch_mb of the stages built from now on.
  void SetL2PrefetchMb(int64_t mb) { opt_.l2_prefetch_mb = mb; }

  // The stages of a Reuse-layer step for b tokens (b <= max_tokens), in order; `overlap` as
  // Options::overlap.
  std::vector<Stage> ReuseStages(int64_t b, bool overlap);
  // The Reindex layer's extra indexer stages for b tokens, to run after q_norm.
  std::vector<Stage> IndexerStages(int64_t b);

  // The layer output of the last step: Z [b, 4, D] bf16 (host copy).
  std::vector<uint16_t> Output(int64_t b) const {
    std::vector<uint16_t> z(static_cast<size_t>(b * kStreams * kD));
    CUDA_CHECK(cudaMemcpy(z.data(), z_.get(), z.size() * 2, cudaMemcpyDeviceToHost));
    return z;
  }
  // The next layer's attn_norm output of the last step (bf16 [b, D]; Options::layer_loop, else
  // unwritten).
  std::vector<uint16_t> NextInput(int64_t b) const {
    std::vector<uint16_t> v(static_cast<size_t>(b * kD));
    CUDA_CHECK(cudaMemcpy(v.data(), xn_next_.get(), v.size() * 2, cudaMemcpyDeviceToHost));
    return v;
  }
  // With Options::layer_loop: the input the step reads from the previous layer's last boundary
  // (the collapse of x by pre_in and its attn_norm), computed once on stream() (synchronised).
  void PrepareLoopInput(int64_t b);
  // Overwrites (NaN bit patterns) what the forked branches of a step write — the mixes' outputs,
  // both collapses, kv, the new window rows in the pool and the SWA rows, and the normed q_lora
  // rows (wq_b writes them with Options::wqb_qnorm) — so that a schedule
  // that read one before its branch wrote it would show (stream(), synchronised).
  void PoisonBranchOutputs(int64_t b);
  // The normed q_lora rows of the last step (bf16 [b, 1280]: q_norm's output, which the
  // indexer's wq_b reads; written by wq_b itself with Options::wqb_qnorm).
  std::vector<uint16_t> QNormed(int64_t b) const {
    std::vector<uint16_t> v(static_cast<size_t>(b * kQLora));
    CUDA_CHECK(cudaMemcpy(v.data(), qr_.get(), v.size() * 2, cudaMemcpyDeviceToHost));
    return v;
  }
  // The FFN site's pre of the last step (fp32 [b, 4] bits; the next layer's collapse weights).
  std::vector<uint32_t> FfnPre(int64_t b) const {
    std::vector<uint32_t> v(static_cast<size_t>(b * kStreams));
    CUDA_CHECK(cudaMemcpy(v.data(), f_pre_.get(), v.size() * 4, cudaMemcpyDeviceToHost));
    return v;
  }
  // The indexer's scores and top-k for b sequences the per-sequence way (one LaunchIndexerScore
  // and one LaunchIndexerTopk per sequence, as before the batched entry points): the reference
  // the batched IndexerStages must equal bit for bit. Enqueued on stream().
  void LaunchIndexerPerSequence(int64_t b);
  std::vector<uint16_t> ScoresOutput(int64_t b) const {
    std::vector<uint16_t> s(static_cast<size_t>(b * opt_.context));
    CUDA_CHECK(cudaMemcpy(s.data(), scores_.get(), s.size() * 2, cudaMemcpyDeviceToHost));
    return s;
  }
  std::vector<int32_t> TopkOutput(int64_t b) const {
    std::vector<int32_t> t(static_cast<size_t>(b * kTopk));
    CUDA_CHECK(cudaMemcpy(t.data(), idx_topk_.get(), t.size() * 4, cudaMemcpyDeviceToHost));
    return t;
  }
  // While on, the MoE stage also copies the routing ids out (MoeCudaParams::expert_ids) for
  // TouchedExperts; off in timed steps, where a serving step would not copy them either.
  void CopyExpertIds(bool on) { copy_expert_ids_ = on; }
  // Unique experts the routing of the last step run with CopyExpertIds(true) touched.
  int64_t TouchedExperts(int64_t b) const {
    std::vector<int32_t> ids(static_cast<size_t>(b * kTopkExperts));
    CUDA_CHECK(cudaMemcpy(ids.data(), expert_ids_.get(), ids.size() * 4, cudaMemcpyDeviceToHost));
    return static_cast<int64_t>(std::set<int32_t>(ids.begin(), ids.end()).size());
  }
  // With kv_rows: the attention over the serving rows gives the bits of the attention over the
  // bf16 pool of their decoded values, on the q of the last step run (leaves the row form's
  // output in o_). True without kv_rows.
  bool AttentionFormsAgree(int64_t b);
  // With Options::stack_qkv: the stacked Linear's output against wq_a and wkv run alone on the
  // same normed x (equal, or one bf16 ulp apart where the K splits differ); printed. True without.
  bool StackedQkvAgrees(int64_t b);
  // Bytes of the distinct KV rows the attention of the first b sequences reads: window rows
  // (pool rows below max_b · kWindow) and compressed rows, at their serving sizes with kv_rows
  // (528 / 288 bytes), else 1 KB of bf16 each.
  double KvRowBytesRead(int64_t b) const {
    std::set<int32_t> rows;
    for (int64_t t = 0; t < b; ++t) {
      for (int64_t e = 0; e < kWindow + kTopk; ++e) {
        const int32_t r = indices_host_[static_cast<size_t>(t * (kWindow + kTopk) + e)];
        if (r >= 0) rows.insert(r);
      }
    }
    double bytes = 0;
    for (int32_t r : rows) {
      const bool window = r < max_b_ * kWindow;
      bytes += !opt_.kv_rows ? kHeadDim * 2 : (window ? kSwaRowBytes : kMainRowBytes);
    }
    return bytes;
  }

 private:
  void AllocateWeights();
  void AllocateActivations();
  // The pool's window rows as SWA rows (swa_rows_) and its compressed rows as FP4 main-KV rows
  // (main_rows_), then their decoded values back into the pool (decoder_layer_kv.cc).
  void BuildServingRows();
  // The non-quantised Linears (kernels/gemm bf16 / fp32 weights) at b rows.
  kernels::FloatLinearCudaParams WoAParams(int64_t b) const;
  kernels::FloatLinearCudaParams WeightsProjParams(int64_t b) const;
  kernels::FloatLinearCudaParams GateParams(int64_t b) const;
  size_t FloatLinearWorkspace(int64_t b) const;
  void LaunchFloat(kernels::FloatLinearCudaParams p);
  // The step's attention over the first b sequences, on the serving rows (`rows`) or the bf16
  // pool, into `out`.
  kernels::SparseAttnParams AttnParams(int64_t b, bool rows, bool fuse_rope,
                                       const DeviceBuffer& out) const;

  Options opt_;
  int64_t max_b_;
  cudaStream_t stream_ = nullptr;
  // The overlapped branches (Options::overlap): 0 the attention site's mixes, 1 the FFN site's
  // (both on side_[0], one after the other), 2 the kv projection (side_[1], with its own FP8
  // Linear workspace), 3 the MoE's shared expert (side_[1] after the kv projection has joined,
  // forked after ffn_norm: it needs only the normed x; MoeCuda's combine waits for it through
  // MoeCudaParams::shared_y_ready); 4 the L2 prefetches (Options::l2_prefetch_mb; side_[2],
  // joined by the step's last stage); a fork and a join event each.
  static constexpr int kBranches = 5;
  cudaStream_t side_[3] = {nullptr, nullptr, nullptr};
  cudaEvent_t fork_[kBranches] = {};
  cudaEvent_t join_[kBranches] = {};
  DeviceBuffer kv_lin_ws_;

  // Weights.
  DeviceBuffer attn_fn_, attn_base_, attn_scale_, ffn_fn_, ffn_base_, ffn_scale_;
  DeviceBuffer attn_fn_frags_, ffn_fn_frags_;  // the sites' prepared fn (Options::mhc_prepared)
  DeviceBuffer attn_norm_, ffn_norm_, q_norm_, kv_norm_, sink_;
  std::unique_ptr<Fp8Weight> wq_a_, wq_b_, wkv_, wo_b_, idx_wq_b_;
  std::unique_ptr<Fp8Weight> wqa_wkv_;  // wq_a | wkv stacked (Options::stack_qkv)
  DeviceBuffer wo_a_;                   // bf16 [8, 1024, 4096]
  DeviceBuffer wo_a_codes_;             // its FP8 form: E4M3 [8 · 1024, 4096]
  DeviceBuffer wo_a_scales_;            // UE8M0 [8 · 1024 / 32, 4096 / 32]
  DeviceBuffer weights_proj_;           // bf16 [32, 5120]
  DeviceBuffer gate_;                   // [384, 5120]: bf16 (Options::narrow_fp32) or fp32
  std::unique_ptr<kernels::moe_test::DeviceExperts> experts_;
  std::unique_ptr<kernels::moe_test::DeviceSharedExpert> shared_;
  std::unique_ptr<kernels::RopeTable> rope_;

  // Activations and state.
  DeviceBuffer x_, pre_in_, a_pre_, a_post_, a_comb_, f_pre_, f_post_, f_comb_, mix_ws_;
  DeviceBuffer x_attn_, xn_, qa_, qr_, q_, kv_, o_, o_lora_, a_out_, y_, x_ffn_, fn_x_, logits_,
      f_out_, z_;
  DeviceBuffer qkv_;               // the stacked Linear's output [b, 1280 + 512] (stack_qkv)
  DeviceBuffer x_next_, xn_next_;  // the next layer's collapsed and normed x (Options::layer_loop)
  DeviceBuffer pool_, swa_rows_, indices_, positions_, attn_ws_;
  DeviceBuffer main_rows_;     // the compressed rows as FP4 main-KV serving rows (kv_rows)
  DeviceBuffer rope_cos_sin_;  // the step's cos/sin of positions_ (LaunchRopeCosSin, at setup)
  DeviceBuffer lin_ws_, float_ws_, wo_a_ws_, moe_ws_, expert_ids_;
  DeviceBuffer shared_y_, shared_ws_;  // branch 3's output and workspace
  bool copy_expert_ids_ = false;
  std::vector<int32_t> indices_host_;
  // Indexer (Reindex layers).
  DeviceBuffer iq_, iw_, index_keys_, candidates_, scores_, idx_topk_, topk_ws_;
  DeviceBuffer seq_key_offsets_, seq_widths_;  // per sequence: pool row of key 0, key count
  size_t lin_ws_bytes_ = 0, moe_ws_bytes_ = 0, topk_ws_bytes_ = 0;
  int64_t key_seqs_ = 0;
};

}  // namespace flashserve::bench

// The flags of bench_decoder_layer_step (bench/decoder_layer_step_bench.cc) and what each
// selects: its usage text and ParseDecoderLayerStepOptions. Split out of the bench's main file
// in session 83 (STYLE.md: files under 800 lines).
//
// bench_decoder_layer_step: one whole DeepSeek-V4.1-Flash decoder layer step on the GPU at the
// released dims, composed of the kernels/ launchers, against its roofline.
//
//   bench_decoder_layer_step [--iters N] [--warmup N] [--tokens 1,8,64,256] [--context L]
//                            [--reindex-tokens 1,8] [--extra-tokens 1,8] [--compress-ratios 1,2]
//                            [--engram-rows N] [--stages 0|1] [--overlap 0|1] [--moe-front 0|1]
//                            [--moe-gemm N] [--shared-branch 0|1] [--ablate 0|1]
//                            [--float-gemv 0|1] [--priorities 0|1] [--fuse-boundary 0|1]
//                            [--fuse-rope 0|1] [--layer-loop 0|1] [--mixes-late 0|1]
//                            [--float-pdl auto|0|1|2|3] [--moe-early-ring 0|1] [--moe-hc-post 0|1]
//                            [--wqb-qnorm 0|1] [--stack-qkv 0|1] [--boundary-cluster 0|1|2|4|8]
//                            [--shared-splits N] [--shared-ctas N] [--shared-at 0|1]
//                            [--ffn-mixes-ctas N]
//                            [--moe-front-pdl 0|1] [--ffn-mixes-late 0|1]
//                            [--attn-mixes-at 0|1|2|3] [--wqb-ctas N]
//                            [--wob-tma 0|1] [--wqb-tma 0|1] [--wo-a-trigger 0|1]
//                            [--wo-a-fp8 0|1|2|3|4|5|6|7] [--wo-a-wide 0|1]
//                            [--wo-a-swap-wgs 0|1|2|3] [--wo-a-swap-chains 1|4]
//                            [--kv-form rows|bf16] [--attn-combine auto|cluster|shared|per-thread]
//                            [--mhc-prepared 0|1] [--mixes-ctas N] [--branch-splits N]
//                            [--narrow-fp32 0|1] [--moe-ring-cut 0|1|2] [--candidate-blocks 0|1]
//                            [--trace 0|1] [--l2-prefetch MB] [--l2-prefetch-targets
//                            wq,wo_a,wo_b,gate,wq_next]
//
// A decode step of B sequences (one new token each, at position L − 1 of a context of L tokens)
// through one decoder layer (spec §4.2, §4.3, §4.5, §4.7; layer schedule §3):
//   attention site: mHC mixes and the collapse by the previous layer's pre, attn_norm,
//     wq_a (FP8), q_norm, wq_b (FP8), RoPE on q, wkv (FP8), kv_norm + RoPE, the new window row's
//     528-byte SWA serving row and, from the same pass, its decoded bf16 values into the KV pool
//     (quant EncodeRowsParams::decoded_out = the FP8 QDQ), sparse attention over the 128
//     window rows + 512 selected compressed rows with the sink, inverse RoPE, wo_a (bf16, 8
//     groups), wo_b (FP8), hc_post;
//   FFN site: mHC mixes and the collapse by the attention site's pre, ffn_norm, the gate (fp32
//     weights), MoE (384 FP4 experts, top-6, plus the FP8 shared expert), hc_post.
// --overlap 1 (default) runs the branches off the critical path on forked streams: each site's
// mixes (the collapse by the incoming pre stays on the main stream as hc_pre; the mixes' pre /
// post / comb are needed only by the site's hc_post and the next site's collapse, which join
// them) and the kv projection (wkv, kv_norm + RoPE, the window row; joined by the attention) next
// to the q projection, and the MoE's shared expert (--shared-branch 1, default; it needs only the
// normed x) next to the gate and the routing, joined by the MoE's combine (MoeCudaParams::
// shared_y_ready). --overlap 0: one stream, the mixes fused with the collapse. The two
// schedules are checked bit-identical before timing. With --overlap 1, --fuse-boundary 1
// (default) runs each mHC site boundary as one launch (kernels/mhc hc_boundary.h: the attention
// site's collapse + attn_norm; the attention hc_post + the FFN collapse + ffn_norm), which the
// one-stream schedule runs as separate launches, so the bit-identity check covers it; 0 runs them
// separately (A/B). With --overlap 1, --fuse-rope 1 (default) applies q's RoPE and the attention
// output's inverse RoPE inside the attention (SparseAttnParams::rope) reading the step's cos/sin
// table (rope_cos_sin, built once per step for every layer: at setup here, outside the stages),
// which the one-stream schedule runs as two RoPE launches (so the bit-identity check covers it
// too); 0 keeps the launches (A/B). --moe-front 0 runs the MoE's route and
// permute as separate kernels (MoeCudaParams::fused_front, A/B; the same bits). --moe-gemm N
// forces the routed experts' GEMM (MoeCudaParams::gemm, the MoeCudaGemm value: 0 kAuto, the
// default; 2 kStream; 7 kStreamRing; A/B). --moe-ring-combine 0 keeps the down ring's epilogue
// kernel before the combine (MoeCudaParams::ring_fused_combine, A/B; the same bits).
// --moe-ring-cut 1 / 2 forces the TMA ring's static / dynamic cut (MoeCudaParams::ring_cut; 0
// kAuto, the default: dynamic from 1 slot per expert, 64 tokens; A/B). The MoE stage
// copies the routing ids out only in the untimed run that counts the touched experts.
// --l2-prefetch MB[,MB...] (with --overlap 1; 0, the default: off; a list runs each token count
// once per entry, in order, for an A/B inside one process) asks the L2 for up to MB of each of
// the --l2-prefetch-targets' weights on a forked stream while the kernels before their Linear
// leave the HBM idle (kernels/gemm weight_prefetch.h; a hint: the same bits): wq = wq_a and wq_b
// from the step's start, wo_a / wo_b from the attention's start, gate from the FFN boundary's
// start, wq_next = wq_a and wq_b again before the last hc_post (the next layer's; here the next
// replay's) (default wq,wo_a,gate). A weight over the budget gets the same prefix of every row.
// --trace 1 prints, per token count, a kernel timeline of one graph replay (kernels/common
// kernel_trace.h, CUPTI's activity records: each kernel's start, end, the time no kernel ran
// before it, its CTAs; then the span, the kernel time, the idle time and the overlap). Tracing is
// on for the whole run then, so its other figures carry the records' cost.
// --layer-loop 1 (session 75; with --overlap 1 and --fuse-boundary 1) times the step as one layer
// of a layer loop runs it: the step ends with the FFN hc_post, the next layer's collapse (by the
// FFN site's pre: the single-pass shift) and its attn_norm in one launch, and starts from the
// normed x that the previous layer's such launch left (computed once outside the stages), with
// wq_a as the graph's one root and the branches forked after it; the one-stream schedule appends
// the next collapse and attn_norm as launches, so the bit-identity check covers the fused end.
// 0 (default): the step starts with its own collapse + attn_norm and ends with the FFN hc_post.
// --mixes-late 1 (A/B, measured slower) forks the attention site's mixes after wq_b and the FFN
// site's after the gate.
// --float-pdl 1 launches the decode-size bf16 / fp32 Linears (wo_a's swapped-role kernel, the
// gate's CUDA-core kernel) as programmatic dependents that request their first weights while the
// kernel ahead (the attention's combine, the FFN boundary) runs (session 76,
// FloatLinearCudaParams::programmatic; the same bits); 0 plain launches; 2 only the swapped-role
// kernel (the gate's CUDA-core kernel plain); 3 only the CUDA-core kernel (the gate at 1-4
// tokens; session 78); auto (the default) 1 from 8 tokens, 3 below (measured: 1 at 8 tokens
// 1.5 % faster; at 1 token 1 is ~1 % slower — wo_a's early weights slow the latency-bound
// attention beside them — and 3 ~1 % faster, session 78).
// --moe-front-pdl 1 (default, session 78) launches the MoE's fused front as a programmatic
// dependent of the gate (MoeCudaParams::front_programmatic; the same bits), so that it holds its
// SM slots before the forked shared expert and the FFN mixes take them (1 token ~2 µs faster, 8
// level); 0 a plain launch (A/B).
// --moe-early-ring 1 lets the MoE's fused front schedule the up ring's CTAs at its start
// (MoeCudaParams::early_ring, session 76; A/B, the same bits).
// --moe-hc-post 1 (default, session 77) applies the FFN site's hc_post in the MoE's combine
// (MoeCudaParams::hc_post; with --layer-loop 0 and overlapped branches; the roof keeps the
// hc_post's bytes; the same bits); 0 launches it alone (A/B).
// --wqb-qnorm 1 fuses q_norm into wq_b (LinearCudaParams::x_norm, session 78: the weight-streaming
// kernel normalises the rows as it quantises them and writes the normed rows for the indexer;
// one launch fewer on the critical path, the same bits); 0 (default) its own RMSNorm launch.
// Measured slower (H100: 1 token graph 208 -> 225 µs): the fused wq_b, a programmatic dependent
// of wq_a, takes the SM slots q_norm's gap left to the forked wkv, which then ends after wq_b
// (44.5 µs instead of ~23) and delays the attention.
// --wob-tma 1 (default, session 79) runs wo_b on the weight-streaming kernel's TMA-ring variant,
// and --wo-a-trigger 1 (default) has wo_a's swapped-role kernel, launched plainly below 8 tokens,
// let wo_b be scheduled at its start (FloatLinearCudaParams::trigger_dependents), so the ring
// fills during wo_a (H100: 1 token graph ~200.6 -> ~197.8 µs, 8 tokens ~486 -> ~478); 0 / 0 the
// stream kernel after wo_a (A/B). --wqb-tma 1 runs wq_b on the ring (measured slower; A/B).
// --wo-a-fp8 1 (default, session 80) gives wo_a's Linear its FP8 form as well
// (kernels::FloatLinearCudaParams::w_fp8; the weight is always filled as E4M3 codes times a power
// of two per 32 × 32 block, as the checkpoint's attn.wo_a), whose plan streams the codes, half the
// bytes: at 1 token on the CUDA-core kernel, launched by the --float-pdl rule (H100: 1 token graph
// 198.1, 199.1 -> 188.6, 189.3 µs), from 2 to 8 tokens on the FP8 form's swapped-role kernel
// (session 81, launched plainly below 8 tokens: 2 tokens 243.5, 242.3 -> 235.3, 236.8 µs graph, 4
// tokens 323.3, 321.9 -> 316.6, 316.5, 8 tokens 472.7, 473.7 -> 469.7, 470.0); 2 the same launched
// plainly (191.9 at 1 token); 3 the CUDA-core kernel forced up to 4 tokens (4 tokens 321 -> 331:
// slower); 4 the FP8 swapped-role kernel forced at 1 to 8 tokens, plainly (1 token 192.1, 191.4:
// slower than the CUDA-core kernel); 5 the same as a programmatic dependent (2 tokens 238.8,
// 238.7: slower than plainly); 6 the FP8 swapped-role kernel at every token count, x streamed
// through its own workspace above 8 tokens (session 82, A/B); 7 the FP8 form alone, no bf16
// weight (session 84, FloatLinearCudaParams "FP8 only"; H100: level with 1 at 8 / 64 / 128 / 256
// tokens); 0 the bf16 weight
// only (A/B). Session
// 81's figures were taken with 4 against 1 before the plan took the kernel. --wo-a-wide 1 runs
// wo_a's CUDA-core kernel with 8 rows per CTA, a warp per row (FloatLinearCudaParams::gemv_wide;
// the default since session 82: 1 token 188.3, 188.0 -> 186.3, 186.6 µs graph on an H100); 0 2 rows
// per CTA.
// --wo-a-swap-wgs 0|1|2|3 and --wo-a-swap-chains 1|4 set the FP8 swapped-role kernel's consumer
// warpgroups and accumulator chains (FloatLinearCudaParams::swap_fp8_warpgroups / _chains;
// default 0 / 1: 0 is the kernel's automatic choice, 3 warpgroups up to 32 tokens and 2 above
// (session 83, H100: 3 against 2 at 2 / 4 / 8 tokens 232.4, 231.4, 236.5 / 311.2, 311.3, 316.8 /
// 466.5, 462.8, 463.2 µs graph against 237.2, 237.0, 235.8 / 313.4, 316.9, 318.1 / 469.3, 461.4,
// 461.7); session 82's 2 were 2-5 µs faster at 2-8 tokens than 1 / 1, 4 chains level; other
// bits than 1 / 1, which equals the bf16 swapped-role kernel).
// --attn-mixes-at 0|1|2|3 forks the attention site's mixes at the step's start (0, the default),
// after wq_b (1), after the attention, beside wo_a (2) or before the boundary (3) (session 79;
// A/B, the same bits).
// --wqb-ctas N plans wq_b's weight-streaming kernel toward N CTAs (LinearCudaParams::stream_ctas;
// session 79): 256 (default) its 128-row tiles unspread, leaving 8 SM slots to the kv branch's
// one-CTA kernels; 0 the plan's 264.
// --ffn-mixes-late 1 forks the FFN site's mixes alone after the gate (session 79; A/B).
// --stack-qkv 1 (default, session 79) runs wq_a and wkv as one FP8 Linear over their stacked rows
// (ConcatLinearRows' layout) on the main stream, the kv branch (kv_norm + RoPE, the SWA row)
// forked after it on the stack's kv columns; 0 wkv on the branch beside wq_a, q_norm and wq_b
// (A/B). Both schedules run the stack; it is checked against wq_a and wkv alone before timing.
// With --wqb-ctas 256 (also default): H100 1 token graph 203.8–204.4 -> 201.0–201.1 µs, 8 tokens
// 490.7–491.5 -> 486.8–487.3 (docs/performance_layer_step_2.md "Session 79").
// --boundary-cluster N runs the fused mHC site boundaries with N CTAs per token in a thread-block
// cluster (HcBoundaryParams::cluster_ctas, session 78; 1 one block per token; 0, the default, the
// launcher's automatic choice: 8 up to 64 tokens; the same bits).
// --shared-splits N forces N K splits on the forked shared expert's Linears
// (MoeSharedExpertParams::split_k, session 78; 0, the default: their plans', 259 CTAs for w1 | w3
// at one token), so that it leaves SM slots to the gate, the MoE's front and its rings (the
// session-78 trace: the front started 5.7 µs after the gate, behind the shared expert's CTAs).
// Measured slower (session 78, H100: 1 token graph 205 -> 255 µs at 1 split, 229 at 2): the
// stream plan keeps ~264 CTAs by thinning each CTA's rows, and w1 | w3 took 107 µs.
// --ffn-mixes-ctas N caps the FFN site's mixes alone (0: as --mixes-ctas; session 78): they are
// needed only by the MoE's combine but hold SM slots while the gate and the MoE's front start
// (measured: 40 level at 1 token, slower at 8; 20 slower).
// --shared-ctas N plans the forked shared expert's Linears toward N CTAs instead of 264
// (MoeSharedExpertParams::stream_ctas, session 78; 0 the default), fewer CTAs holding SM slots
// (measured: 132 level at 1 token, 3-4 µs faster at 8, within the runs' spread; 66 slower).
// --shared-at 1 forks the shared expert once the MoE's up stage has run (MoeCudaParams::after_up)
// instead of at the FFN boundary (0, the default), so that its 35 MB stream runs beside the down
// stage rather than beside the front and the up stage (session 83, A/B; the same bits; session 84,
// H100: slower, 1 token graph ~187.4 -> 208.2 µs, 8 tokens ~464 -> ~477).
// --mixes-ctas N caps the small-batch mixes' grid at N CTAs (MhcMixesParams::small_batch_ctas,
// session 77; 0, the default: 160 at D 5120; the same bits): the forked mixes then hold fewer of
// the SM slots the weight streams beside them (wq_a, wq_b; the gate, the MoE) take.
// --branch-splits N forces N K splits on the FP8 Linears of the forked branches (wkv; 0, the
// default: the plan's, 260 CTAs at 1 token), so that they hold fewer SM slots beside wq_a / wq_b
// (session 77; wkv's bits follow its split count, in both schedules alike).
// --mhc-prepared 1 prepares each mHC site's fn once at setup (LaunchMhcPrepareFn; the mixes then
// copy its fragments instead of splitting fn per call; the same bits), the default since session
// 38; 0 splits it on every call (A/B).
// --narrow-fp32 1 (default, session 39) uploads the fp32-weight Linears (the gate; the extras' r =
// 2 compressor wkv / wgate), which hold bf16 checkpoint weights promoted to fp32, as bf16
// (kernels::NarrowFloatLinearWeight: the same exact products; every bf16 plan applies); 0 keeps
// fp32 weights (the three-piece mma.sync path, A/B).
// That is a Reuse layer (layers 21–23, 25–27, …: 15 of the 20 decoder layers). A Reindex layer
// (24, 28, 32, 36) adds its own indexer: indexer.wq_b (FP8), RoPE, FP4 QDQ of the index query,
// weights_proj (bf16, × 2^-6 folded into the weights: a power of two, so exact), the scores over
// the L index keys (68-byte FP4 serving rows: the exact int8 scorer) with layer 20's candidate
// mask (--candidate-blocks 1, the default since session 46: blocks of 8 positions, each kept
// with probability 1/4, as CandidateBlocks leaves it; 0: each position with probability 1/2), and
// the top-512. Those rows time it for the
// --reindex-tokens batch sizes; each sequence has its own keys, and the scores and the top-512 are
// one batched launch each for all sequences (LaunchIndexerScoreBatch / LaunchIndexerTopkBatch),
// checked bit for bit against one launch per sequence before timing ("batched vs per-sequence").
// For the --extra-tokens batch sizes (empty: skipped), two more groups, each added to the Reuse
// step (decoder_layer_extras.h gives their stages and spec references): the compressing layer's
// compressor (--compress-ratios: 1 = layer 20: wkv, norm, main-KV row, index key, candidate
// blocks; 2 = layers 2/8/14 at a step that emits a row: fp32 wkv + wgate, per-sequence pooling,
// main-KV row, index key) and an
// Engram layer's memory (layers 1 and 14: table gather, engram.wkv, gate, stream update; a table
// of --engram-rows rows, default 8M = 2.1 GB, random ids).
//
// Synthetic data (deterministic, filled on the device): FP8 codes over every finite E4M3 value with
// UE8M0 scales 2^-15..2^-11, FP4 experts as the MoE bench's realistic ones, activations uniform.
// The attention reads the KV as a server holds it (--kv-form rows, the default since session 30):
// each sequence's 128 window rows as 528-byte FP8 SWA rows and 65,536 compressed rows shared by
// the batch as 288-byte FP4 main-KV rows (kernels/attention SparseAttnKvRows, decoded in the
// kernel: the row form; 512 distinct random compressed rows per token); --kv-form bf16 reads the
// bf16 pool of the same rows' decoded values instead (the attention's bf16 form, faster at large
// batch: 54 against 93 µs at 256 tokens in bench_sparse_attn, kernels/attention/wgmma_ws.md; A/B).
// Both forms attend over the same values (the pool holds the serving rows' decoded values) and
// are checked bit-identical before timing. --attn-combine picks the attention's split-combine
// form (session 85: `cluster` lets the row kernel merge its 10 splits inside thread-block
// clusters, measured slower; `auto`, the default, the combine kernel; A/B, the same bits). Before
// session 30 the step timed the bf16 form over a random bf16 pool.
//
// Per batch size it prints the whole step (median of N back-to-back steps, CUDA events; and the
// replay of a CUDA graph of one step), its bytes, FLOPs and roofline bound
//   roof = max(bytes / d2d copy bandwidth, FLOPs / tensor-core rate)
// with both roofs measured in this run (cudaMemcpyAsync d2d, counted read + write; the larger of
// cuBLAS bf16 GemmEx at 8192^3 and the mma.sync peak), ratio = roof / measured; and, with
// --stages 1 (default), every stage alone with its own bytes and roof. Bytes: weights read once
// per step (touched experts only), activations, KV rows actually touched (unique rows × 528 /
// 288 bytes, or × 1 KB in the bf16 form),
// index keys (L × 256 B per sequence). FLOPs: 2 per multiply-add of every GEMM and of attention
// (4·64·512·640 per token), the MoE's 2·B·(6 + 1)·3·D·I.
// Before timing, the step's outputs are checked to be finite and two steps bit-identical
// (every stage is deterministic); a failure makes the exit code 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/decoder_layer_step.h"
#include "kernels/gemm/gemm_cuda.h"
#include "kernels/moe/moe_cuda.h"

namespace flashserve::bench {
namespace {

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

}  // namespace

Options ParseDecoderLayerStepOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--iters") {
      o.iters = std::atoi(argv[i + 1]);
    } else if (flag == "--warmup") {
      o.warmup = std::atoi(argv[i + 1]);
    } else if (flag == "--tokens") {
      o.tokens = ParseList(argv[i + 1]);
    } else if (flag == "--reindex-tokens") {
      o.reindex_tokens = ParseList(argv[i + 1]);
    } else if (flag == "--extra-tokens") {
      o.extra_tokens = ParseList(argv[i + 1]);
    } else if (flag == "--compress-ratios") {
      o.compress_ratios = ParseList(argv[i + 1]);
    } else if (flag == "--engram-rows") {
      o.engram_rows = std::atoll(argv[i + 1]);
    } else if (flag == "--context") {
      o.context = std::atoll(argv[i + 1]);
    } else if (flag == "--stages") {
      o.stages = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--overlap") {
      o.overlap = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--priorities") {
      o.priorities = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--float-gemv") {
      o.float_gemv = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--ablate") {
      o.ablate = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--shared-branch") {
      o.shared_branch = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-ring-combine") {
      o.moe_ring_combine = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-ring-cut") {
      o.moe_ring_cut = std::atoi(argv[i + 1]);
      if (o.moe_ring_cut < 0 || o.moe_ring_cut > 2) {
        std::fprintf(stderr, "--moe-ring-cut takes 0 (auto), 1 (static) or 2 (dynamic), not %s\n",
                     argv[i + 1]);
        std::exit(2);
      }
    } else if (flag == "--moe-front") {
      o.moe_front = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-gemm") {
      char* rest = nullptr;
      o.moe_gemm = static_cast<int>(std::strtol(argv[i + 1], &rest, 10));
      if (rest == argv[i + 1] || *rest != '\0' || o.moe_gemm < 0 ||
          o.moe_gemm > static_cast<int>(kernels::MoeCudaGemm::kStreamRing)) {
        std::fprintf(stderr, "--moe-gemm takes a MoeCudaGemm value 0..%d, not %s\n",
                     static_cast<int>(kernels::MoeCudaGemm::kStreamRing), argv[i + 1]);
        std::exit(2);
      }
    } else if (flag == "--fuse-boundary") {
      o.fuse_boundary = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--branch-splits") {
      o.branch_splits = std::atoll(argv[i + 1]);
      if (o.branch_splits < 0 || o.branch_splits > kernels::kLinearCudaMaxSplits) {
        std::fprintf(stderr, "--branch-splits must be in [0, %ld]\n",
                     static_cast<long>(kernels::kLinearCudaMaxSplits));
        std::exit(2);
      }
    } else if (flag == "--mixes-ctas") {
      o.mixes_ctas = std::atoll(argv[i + 1]);
      if (o.mixes_ctas < 0) {
        std::fprintf(stderr, "--mixes-ctas must be >= 0\n");
        std::exit(2);
      }
    } else if (flag == "--mhc-prepared") {
      o.mhc_prepared = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--narrow-fp32") {
      o.narrow_fp32 = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--candidate-blocks") {
      o.candidate_blocks = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--mixes-late") {
      o.mixes_late = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--float-pdl") {
      o.float_pdl = std::string(argv[i + 1]) == "auto" ? -1 : std::atoi(argv[i + 1]);
      if (o.float_pdl < -1 || o.float_pdl > 3) {
        std::fprintf(stderr, "--float-pdl must be auto, 0, 1, 2 or 3\n");
        std::exit(2);
      }
    } else if (flag == "--boundary-cluster") {
      o.boundary_cluster = std::atoll(argv[i + 1]);
      if (o.boundary_cluster != 0 && o.boundary_cluster != 1 && o.boundary_cluster != 2 &&
          o.boundary_cluster != 4 && o.boundary_cluster != 8) {
        std::fprintf(stderr, "--boundary-cluster must be 0, 1, 2, 4 or 8\n");
        std::exit(2);
      }
    } else if (flag == "--shared-splits") {
      o.shared_splits = std::atoll(argv[i + 1]);
      if (o.shared_splits < 0 || o.shared_splits > kernels::kLinearCudaMaxSplits) {
        std::fprintf(stderr, "--shared-splits must be in [0, %lld]\n",
                     static_cast<long long>(kernels::kLinearCudaMaxSplits));
        std::exit(2);
      }
    } else if (flag == "--ffn-mixes-ctas") {
      o.ffn_mixes_ctas = std::atoll(argv[i + 1]);
      if (o.ffn_mixes_ctas < 0) {
        std::fprintf(stderr, "--ffn-mixes-ctas must be >= 0\n");
        std::exit(2);
      }
    } else if (flag == "--shared-at") {
      o.shared_at = std::atoi(argv[i + 1]);
      if (o.shared_at != 0 && o.shared_at != 1) {
        std::fprintf(stderr, "--shared-at must be 0 or 1\n");
        std::exit(2);
      }
    } else if (flag == "--shared-ctas") {
      o.shared_ctas = std::atoll(argv[i + 1]);
      if (o.shared_ctas < 0 || o.shared_ctas > kernels::kLinearCudaMaxStreamCtas) {
        std::fprintf(stderr, "--shared-ctas must be in [0, %lld]\n",
                     static_cast<long long>(kernels::kLinearCudaMaxStreamCtas));
        std::exit(2);
      }
    } else if (flag == "--wo-a-trigger") {
      o.wo_a_trigger = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--wo-a-fp8") {
      o.wo_a_fp8 = std::atoi(argv[i + 1]);
    } else if (flag == "--wo-a-wide") {
      o.wo_a_wide = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--wo-a-swap-wgs") {
      o.wo_a_swap_wgs = std::atoi(argv[i + 1]);
    } else if (flag == "--wo-a-swap-chains") {
      o.wo_a_swap_chains = std::atoi(argv[i + 1]);
    } else if (flag == "--wqb-tma") {
      o.wqb_tma = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--wob-tma") {
      o.wob_tma = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--wqb-ctas") {
      o.wqb_ctas = std::atoll(argv[i + 1]);
      if (o.wqb_ctas < 0 || o.wqb_ctas > kernels::kLinearCudaMaxStreamCtas) {
        std::fprintf(stderr, "--wqb-ctas must be 0 .. %ld\n",
                     static_cast<long>(kernels::kLinearCudaMaxStreamCtas));
        std::exit(2);
      }
    } else if (flag == "--attn-mixes-at") {
      o.attn_mixes_at = std::atoi(argv[i + 1]);
      if (o.attn_mixes_at < 0 || o.attn_mixes_at > 3) {
        std::fprintf(stderr, "--attn-mixes-at must be 0, 1, 2 or 3\n");
        std::exit(2);
      }
    } else if (flag == "--ffn-mixes-late") {
      o.ffn_mixes_late = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--stack-qkv") {
      o.stack_qkv = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--wqb-qnorm") {
      o.wqb_qnorm = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-hc-post") {
      o.moe_hc_post = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-front-pdl") {
      o.moe_front_pdl = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--moe-early-ring") {
      o.moe_early_ring = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--layer-loop") {
      o.layer_loop = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--fuse-rope") {
      o.fuse_rope = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--trace") {
      o.trace = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--l2-prefetch") {
      o.l2_prefetch_list = ParseList(argv[i + 1]);
      for (int64_t mb : o.l2_prefetch_list) {
        if (mb < 0 || mb > 4096) {
          std::fprintf(stderr, "--l2-prefetch takes MB in [0, 4096], not %s\n", argv[i + 1]);
          std::exit(2);
        }
      }
      if (o.l2_prefetch_list.empty()) o.l2_prefetch_list = {0};
    } else if (flag == "--l2-prefetch-targets") {
      o.l2_prefetch_targets.clear();
      std::stringstream ss(argv[i + 1]);
      std::string t;
      while (std::getline(ss, t, ',')) {
        if (t != "wq" && t != "wo_a" && t != "wo_b" && t != "gate" && t != "wq_next") {
          std::fprintf(stderr,
                       "--l2-prefetch-targets takes wq, wo_a, wo_b, gate, wq_next; not %s\n",
                       t.c_str());
          std::exit(2);
        }
        o.l2_prefetch_targets.insert(t);
      }
    } else if (flag == "--attn-combine") {
      o.attn_combine = argv[i + 1];
      if (o.attn_combine != "auto" && o.attn_combine != "cluster" && o.attn_combine != "shared" &&
          o.attn_combine != "per-thread") {
        std::fprintf(stderr, "--attn-combine takes auto, cluster, shared or per-thread\n");
        std::exit(2);
      }
    } else if (flag == "--kv-form") {
      const std::string form = argv[i + 1];
      if (form != "rows" && form != "bf16") {
        std::fprintf(stderr, "--kv-form takes rows or bf16, not %s\n", form.c_str());
        std::exit(2);
      }
      o.kv_rows = form == "rows";
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace flashserve::bench

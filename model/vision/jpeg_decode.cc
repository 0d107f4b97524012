// JPEG decoding through libjpeg(-turbo). libjpeg reports errors through error_exit, which must
// not return; ours longjmps back into DecodeProtected. That function holds no object with a
// non-trivial destructor, everything it fills lives in the caller's JpegContext, and the caller
// always runs jpeg_destroy_decompress (safe in any state once the struct is zeroed), so a
// longjmp neither skips a destructor nor leaks.
#include <cstdio>  // jpeglib.h needs FILE
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <climits>
#include <csetjmp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/vision/image_decode.h"

namespace flashserve::model::vision {
namespace {

enum class JpegOutcome {
  kOk,
  kLibjpegError,  // error_exit; message in ctx->message
  kCorruptData,   // a corrupt-data warning while reject_corrupt is set
  kTruncated,     // the input ended before the image did
  kTooManyPixels,
  kTooManyScans,
  kUnsupported,  // component count PIL cannot open either, or a precision we cannot decode
};

struct JpegContext {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  JpegOutcome outcome = JpegOutcome::kOk;  // read after a longjmp
  char message[JMSG_LENGTH_MAX] = {};
  int message_code = 0;
  std::span<const uint8_t> input;
  int64_t max_pixels = 0;
  long max_memory = 0;  // NOLINT(runtime/int): libjpeg's type
  int max_scans = 0;
  bool reject_corrupt = true;
  std::vector<uint8_t> row;
  RgbImage* out = nullptr;
};

JpegContext* ContextOf(j_common_ptr cinfo) { return static_cast<JpegContext*>(cinfo->client_data); }

[[noreturn]] void Fail(JpegContext* ctx, JpegOutcome outcome) {
  ctx->outcome = outcome;
  std::longjmp(ctx->jump, 1);
}

void ErrorExit(j_common_ptr cinfo) {
  JpegContext* ctx = ContextOf(cinfo);
  (*cinfo->err->format_message)(cinfo, ctx->message);
  ctx->message_code = cinfo->err->msg_code;
  Fail(ctx, ctx->message_code == JERR_BAD_PRECISION ? JpegOutcome::kUnsupported
                                                    : JpegOutcome::kLibjpegError);
}

// Warnings that mean pixels were lost. Others (unknown JFIF revision, extraneous bytes between
// markers, an odd Adobe transform code, ...) leave the image intact and are ignored, as in PIL.
bool IsCorruptDataWarning(int code) {
  return code == JWRN_HUFF_BAD_CODE || code == JWRN_ARITH_BAD_CODE || code == JWRN_HIT_MARKER ||
         code == JWRN_MUST_RESYNC || code == JWRN_BOGUS_PROGRESSION || code == JWRN_NOT_SEQUENTIAL;
}

void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  JpegContext* ctx = ContextOf(cinfo);
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF) {
    (*cinfo->err->format_message)(cinfo, ctx->message);
    Fail(ctx, JpegOutcome::kTruncated);
  }
  if (ctx->reject_corrupt && IsCorruptDataWarning(code)) {
    (*cinfo->err->format_message)(cinfo, ctx->message);
    Fail(ctx, JpegOutcome::kCorruptData);
  }
}

void ProgressMonitor(j_common_ptr cinfo) {
  JpegContext* ctx = ContextOf(cinfo);
  if (ctx->cinfo.input_scan_number > ctx->max_scans) Fail(ctx, JpegOutcome::kTooManyScans);
}

// PIL's MULDIV255: a*b/255 rounded, in integers.
inline int MulDiv255(int a, int b) {
  const int tmp = a * b + 128;
  return ((tmp >> 8) + tmp) >> 8;
}

inline uint8_t Clip8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

void ConvertRow(const uint8_t* in, int components, int width, uint8_t* out) {
  for (int x = 0; x < width; ++x, out += 3) {
    if (components == 1) {
      out[0] = out[1] = out[2] = in[x];
    } else if (components == 3) {
      out[0] = in[3 * x];
      out[1] = in[3 * x + 1];
      out[2] = in[3 * x + 2];
    } else {
      // PIL reads every 4-component JPEG as inverted CMYK ("CMYK;I"), then cmyk2rgb.
      const uint8_t* p = in + 4 * x;
      const int nk = p[3];  // 255 - (255 - k)
      for (int c = 0; c < 3; ++c) out[c] = Clip8(nk - MulDiv255(255 - p[c], nk));
    }
  }
}

JpegOutcome DecodeProtected(JpegContext* ctx) {
  if (setjmp(ctx->jump)) return ctx->outcome;

  jpeg_create_decompress(&ctx->cinfo);
  ctx->cinfo.mem->max_memory_to_use = ctx->max_memory;
  ctx->progress.progress_monitor = ProgressMonitor;
  ctx->cinfo.progress = &ctx->progress;
  jpeg_mem_src(&ctx->cinfo, ctx->input.data(), static_cast<unsigned long>(ctx->input.size()));
  jpeg_read_header(&ctx->cinfo, TRUE);

  const uint64_t pixels = static_cast<uint64_t>(ctx->cinfo.image_width) * ctx->cinfo.image_height;
  if (pixels > static_cast<uint64_t>(ctx->max_pixels)) return JpegOutcome::kTooManyPixels;
  switch (ctx->cinfo.num_components) {
    case 1:
      ctx->cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case 3:
      ctx->cinfo.out_color_space = JCS_RGB;
      break;
    case 4:
      ctx->cinfo.out_color_space = JCS_CMYK;
      break;
    default:
      return JpegOutcome::kUnsupported;
  }
  jpeg_start_decompress(&ctx->cinfo);
  const int width = static_cast<int>(ctx->cinfo.output_width);
  const int height = static_cast<int>(ctx->cinfo.output_height);
  const int components = ctx->cinfo.output_components;
  ctx->out->width = width;
  ctx->out->height = height;
  ctx->out->rgb.resize(ctx->out->num_pixels() * 3);
  ctx->row.resize(static_cast<size_t>(width) * components);
  while (ctx->cinfo.output_scanline < ctx->cinfo.output_height) {
    const size_t y = ctx->cinfo.output_scanline;
    JSAMPROW row = ctx->row.data();
    // The memory source never suspends: at the end of the data it inserts an EOI after a
    // JWRN_JPEG_EOF warning, which EmitMessage turns into kTruncated.
    if (jpeg_read_scanlines(&ctx->cinfo, &row, 1) != 1) return JpegOutcome::kTruncated;
    ConvertRow(ctx->row.data(), components, width, ctx->out->rgb.data() + y * width * 3);
  }
  return JpegOutcome::kOk;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (DetectImageFormat(bytes) != ImageFormat::kJpeg) {
    return absl::InvalidArgumentError("jpeg: the input does not start with FF D8 FF");
  }
  if (bytes.size() > options.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("jpeg: input of ", bytes.size(),
                                                     " bytes exceeds the limit of ",
                                                     options.max_input_bytes, " bytes"));
  }
  RgbImage image;
  JpegContext ctx;
  ctx.input = bytes;
  ctx.max_pixels = options.max_pixels;
  ctx.max_memory = static_cast<long>(  // NOLINT(runtime/int)
      std::min<size_t>(options.max_jpeg_memory_bytes, static_cast<size_t>(LONG_MAX)));
  ctx.max_scans = options.max_jpeg_scans;
  ctx.reject_corrupt = options.reject_corrupt_jpeg;
  ctx.out = &image;
  ctx.cinfo.err = jpeg_std_error(&ctx.err);
  ctx.err.error_exit = ErrorExit;
  ctx.err.emit_message = EmitMessage;
  ctx.cinfo.client_data = &ctx;

  // jpeg_destroy_decompress is safe in every state, including a failed creation (mem stays
  // null); the guard also covers a std::bad_alloc thrown while sizing the output.
  struct DestroyOnExit {
    j_decompress_ptr cinfo;
    ~DestroyOnExit() { jpeg_destroy_decompress(cinfo); }
  } destroy{&ctx.cinfo};
  const JpegOutcome outcome = DecodeProtected(&ctx);

  const std::string size = absl::StrCat(ctx.cinfo.image_width, "x", ctx.cinfo.image_height);
  switch (outcome) {
    case JpegOutcome::kOk:
      return image;
    case JpegOutcome::kLibjpegError:
      if (ctx.message_code == JERR_OUT_OF_MEMORY || ctx.message_code == JERR_NO_BACKING_STORE) {
        return absl::ResourceExhaustedError(
            absl::StrCat("jpeg: ", size, " image needs more decoder memory than the limit of ",
                         options.max_jpeg_memory_bytes, " bytes (", ctx.message, ")"));
      }
      return absl::InvalidArgumentError(absl::StrCat("jpeg: corrupt image: ", ctx.message));
    case JpegOutcome::kCorruptData:
      return absl::InvalidArgumentError(absl::StrCat("jpeg: corrupt image data: ", ctx.message));
    case JpegOutcome::kTruncated:
      return absl::InvalidArgumentError(
          "jpeg: truncated data: the input ends before the image does");
    case JpegOutcome::kTooManyPixels:
      return absl::ResourceExhaustedError(absl::StrCat(
          "jpeg: ", size, " image exceeds the limit of ", options.max_pixels, " pixels"));
    case JpegOutcome::kTooManyScans:
      return absl::ResourceExhaustedError(
          absl::StrCat("jpeg: progressive image has more than ", options.max_jpeg_scans, " scans"));
    case JpegOutcome::kUnsupported:
      break;
  }
  if (ctx.message_code == JERR_BAD_PRECISION) {
    return absl::UnimplementedError(absl::StrCat("jpeg: ", ctx.message, " (only 8-bit samples)"));
  }
  return absl::UnimplementedError(absl::StrCat("jpeg: ", ctx.cinfo.num_components,
                                               "-component images are not supported (1, 3 or 4)"));
}

}  // namespace flashserve::model::vision

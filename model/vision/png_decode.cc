// PNG decoding through libpng. libpng reports errors by longjmp; the only function that calls
// setjmp (ReadPixelsProtected) holds no object with a non-trivial destructor, and everything it
// fills lives in a PngContext owned by the caller, so a longjmp skips no destructor and leaks
// nothing. The libpng structs are released by a guard in DecodePng on every path.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/vision/image_decode.h"

namespace flashserve::model::vision {
namespace {

enum class PngOutcome { kOk, kLibpngError, kTooManyPixels, kUnsupportedLayout };

struct PngContext {
  std::span<const uint8_t> input;
  size_t offset = 0;
  int64_t max_pixels = 0;
  char error[256] = {};
  // IHDR, filled by ReadPixelsProtected.
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int bit_depth = 0;
  int color_type = 0;
  // The rows libpng hands back after our transformations.
  int out_channels = 0;
  int out_depth = 0;
  std::vector<uint8_t> raster;      // one row, or the whole image when interlaced
  std::vector<png_bytep> row_ptrs;  // interlaced only
  RgbImage* out = nullptr;
};

void PngErrorFn(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof(ctx->error), "%s", message);
  png_longjmp(png, 1);
}

// Warnings (e.g. a bad CRC on an ancillary chunk, which libpng then skips) do not stop decoding:
// PIL decodes such files too.
void PngWarningFn(png_structp, png_const_charp) {}

void PngReadFn(png_structp png, png_bytep data, size_t length) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > ctx->input.size() - ctx->offset) {
    png_error(png, "truncated data: the input ends before the image data does");
  }
  std::memcpy(data, ctx->input.data() + ctx->offset, length);
  ctx->offset += length;
}

// Converts one transformed row (out_channels samples of out_depth bits each) to RGB, following
// PIL's modes: see image_decode.h. `gray16_clamps` is true for a 16-bit gray source (PIL I;16).
void ConvertRow(const uint8_t* in, int channels, int depth, bool gray16_clamps, uint32_t width,
                uint8_t* out) {
  const int bytes_per_sample = depth / 8;
  const int stride = channels * bytes_per_sample;
  for (uint32_t x = 0; x < width; ++x, in += stride, out += 3) {
    if (channels <= 2) {  // gray or gray+alpha: alpha dropped
      uint8_t v = in[0];  // 8-bit sample, or the high byte of a big-endian 16-bit one
      if (bytes_per_sample == 2 && gray16_clamps) v = in[0] != 0 ? 255 : in[1];
      out[0] = out[1] = out[2] = v;
    } else {  // RGB or RGBA: alpha dropped; 16-bit samples keep their high byte
      out[0] = in[0];
      out[1] = in[bytes_per_sample];
      out[2] = in[2 * bytes_per_sample];
    }
  }
}

// Every libpng call happens here. Returns kLibpngError after a longjmp (message in ctx->error).
PngOutcome ReadPixelsProtected(png_structp png, png_infop info, PngContext* ctx) {
  if (setjmp(png_jmpbuf(png))) return PngOutcome::kLibpngError;

  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &ctx->width, &ctx->height, &ctx->bit_depth, &ctx->color_type, &interlace,
               nullptr, nullptr);
  if (static_cast<uint64_t>(ctx->width) * ctx->height > static_cast<uint64_t>(ctx->max_pixels)) {
    return PngOutcome::kTooManyPixels;
  }
  // Palette -> RGB (tRNS, if any, becomes a fourth channel that we drop); gray below 8 bits ->
  // 8 bits by bit replication, as PIL's 1 / L;2 / L;4 unpackers do. No gamma, no 16->8 strip:
  // the 16-bit rules differ per colour type and are applied in ConvertRow.
  if (ctx->color_type == PNG_COLOR_TYPE_PALETTE) {
    png_set_palette_to_rgb(png);
  } else if (ctx->color_type == PNG_COLOR_TYPE_GRAY && ctx->bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  ctx->out_channels = png_get_channels(png, info);
  ctx->out_depth = png_get_bit_depth(png, info);
  if ((ctx->out_depth != 8 && ctx->out_depth != 16) || ctx->out_channels < 1 ||
      ctx->out_channels > 4) {
    return PngOutcome::kUnsupportedLayout;
  }
  const size_t row_bytes = png_get_rowbytes(png, info);
  const bool gray16_clamps = ctx->color_type == PNG_COLOR_TYPE_GRAY && ctx->bit_depth == 16;

  ctx->out->width = static_cast<int>(ctx->width);
  ctx->out->height = static_cast<int>(ctx->height);
  ctx->out->rgb.resize(ctx->out->num_pixels() * 3);
  const size_t out_stride = static_cast<size_t>(ctx->width) * 3;
  if (passes > 1) {
    ctx->raster.resize(row_bytes * ctx->height);
    ctx->row_ptrs.resize(ctx->height);
    for (png_uint_32 y = 0; y < ctx->height; ++y) ctx->row_ptrs[y] = &ctx->raster[y * row_bytes];
    png_read_image(png, ctx->row_ptrs.data());
    for (png_uint_32 y = 0; y < ctx->height; ++y) {
      ConvertRow(ctx->row_ptrs[y], ctx->out_channels, ctx->out_depth, gray16_clamps, ctx->width,
                 ctx->out->rgb.data() + y * out_stride);
    }
  } else {
    ctx->raster.resize(row_bytes);
    for (png_uint_32 y = 0; y < ctx->height; ++y) {
      png_read_row(png, ctx->raster.data(), nullptr);
      ConvertRow(ctx->raster.data(), ctx->out_channels, ctx->out_depth, gray16_clamps, ctx->width,
                 ctx->out->rgb.data() + y * out_stride);
    }
  }
  return PngOutcome::kOk;
}

// Owns the libpng read and info structs.
class PngReadGuard {
 public:
  PngReadGuard(png_structp png, png_infop info) : png_(png), info_(info) {}
  ~PngReadGuard() { png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr); }
  PngReadGuard(const PngReadGuard&) = delete;
  PngReadGuard& operator=(const PngReadGuard&) = delete;

 private:
  png_structp png_;
  png_infop info_;
};

}  // namespace

absl::StatusOr<RgbImage> DecodePng(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (DetectImageFormat(bytes) != ImageFormat::kPng) {
    return absl::InvalidArgumentError("png: the input does not start with the PNG signature");
  }
  if (bytes.size() > options.max_input_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("png: input of ", bytes.size(),
                                                     " bytes exceeds the limit of ",
                                                     options.max_input_bytes, " bytes"));
  }
  RgbImage image;
  PngContext ctx;
  ctx.input = bytes;
  ctx.max_pixels = options.max_pixels;
  ctx.out = &image;

  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, PngErrorFn, PngWarningFn);
  if (png == nullptr) return absl::ResourceExhaustedError("png: libpng could not start");
  png_infop info = png_create_info_struct(png);
  PngReadGuard guard(png, info);
  if (info == nullptr) return absl::ResourceExhaustedError("png: libpng could not start");
  png_set_read_fn(png, &ctx, PngReadFn);
  // PNG allows up to 2^31-1 per side; our own max_pixels check runs right after the header.
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);

  switch (ReadPixelsProtected(png, info, &ctx)) {
    case PngOutcome::kOk:
      return image;
    case PngOutcome::kLibpngError:
      return absl::InvalidArgumentError(
          absl::StrCat("png: corrupt or truncated image: ", ctx.error));
    case PngOutcome::kTooManyPixels:
      return absl::ResourceExhaustedError(absl::StrCat("png: ", ctx.width, "x", ctx.height,
                                                       " image exceeds the limit of ",
                                                       options.max_pixels, " pixels"));
    case PngOutcome::kUnsupportedLayout:
      break;
  }
  return absl::UnimplementedError(absl::StrCat("png: unsupported pixel layout (", ctx.out_channels,
                                               " channels of ", ctx.out_depth, " bits)"));
}

}  // namespace flashserve::model::vision

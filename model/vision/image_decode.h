// Image decoding for the vision path: PNG (libpng) and JPEG (libjpeg) from an in-memory buffer to
// the RGB raster PIL's `Image.open(...).convert("RGB")` yields, which is what the reference's
// image_processor.load_image feeds to its resize plan.
//
//   DecodeOptions options;  // defaults: 50 MP, 64 MiB input
//   ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options));
//
// The format is detected from the magic bytes, never from a name; nothing is fetched.
//
// Conversion to RGB, as PIL does it (alpha is dropped, never composited onto a background):
//   PNG  gray 1/2/4/8 bit: bits replicated to 8 (v*255, v*85, v*17), then R=G=B.
//        gray 16 bit: PIL opens it as mode I;16 and its I;16->RGB conversion clamps, so a sample
//          v becomes min(v, 255) (not v >> 8).
//        gray+alpha, RGB, RGBA at 16 bit: the high byte of each sample (PIL's ;16B unpackers).
//        palette (any depth): the PLTE colour; tRNS is ignored.  Gamma, sRGB/iCCP, sBIT ignored.
//        Interlaced images are supported. Decoding stops after the last pixel row: chunks after
//        the image data (IEND included) are not read, as PIL does not require them either.
//   JPEG libjpeg's defaults (ISLOW IDCT, fancy upsampling), as PIL uses them; baseline,
//        progressive and arithmetic-coded 8-bit files. Grayscale -> R=G=B. Four-component files
//        (CMYK, or YCCK converted by libjpeg to CMYK) are inverted unconditionally as PIL does
//        ("CMYK;I" rawmode) and then converted with PIL's cmyk2rgb:
//          nk = 255 - k', out = clip(nk - MulDiv255(c', nk)), c' = 255 - c_libjpeg.
//        EXIF orientation is not applied (the reference does not apply it).
//
// Errors (all absl::Status, never a crash, and no memory is leaked on any path):
//   InvalidArgument  empty input, unknown format (names the first bytes), corrupt or truncated
//                    data (the message carries libpng's / libjpeg's reason), zero-sized image.
//   ResourceExhausted  input larger than max_input_bytes, width*height above max_pixels, or a
//                    JPEG needing more decoder memory / more scans than allowed.
//   Unimplemented    a valid file of a kind not handled (e.g. 12-bit JPEG), naming it.
//
// Thread safety: all functions are reentrant; concurrent calls on different buffers are safe.
// Cost: one pass over the data; memory ~3 bytes per pixel for the result plus the decoder's own
// working set (for an interlaced PNG a full raster at its native depth; for a progressive JPEG
// libjpeg's coefficient buffers, bounded by max_jpeg_memory_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/vision/image.h"

namespace flashserve::model::vision {

enum class ImageFormat { kUnknown, kPng, kJpeg };

// "png" / "jpeg" / "unknown" (static storage).
std::string_view ImageFormatName(ImageFormat format);

// Looks at the signature only: PNG = the 8-byte PNG signature; JPEG = FF D8 FF.
ImageFormat DetectImageFormat(std::span<const uint8_t> bytes);

struct DecodeOptions {
  // Largest width*height accepted (checked from the header, before any pixel memory is
  // allocated). Default 50 megapixels.
  int64_t max_pixels = 50'000'000;
  // Largest encoded input accepted. Default 64 MiB.
  size_t max_input_bytes = 64u << 20;
  // Cap on libjpeg's large working buffers (progressive coefficient storage). Default 1 GiB.
  size_t max_jpeg_memory_bytes = 1u << 30;
  // Progressive JPEGs with more scans than this are rejected (a known CPU-exhaustion vector).
  int max_jpeg_scans = 500;
  // When true (default), libjpeg's corrupt-data warnings (bad Huffman / arithmetic code,
  // premature end of a data segment, resync, bogus progression, invalid SOS) are errors. PIL
  // ignores them and keeps whatever libjpeg recovers; a server should rather refuse the image.
  // Harmless warnings (extraneous bytes between markers, unknown JFIF revision, ...) never are.
  // A JPEG that ends before its image data does is always an error (as in PIL).
  bool reject_corrupt_jpeg = true;

  // InvalidArgument if a limit is not positive.
  absl::Status Validate() const;
};

// Decodes a PNG or JPEG held in `bytes` (not retained) to RGB. See the file comment for the
// conversion rules and the errors.
absl::StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> bytes,
                                     const DecodeOptions& options = {});

// The format-specific decoders (DecodeImage dispatches to them after checking the options and
// the input size). Same contract as DecodeImage; the input must carry that format's signature.
absl::StatusOr<RgbImage> DecodePng(std::span<const uint8_t> bytes, const DecodeOptions& options);
absl::StatusOr<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const DecodeOptions& options);

}  // namespace flashserve::model::vision

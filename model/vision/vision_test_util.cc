#include "model/vision/vision_test_util.h"

#include <openssl/evp.h>
#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include "common/base/check.h"

namespace flashserve::model::vision::testing {

std::string RepoPath(const std::string& relative) {
  const char* root = std::getenv("FS_SOURCE_DIR");
  return (root != nullptr && *root != '\0') ? std::string(root) + "/" + relative : relative;
}

std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

RgbImage SyntheticImage(int width, int height) {
  RgbImage image = RgbImage::Filled(width, height, 0, 0, 0);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        int v;
        if (((x >> 3) + (y >> 3)) % 3 == 0) {
          const uint32_t n = (static_cast<uint32_t>(x) * 2654435761u) ^
                             (static_cast<uint32_t>(y) * 40503u) ^ static_cast<uint32_t>(c * 97);
          v = static_cast<int>((n >> 7) & 0xFF);
        } else if (c == 0) {
          v = x * 255 / std::max(width - 1, 1);
        } else if (c == 1) {
          v = y * 255 / std::max(height - 1, 1);
        } else {
          v = ((x + 2 * y) * 5) & 0xFF;
        }
        image.pixel(x, y)[c] = static_cast<uint8_t>(v);
      }
    }
  }
  return image;
}

std::string Sha256Hex(const std::vector<uint8_t>& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  CHECK(EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) == 1);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

namespace {

void PngWrite(png_structp png, png_bytep data, size_t length) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + length);
}
void PngFlush(png_structp) {}

int ChannelsOf(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_PALETTE:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    default:
      return 4;
  }
}

}  // namespace

std::vector<uint8_t> EncodePng(int width, int height, int color_type, int bit_depth,
                               const std::vector<uint16_t>& samples, bool interlaced,
                               const std::vector<uint8_t>& palette) {
  const int channels = ChannelsOf(color_type);
  CHECK_EQ(samples.size(), static_cast<size_t>(width) * height * channels);
  // Pack rows the PNG way: 16-bit big-endian, sub-byte depths MSB first.
  const size_t row_bytes = (static_cast<size_t>(width) * channels * bit_depth + 7) / 8;
  std::vector<std::vector<uint8_t>> rows(height, std::vector<uint8_t>(row_bytes, 0));
  for (int y = 0; y < height; ++y) {
    for (int i = 0; i < width * channels; ++i) {
      const uint16_t s = samples[static_cast<size_t>(y) * width * channels + i];
      if (bit_depth == 16) {
        rows[y][2 * i] = static_cast<uint8_t>(s >> 8);
        rows[y][2 * i + 1] = static_cast<uint8_t>(s & 0xFF);
      } else if (bit_depth == 8) {
        rows[y][i] = static_cast<uint8_t>(s);
      } else {
        const int bit = i * bit_depth;
        rows[y][bit / 8] |= static_cast<uint8_t>(s << (8 - bit_depth - bit % 8));
      }
    }
  }
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  CHECK(png != nullptr);
  png_infop info = png_create_info_struct(png);
  CHECK(info != nullptr);
  if (setjmp(png_jmpbuf(png))) CHECK(false) << "libpng failed while writing a test image";
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, width, height, bit_depth, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> plte;
  for (size_t i = 0; i + 2 < palette.size(); i += 3) {
    plte.push_back({palette[i], palette[i + 1], palette[i + 2]});
  }
  if (!plte.empty()) png_set_PLTE(png, info, plte.data(), static_cast<int>(plte.size()));
  std::vector<png_bytep> row_ptrs;
  for (auto& row : rows) row_ptrs.push_back(row.data());
  png_set_rows(png, info, row_ptrs.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::vector<uint8_t> EncodeJpeg(int width, int height, int components,
                                const std::vector<uint8_t>& samples, int quality,
                                bool progressive) {
  CHECK_EQ(samples.size(), static_cast<size_t>(width) * height * components);
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);  // default error_exit exits the test binary: fine here
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int): libjpeg's type
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : (components == 3 ? JCS_RGB : JCS_CMYK);
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(
        &samples[static_cast<size_t>(cinfo.next_scanline) * width * components]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

}  // namespace flashserve::model::vision::testing

// Test helpers for model/vision: synthetic images (mirroring testdata/make_goldens.py), file
// access relative to the repository root, SHA-256, and PNG / JPEG encoders built on libpng /
// libjpeg so that decoder tests can create real files and then damage them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/vision/image.h"

namespace flashserve::model::vision::testing {

// The repository root: $FS_SOURCE_DIR, else the working directory (tests run from the root).
std::string RepoPath(const std::string& relative);

// The whole file; aborts the test binary (CHECK) if it cannot be read.
std::vector<uint8_t> ReadFileBytes(const std::string& path);

// synthetic_pixel() of make_goldens.py: noise blocks plus gradients.
RgbImage SyntheticImage(int width, int height);

std::string Sha256Hex(const std::vector<uint8_t>& bytes);

// A PNG of `samples` (row-major, `channels` interleaved samples per pixel, big-endian 16-bit
// values when bit_depth is 16, one sample per byte for depths < 8) written by libpng.
// color_type is a PNG_COLOR_TYPE_*; palette (RGB triples) only for palette images.
std::vector<uint8_t> EncodePng(int width, int height, int color_type, int bit_depth,
                               const std::vector<uint16_t>& samples, bool interlaced = false,
                               const std::vector<uint8_t>& palette = {});

// A JPEG written by libjpeg from interleaved 8-bit samples with `components` = 1 (grayscale),
// 3 (RGB) or 4 (CMYK, written with libjpeg's Adobe marker).
std::vector<uint8_t> EncodeJpeg(int width, int height, int components,
                                const std::vector<uint8_t>& samples, int quality, bool progressive);

}  // namespace flashserve::model::vision::testing

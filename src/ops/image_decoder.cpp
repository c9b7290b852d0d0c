// ImageDecoder: encoded bytes (uint8 [N]) -> uint8 [H, W, 3] (RGB or BGR) or [H, W, 1]
// (grayscale). The format is read from the bytes' signature. JPEG, PNG, TIFF, WebP and
// JPEG 2000 decode through their reference libraries (libjpeg-turbo, libpng, libtiff, libwebp,
// OpenJPEG); BMP and binary PNM are simple enough to read here.
// jpeglib.h needs size_t and FILE declared before it.
#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jpeglib.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "ops/common.h"
#include "ops/image_decode.h"

namespace onyx {

namespace {

// The most pixels an image may declare: its header is data, and the decoders allocate what it
// says before the session's memory budget sees it (2^27 pixels: 384 MiB of RGB).
constexpr uint64_t kMaxPixels = uint64_t{1} << 27;

void check_pixels(uint64_t w, uint64_t h, const char* format) {
  ONYX_CHECK(w > 0 && h > 0 && w <= kMaxPixels && h <= kMaxPixels && w * h <= kMaxPixels, "the ", format,
             " image declares ", w, "x", h, " pixels (at most ", kMaxPixels, " are decoded)");
}

using Rgb = RgbImage;

// ---- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

Rgb decode_jpeg(const uint8_t* data, size_t size) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = [](j_common_ptr c) {
    auto* e = reinterpret_cast<JpegError*>(c->err);
    e->mgr.format_message(c, e->message);
    longjmp(e->jump, 1);
  };
  Rgb img;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw Error(cat("the JPEG data does not decode: ", err.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (uint64_t{cinfo.image_width} * cinfo.image_height > kMaxPixels || !cinfo.image_width || !cinfo.image_height) {
    const uint64_t w = cinfo.image_width, h = cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    check_pixels(w, h, "JPEG");
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img.h = cinfo.output_height;
  img.w = cinfo.output_width;
  img.px.resize(static_cast<size_t>(img.h * img.w * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.px.data() + static_cast<size_t>(cinfo.output_scanline) * img.w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

// ---- PNG (libpng's simplified API: any PNG to 8-bit RGB) ----

Rgb decode_png(const uint8_t* data, size_t size) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  ONYX_CHECK(png_image_begin_read_from_memory(&image, data, size), "the PNG data does not decode: ", image.message);
  if (uint64_t{image.width} * image.height > kMaxPixels || !image.width || !image.height) {
    const uint64_t w = image.width, h = image.height;
    png_image_free(&image);
    check_pixels(w, h, "PNG");
  }
  image.format = PNG_FORMAT_RGB;
  Rgb img;
  img.h = image.height;
  img.w = image.width;
  img.px.resize(PNG_IMAGE_SIZE(image));
  const bool ok = png_image_finish_read(&image, nullptr, img.px.data(), 0, nullptr);
  const std::string message = image.message;
  png_image_free(&image);
  ONYX_CHECK(ok, "the PNG data does not decode: ", message);
  return img;
}

// ---- TIFF (libtiff over the bytes in memory) ----

struct MemoryFile {
  const uint8_t* data;
  size_t size, at = 0;
};

Rgb decode_tiff(const uint8_t* data, size_t size) {
  MemoryFile file{data, size};
  TIFFSetErrorHandler(nullptr);
  TIFFSetWarningHandler(nullptr);
  auto read = [](thandle_t h, tdata_t buf, tsize_t n) -> tsize_t {
    auto* f = static_cast<MemoryFile*>(h);
    const size_t k = std::min(static_cast<size_t>(n), f->size - f->at);
    std::memcpy(buf, f->data + f->at, k);
    f->at += k;
    return static_cast<tsize_t>(k);
  };
  auto write = [](thandle_t, tdata_t, tsize_t) -> tsize_t { return 0; };
  auto seek = [](thandle_t h, toff_t off, int whence) -> toff_t {
    auto* f = static_cast<MemoryFile*>(h);
    const uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->at : f->size;
    const uint64_t to = base + off;
    if (to > f->size) return static_cast<toff_t>(-1);
    f->at = static_cast<size_t>(to);
    return to;
  };
  auto close = [](thandle_t) { return 0; };
  auto fsize = [](thandle_t h) -> toff_t { return static_cast<MemoryFile*>(h)->size; };
  auto map = [](thandle_t, tdata_t*, toff_t*) { return 0; };
  auto unmap = [](thandle_t, tdata_t, toff_t) {};
  std::unique_ptr<TIFF, decltype(&TIFFClose)> tif(
      TIFFClientOpen("image", "rm", &file, read, write, seek, close, fsize, map, unmap), TIFFClose);
  ONYX_CHECK(tif, "the TIFF data does not open");
  uint32_t w = 0, h = 0;
  TIFFGetField(tif.get(), TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif.get(), TIFFTAG_IMAGELENGTH, &h);
  check_pixels(w, h, "TIFF");
  std::vector<uint32_t> rgba(static_cast<size_t>(w) * h);
  ONYX_CHECK(TIFFReadRGBAImageOriented(tif.get(), w, h, rgba.data(), ORIENTATION_TOPLEFT, 0),
             "the TIFF data does not decode");
  Rgb img{h, w, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  for (size_t i = 0; i < rgba.size(); ++i) {
    img.px[i * 3] = static_cast<uint8_t>(TIFFGetR(rgba[i]));
    img.px[i * 3 + 1] = static_cast<uint8_t>(TIFFGetG(rgba[i]));
    img.px[i * 3 + 2] = static_cast<uint8_t>(TIFFGetB(rgba[i]));
  }
  return img;
}

// ---- WebP ----

Rgb decode_webp(const uint8_t* data, size_t size) {
  int w = 0, h = 0;
  ONYX_CHECK(WebPGetInfo(data, size, &w, &h), "the WebP data does not decode");
  check_pixels(static_cast<uint64_t>(w), static_cast<uint64_t>(h), "WebP");
  std::unique_ptr<uint8_t, decltype(&WebPFree)> px(WebPDecodeRGB(data, size, &w, &h), WebPFree);
  ONYX_CHECK(px, "the WebP data does not decode");
  Rgb img{h, w, {}};
  img.px.assign(px.get(), px.get() + static_cast<size_t>(w) * h * 3);
  return img;
}

// ---- JPEG 2000 (OpenJPEG; the JP2 box format or a bare codestream) ----

Rgb decode_jpeg2000(const uint8_t* data, size_t size, bool jp2) {
  MemoryFile file{data, size};
  std::unique_ptr<opj_stream_t, decltype(&opj_stream_destroy)> stream(opj_stream_create(1 << 16, OPJ_TRUE),
                                                                       opj_stream_destroy);
  opj_stream_set_user_data(stream.get(), &file, nullptr);
  opj_stream_set_user_data_length(stream.get(), size);
  opj_stream_set_read_function(stream.get(), [](void* buf, OPJ_SIZE_T n, void* u) -> OPJ_SIZE_T {
    auto* f = static_cast<MemoryFile*>(u);
    if (f->at >= f->size) return static_cast<OPJ_SIZE_T>(-1);
    const size_t k = std::min(n, f->size - f->at);
    std::memcpy(buf, f->data + f->at, k);
    f->at += k;
    return k;
  });
  opj_stream_set_skip_function(stream.get(), [](OPJ_OFF_T n, void* u) -> OPJ_OFF_T {
    auto* f = static_cast<MemoryFile*>(u);
    const int64_t to = std::clamp<int64_t>(static_cast<int64_t>(f->at) + n, 0, static_cast<int64_t>(f->size));
    const OPJ_OFF_T moved = to - static_cast<int64_t>(f->at);
    f->at = static_cast<size_t>(to);
    return moved;
  });
  opj_stream_set_seek_function(stream.get(), [](OPJ_OFF_T to, void* u) -> OPJ_BOOL {
    auto* f = static_cast<MemoryFile*>(u);
    if (to < 0 || static_cast<uint64_t>(to) > f->size) return OPJ_FALSE;
    f->at = static_cast<size_t>(to);
    return OPJ_TRUE;
  });
  std::unique_ptr<opj_codec_t, decltype(&opj_destroy_codec)> codec(
      opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K), opj_destroy_codec);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  ONYX_CHECK(opj_setup_decoder(codec.get(), &params), "the JPEG 2000 decoder does not start");
  opj_image_t* raw = nullptr;
  ONYX_CHECK(opj_read_header(stream.get(), codec.get(), &raw), "the JPEG 2000 header does not decode");
  std::unique_ptr<opj_image_t, decltype(&opj_image_destroy)> image(raw, opj_image_destroy);
  ONYX_CHECK(image->x1 > image->x0 && image->y1 > image->y0, "the JPEG 2000 image has no pixels");
  check_pixels(image->x1 - image->x0, image->y1 - image->y0, "JPEG 2000");
  ONYX_CHECK(image->numcomps >= 1 && image->numcomps <= 4, "JPEG 2000 images of ", image->numcomps,
             " components are not supported");
  ONYX_CHECK(opj_decode(codec.get(), stream.get(), image.get()) && opj_end_decompress(codec.get(), stream.get()),
             "the JPEG 2000 data does not decode");
  ONYX_CHECK(image->numcomps == 1 || image->numcomps >= 3, "JPEG 2000 images of ", image->numcomps,
             " components are not supported");
  const opj_image_comp_t* c = image->comps;
  for (OPJ_UINT32 k = 1; k < std::min<OPJ_UINT32>(image->numcomps, 3); ++k)
    ONYX_CHECK(c[k].w == c[0].w && c[k].h == c[0].h, "JPEG 2000 components of different sizes are not supported");
  Rgb img{c[0].h, c[0].w, std::vector<uint8_t>(static_cast<size_t>(c[0].w) * c[0].h * 3)};
  for (int ch = 0; ch < 3; ++ch) {
    const opj_image_comp_t& comp = c[image->numcomps == 1 ? 0 : ch];
    ONYX_CHECK(comp.data && comp.prec >= 1 && comp.prec <= 16, "JPEG 2000 components of ", comp.prec,
               " bits are not supported (1 to 16)");
    const int shift = static_cast<int>(comp.prec) - 8;  // to 8 bits
    for (size_t i = 0; i < static_cast<size_t>(img.w * img.h); ++i) {
      int v = comp.data[i] + (comp.sgnd ? 1 << (comp.prec - 1) : 0);
      v = shift > 0 ? v >> shift : v << -shift;
      img.px[i * 3 + ch] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  }
  return img;
}

// ---- BMP (uncompressed 24- and 32-bit, and 8-bit with a palette) ----

uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24; }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

Rgb decode_bmp(const uint8_t* data, size_t size) {
  ONYX_CHECK(size >= 54, "the BMP data is shorter than its headers (", size, " bytes)");
  const uint32_t offset = le32(data + 10), header = le32(data + 14);
  ONYX_CHECK(header >= 40 && 14 + uint64_t{header} <= size, "the BMP header of ", header, " bytes is not supported");
  const int32_t w = static_cast<int32_t>(le32(data + 18)), hs = static_cast<int32_t>(le32(data + 22));
  const uint16_t bpp = le16(data + 28);
  const uint32_t compression = le32(data + 30);
  ONYX_CHECK(compression == 0 || (compression == 3 && bpp == 32), "compressed BMP (method ", compression,
             ") is not supported");
  ONYX_CHECK(bpp == 24 || bpp == 32 || bpp == 8, "BMP of ", bpp, " bits a pixel is not supported");
  ONYX_CHECK(w > 0 && hs != 0 && hs != INT32_MIN, "the BMP image is ", w, "x", hs);
  check_pixels(static_cast<uint64_t>(w), static_cast<uint64_t>(std::abs(int64_t{hs})), "BMP");
  const int64_t h = std::abs(int64_t{hs});
  const int64_t stride = (int64_t{w} * bpp / 8 + 3) / 4 * 4;
  ONYX_CHECK(offset + stride * h <= static_cast<int64_t>(size), "the BMP pixel data runs past the end");
  const uint8_t* palette = data + 14 + header;
  const uint32_t colors = le32(data + 46) ? le32(data + 46) : 256;
  if (bpp == 8)
    ONYX_CHECK(colors <= 256 && 14 + uint64_t{header} + 4 * uint64_t{colors} <= size, "the BMP palette is cut short");
  Rgb img{h, w, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = data + offset + (hs > 0 ? h - 1 - y : y) * stride;  // bottom-up unless negative
    for (int64_t x = 0; x < w; ++x) {
      if (bpp == 8) ONYX_CHECK(row[x] < colors, "BMP pixel (", x, ", ", y, ") names color ", int{row[x]}, " of ", colors);
      const uint8_t* p = bpp == 8 ? palette + 4 * row[x] : row + x * (bpp / 8);  // stored B, G, R
      uint8_t* o = img.px.data() + (y * w + x) * 3;
      o[0] = p[2], o[1] = p[1], o[2] = p[0];
    }
  }
  return img;
}

// ---- PNM (binary P5 gray and P6 color, up to 8 bits) ----

Rgb decode_pnm(const uint8_t* data, size_t size) {
  size_t at = 2;
  auto number = [&]() -> int64_t {
    while (at < size && (std::isspace(data[at]) || data[at] == '#')) {
      if (data[at] == '#') while (at < size && data[at] != '\n') ++at;
      else ++at;
    }
    int64_t v = 0;
    const size_t start = at;
    while (at < size && std::isdigit(data[at]) && v < (int64_t{1} << 32)) v = v * 10 + (data[at++] - '0');
    ONYX_CHECK(at > start, "the PNM header is malformed");
    return v;
  };
  const bool color = data[1] == '6';
  const int64_t w = number(), h = number(), max = number();
  check_pixels(static_cast<uint64_t>(w), static_cast<uint64_t>(h), "PNM");
  ONYX_CHECK(max > 0 && max <= 255, "PNM of maximum value ", max, " is not supported (8 bits at most)");
  ++at;  // the single whitespace before the pixels
  const int64_t ch = color ? 3 : 1;
  ONYX_CHECK(at + static_cast<size_t>(w * h * ch) <= size, "the PNM pixel data runs past the end");
  Rgb img{h, w, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
  for (int64_t i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) {
      const int v = data[at + i * ch + (color ? c : 0)];
      img.px[i * 3 + c] = static_cast<uint8_t>(max == 255 ? v : (v * 255 + max / 2) / max);
    }
  return img;
}

}  // namespace

RgbImage decode_image(const uint8_t* d, size_t n) {
  auto starts = [&](const char* sig, size_t len) { return n >= len && std::memcmp(d, sig, len) == 0; };
  if (starts("\xff\xd8\xff", 3)) return decode_jpeg(d, n);
  if (starts("\x89PNG\r\n\x1a\n", 8)) return decode_png(d, n);
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return decode_tiff(d, n);
  if (n >= 12 && starts("RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0) return decode_webp(d, n);
  if (starts("\0\0\0\x0cjP  \r\n\x87\n", 12)) return decode_jpeg2000(d, n, true);
  if (starts("\xff\x4f\xff\x51", 4)) return decode_jpeg2000(d, n, false);
  if (starts("BM", 2)) return decode_bmp(d, n);
  if (starts("P5", 2) || starts("P6", 2)) return decode_pnm(d, n);
  throw Error("the data is not an image in a format onyx decodes (JPEG, PNG, TIFF, WebP, JPEG 2000, BMP, binary PNM)");
}

namespace {

void infer_image_decoder(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(0) == DType::kUInt8, "encoded_stream must be uint8, got ", dtype_name(ctx.input_dtype(0)));
  const std::string format = ctx.attr_string("pixel_format", "RGB");
  ONYX_CHECK(format == "RGB" || format == "BGR" || format == "Grayscale",
             "pixel_format must be RGB, BGR or Grayscale, got \"", format, "\"");
  PartialShape out = PartialShape::of_rank(3);  // [H, W, C]: H and W are in the data
  out.dims[2] = format == "Grayscale" ? 1 : 3;
  ctx.set_output(0, DType::kUInt8, out);
}

void image_decoder_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  ONYX_CHECK(in.rank() == 1, "encoded_stream must be 1-D, got ", in.type_str());
  Rgb img = decode_image(static_cast<const uint8_t*>(in.raw()), static_cast<size_t>(in.numel()));
  const std::string format = ctx.attr_string("pixel_format", "RGB");
  const int64_t n = img.h * img.w;
  if (format == "Grayscale") {
    Tensor& y = ctx.allocate_output(0, DType::kUInt8, Shape{img.h, img.w, 1});
    // ITU-R 601-2 luma in 16-bit fixed point (what Pillow's RGB -> L conversion computes).
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* p = img.px.data() + i * 3;
      y.data<uint8_t>()[i] = static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
    }
    return;
  }
  Tensor& y = ctx.allocate_output(0, DType::kUInt8, Shape{img.h, img.w, 3});
  uint8_t* o = y.data<uint8_t>();
  std::memcpy(o, img.px.data(), img.px.size());
  if (format == "BGR")
    for (int64_t i = 0; i < n; ++i) std::swap(o[i * 3], o[i * 3 + 2]);
}

}  // namespace

void register_image_ops(OpRegistry& r) { r.add(onnx_op("ImageDecoder", 20, infer_image_decoder, image_decoder_kernel)); }

}  // namespace onyx

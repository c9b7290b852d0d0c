#include "onyx/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace onyx {

namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<f2", DType::kFloat16}, {"|i1", DType::kInt8},
    {"<i2", DType::kInt16},   {"<i4", DType::kInt32},   {"<i8", DType::kInt64},   {"|u1", DType::kUInt8},
    {"<u2", DType::kUInt16},  {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64},  {"|b1", DType::kBool},
};

std::string header_value(const std::string& header, const std::string& key) {
  size_t k = header.find("'" + key + "'");
  ONYX_CHECK(k != std::string::npos, "header has no '", key, "'");
  size_t colon = header.find(':', k);
  ONYX_CHECK(colon != std::string::npos, "malformed header near '", key, "'");
  size_t start = header.find_first_not_of(' ', colon + 1);
  size_t end;
  if (header[start] == '(') end = header.find(')', start) + 1;
  else if (header[start] == '\'') end = header.find('\'', start + 1) + 1;
  else end = header.find_first_of(",}", start);
  return header.substr(start, end - start);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  return with_context(cat("reading '", path, "'"), [&] {
    std::ifstream in(path, std::ios::binary);
    ONYX_CHECK(in, "cannot open the file");
    char magic[8];
    in.read(magic, 8);
    ONYX_CHECK(in && std::memcmp(magic, "\x93NUMPY", 6) == 0, "not a .npy file (bad magic)");
    uint32_t header_len = 0;
    if (magic[6] == 1) {
      uint8_t b[2];
      in.read(reinterpret_cast<char*>(b), 2);
      header_len = b[0] | (b[1] << 8);
    } else {
      uint8_t b[4];
      in.read(reinterpret_cast<char*>(b), 4);
      header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    }
    std::string header(header_len, '\0');
    in.read(header.data(), header_len);
    ONYX_CHECK(in, "truncated header");
    std::string descr = header_value(header, "descr");
    descr = descr.substr(1, descr.size() - 2);
    ONYX_CHECK(header_value(header, "fortran_order") == "False", "Fortran-order arrays are not supported");
    DType dt = DType::kUndefined;
    for (const auto& t : kTypes)
      if (descr == t.descr || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(t.descr).substr(1)))
        dt = t.dtype;
    ONYX_CHECK(dt != DType::kUndefined, "element type '", descr, "' is not supported");
    std::string shape_text = header_value(header, "shape");
    std::vector<int64_t> dims;
    std::stringstream ss(shape_text.substr(1, shape_text.size() - 2));
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t a = item.find_first_not_of(' ');
      if (a == std::string::npos) continue;
      dims.push_back(std::stoll(item.substr(a)));
    }
    Tensor t(dt, Shape(dims));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
    ONYX_CHECK(in.gcount() == static_cast<std::streamsize>(t.bytes()), "holds ", in.gcount(), " data bytes, ",
               t.type_str(), " needs ", t.bytes());
    return t;
  });
}

void write_npy(const std::string& path, const Tensor& src) {
  with_context(cat("writing '", path, "'"), [&] {
    Tensor t = src;
    if (t.dtype() == DType::kBFloat16) {
      Tensor f(DType::kFloat32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.data<BFloat16>()[i]);
      t = f;
    } else if (dtype_is_narrow(t.dtype())) {  // .npy has no narrow types: their values, in float32 (exact)
      Tensor f(DType::kFloat32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.get_as_double(i));
      t = f;
    }
    const char* descr = nullptr;
    for (const auto& e : kTypes)
      if (e.dtype == t.dtype()) descr = e.descr;
    ONYX_CHECK(descr, "element type ", dtype_name(t.dtype()), " cannot be written to .npy");
    std::string shape = "(";
    for (size_t i = 0; i < t.rank(); ++i) shape += std::to_string(t.shape()[i]) + (t.rank() == 1 || i + 1 < t.rank() ? "," : "");
    shape += ")";
    std::string header = cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    ONYX_CHECK(out, "cannot create the file");
    out.write("\x93NUMPY\x01\x00", 8);
    uint16_t len = static_cast<uint16_t>(header.size());
    char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out.write(lb, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
    ONYX_CHECK(out, "write failed");
  });
}

}  // namespace onyx

// A read-only memory mapping of a whole file, unmapped when the last user lets go.
#pragma once

#include <memory>
#include <string>

namespace onyx {

class MappedFile {
 public:
  // Throws onyx::Error naming the path and the system's reason.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  const char* data() const { return static_cast<const char*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace onyx

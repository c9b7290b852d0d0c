#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "onyx/error.h"

namespace onyx {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(cat("cannot open '", path, "': ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    ::close(fd);
    throw Error(cat("'", path, "' is not a regular file", err ? cat(" (", std::strerror(err), ")") : ""));
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    m->data_ = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->data_ == MAP_FAILED) {
      m->data_ = nullptr;
      int err = errno;
      ::close(fd);
      throw Error(cat("cannot map '", path, "': ", std::strerror(err)));
    }
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) munmap(data_, size_);
}

}  // namespace onyx

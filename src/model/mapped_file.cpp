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
  // Only regular files: a FIFO or a device could block the open or the reads forever.
  // Checked before opening, and again on the opened descriptor (the path may change in
  // between); O_NONBLOCK keeps even that open from waiting for a FIFO's writer.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(cat("cannot open '", path, "': ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(cat("'", path, "' is not a regular file"));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(cat("cannot open '", path, "': ", std::strerror(errno)));
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

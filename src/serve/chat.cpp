// Chat requests' prompts: the folder's chat template (genai::ChatTemplate), read once at start.
#include "genai/chat_template.h"
#include "serve/openai.h"

namespace onyx::serve {

struct ChatFormatter::Impl {
  std::unique_ptr<genai::ChatTemplate> tmpl;
  std::string missing;  // why there is none
};

ChatFormatter::ChatFormatter(const std::string& model_dir) : impl_(std::make_unique<Impl>()) {
  try {
    impl_->tmpl = std::make_unique<genai::ChatTemplate>(genai::ChatTemplate::from_folder(model_dir));
  } catch (const Error& e) {
    impl_->missing = e.what();
  }
}

ChatFormatter::~ChatFormatter() = default;

bool ChatFormatter::available() const { return impl_->tmpl != nullptr; }

std::string ChatFormatter::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) const {
  if (!impl_->tmpl)
    throw ApiError(400, cat("this model has no chat template, so it takes /v1/completions only: ", impl_->missing),
                   "messages");
  return genai::apply_chat_template(*impl_->tmpl, messages, true, extra);
}

}  // namespace onyx::serve

#include "fleet/sidecar/user_regex.h"

#include <re2/re2.h>

namespace fleet::sidecar {

Result<std::shared_ptr<const re2::RE2>> CompileUserRegex(std::string_view source) {
  re2::RE2::Options options;
  options.set_encoding(re2::RE2::Options::EncodingLatin1);
  options.set_log_errors(false);  // the error is returned, and said once by the caller
  auto regex = std::make_shared<const re2::RE2>(re2::StringPiece(source.data(), source.size()), options);
  if (!regex->ok()) return Error{regex->error()};
  return regex;
}

}  // namespace fleet::sidecar

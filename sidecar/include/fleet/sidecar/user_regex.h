// The regular expressions a user gives the sidecar (--pattern, --main-process-match) run on RE2,
// compiled as the API compiles a spec's (fleet/api/user_regex.h).
#pragma once

#include "fleet/api/user_regex.h"

namespace fleet::sidecar {

using api::CompileUserRegex;

}  // namespace fleet::sidecar

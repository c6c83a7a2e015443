// Paddle env variables that travel as files (docs/env-contract.md, "Lists too long for the env"),
// for programs that read their env in C++ (fleetrun); the Python env loader
// (runtime/python/sitecustomize.py) reads the same contract for Python:
//   FLEET_ENV_FILES       VAR=FILE,...: each VAR gets the content of FILE
//   FLEET_ENV_FILES_DIR   the directory holding the files (the pod's mounted endpoints ConfigMap)
//   FLEET_ENV_FILES_RUN   the job run the pod belongs to: the directory's file `fleet-run` must hold
//                         it (the kubelet refreshes a mounted ConfigMap a while after it changes)
#pragma once

#include <functional>
#include <string>

#include "fleet/base/result.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {

struct EnvFilesWait {
  double timeout_seconds = 600;       // as the Python loader's
  double poll_seconds = 0.5;
  double report_every_seconds = 30;
  std::function<void(const std::string& line)> report;   // "waiting for ..." lines, when set
};

// The variables FLEET_ENV_FILES names, with the contents of their files once those are all there
// and `fleet-run` holds FLEET_ENV_FILES_RUN (checked before and after reading them); waits for
// that up to `wait.timeout_seconds`. Empty when FLEET_ENV_FILES is unset or empty. Fails with a
// message naming the entry, variable or file on an entry that is not VAR=FILE (both non-empty), a
// missing FLEET_ENV_FILES_DIR or FLEET_ENV_FILES_RUN, a file that is not UTF-8 text, or a timeout.
Result<EnvMap> ReadEnvFiles(const EnvMap& env, const EnvFilesWait& wait = {});

// `env` without the variables FLEET_ENV_FILES names: what a process passes on to the programs it
// executes. An exec could not carry them (which is why they travel as files); FLEET_ENV_FILES and
// its directory stay, so that a Python program loads them again itself.
EnvMap WithoutEnvFileValues(EnvMap env);

}  // namespace fleet

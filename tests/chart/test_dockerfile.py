"""The Dockerfile, read as a builder would (no Docker engine here): its stages and flavors, that it
builds with the scripts CI runs, that its images run as a non-root user and start binaries they
contain, that the binaries it copies are the ones the build produces (the CMake targets' files)
and that each runtime image installs every shared library those binaries link (ldd + dpkg on this
Debian 12 machine, the builder's distribution). The `build` stage is `build-source` (the build
from source) or `build-prebuilt` (the files of a host build, which scripts/images.sh stages): the
latter copies exactly what the runtime images take from the build. Also: the build context
(.dockerignore) keeps what the build needs, and the images' tag agrees with the project's version
everywhere it is written.

Run (ctest does):  FLEET_BUILD_DIR=build FLEET_BINARIES="fleet-operator=PATH;..." /usr/bin/python3 -m unittest -v test_dockerfile
"""

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.environ.get("FLEET_BUILD_DIR", os.path.join(ROOT, "build"))
# CMake target name -> the file the build produces (ctest passes $<TARGET_FILE:...>).
BINARIES = dict(item.split("=", 1) for item in os.environ.get("FLEET_BINARIES", "").split(";") if item) or {
    "fleet-operator": os.path.join(BUILD_DIR, "operator", "fleet-operator"),
    "fleet-sidecar": os.path.join(BUILD_DIR, "sidecar", "fleet-sidecar"),
    "fleetrun": os.path.join(BUILD_DIR, "launcher", "fleetrun"),
    "fleetctl": os.path.join(BUILD_DIR, "cli", "fleetctl"),
    "fleet-ps-server": os.path.join(BUILD_DIR, "runtime", "ps", "fleet-ps-server"),
    "fleet_runtime_python": os.path.join(BUILD_DIR, "runtime", "python",
                                         "fleet_runtime" + sysconfig.get_config_var("EXT_SUFFIX")),
}
NON_ROOT_UID = "65532"
# Which binaries each image ships, by CMake target.
IMAGES = {"operator": ["fleet-operator"], "sidecar": ["fleet-sidecar", "fleet-ps-server"],
          "tools": ["fleetrun", "fleetctl", "fleet_runtime_python"]}


class Instruction:
    def __init__(self, keyword, args, line):
        self.keyword, self.args, self.line = keyword.upper(), args, line

    def words(self):
        return shlex.split(self.args, posix=True)

    def __repr__(self):
        return "%s %s (line %d)" % (self.keyword, self.args, self.line)


class Stage:
    def __init__(self, base, name):
        self.base, self.name, self.instructions = base, name, []

    def all(self, keyword):
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text):
    """(global ARG defaults, [Stage]) - continuations joined, comments and parser directives dropped."""
    logical, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue   # a comment inside a continued instruction
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append((start, buf + line))
        buf = ""
    assert not buf, "the Dockerfile ends inside a continued line"
    global_args, stages = {}, []
    for n, line in logical:
        keyword, _, args = line.strip().partition(" ")
        ins = Instruction(keyword, args.strip(), n)
        if ins.keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", ins.args, re.IGNORECASE)
            assert m, ins
            stages.append(Stage(m.group(1), m.group(2)))
        elif not stages:
            assert ins.keyword == "ARG", "only ARG may come before the first FROM: %r" % ins
            name, _, default = ins.args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(ins)
    return global_args, stages


def expand(text, args):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def apt_packages(stage):
    """The packages a stage's RUN instructions apt-get install (variables left as written)."""
    packages = set()
    for run in stage.all("RUN"):
        for command in re.split(r"&&|;", run.args):
            words = command.split()
            if "apt-get" in words and "install" in words:
                packages.update(w.strip('"') for w in words[words.index("install") + 1:] if not w.startswith("-"))
    return packages


def linked_packages(binary):
    """{library path: its Debian package or None} for the shared libraries `binary` links (ldd, dpkg -S)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = [m.group(1) for m in (re.search(r"=>\s+(/\S+)", line) for line in out.splitlines()) if m]
    # dpkg knows a library by the path its package installed, which may be the /lib or the
    # /usr/lib spelling (merged /usr) or the name behind the symlink.
    candidates = {lib: {lib, os.path.realpath(lib)} for lib in libs}
    for lib in libs:
        for path in list(candidates[lib]):
            for a, b in (("/usr/lib/", "/lib/"), ("/lib/", "/usr/lib/")):
                if path.startswith(a):
                    candidates[lib].add(b + path[len(a):])
    every = sorted(set().union(*candidates.values())) if libs else []
    owners = {}
    if every:
        res = subprocess.run(["dpkg", "-S"] + every, capture_output=True, text=True)
        for line in res.stdout.splitlines():
            package, _, path = line.partition(": ")
            owners[path.strip()] = package.split(":")[0]
    return {lib: next((owners[p] for p in sorted(candidates[lib]) if p in owners), None) for lib in libs}


class TestDockerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            cls.text = f.read()
        cls.args, stages = parse_dockerfile(cls.text)
        cls.stages = {s.name: s for s in stages}
        assert len(cls.stages) == len(stages), "two stages share a name"

    def stage(self, name):
        self.assertIn(name, self.stages)
        return self.stages[name]

    def chain(self, name, flavor="cpu"):
        """The stage and the stages it is built FROM, nearest first."""
        out = []
        args = dict(self.args, FLAVOR=flavor)
        while name in self.stages:
            out.append(self.stages[name])
            name = expand(self.stages[name].base, args)
        return out, name   # the last name is the external base image

    def test_stages_and_flavors(self):
        for name in ("build", "build-source", "build-prebuilt", "operator", "sidecar", "tools", "kube-runtime"):
            self.stage(name)
        self.assertEqual(self.args["FLAVOR"], "cpu")
        self.assertEqual(self.args["DEBIAN"], "debian:12")
        self.assertEqual(self.args["DEBIAN_SLIM"], "debian:12-slim")
        for flavor in ("cpu", "cuda"):
            with self.subTest(flavor=flavor):
                _, base = self.chain("build", flavor)
                self.assertEqual(expand(base, self.args), "debian:12")
                for image in IMAGES:
                    _, base = self.chain(image, flavor)
                    self.assertEqual(expand(base, self.args), "debian:12-slim")
        # The CUDA flavor builds with NCCL required, and its bases bring CUDA and NCCL.
        build_run = " ".join(i.args for i in self.stage("build-source").all("RUN"))
        self.assertIn('-DFLEET_WITH_NCCL=$([ "${FLAVOR}" = cuda ] && echo ON || echo OFF)', build_run)
        self.assertIn("libnccl-dev", apt_packages(self.stage("builder-cuda")))
        self.assertIn("libnccl2", apt_packages(self.stage("runtime-cuda")))
        # The operator and sidecar never depend on the flavor.
        for image in ("operator", "sidecar"):
            self.assertEqual(self.chain(image, "cpu")[1], self.chain(image, "cuda")[1])

    def test_the_build_runs_the_scripts_ci_runs(self):
        with open(os.path.join(ROOT, ".ci", "run")) as f:
            self.assertIn("scripts/test.sh", f.read())
        with open(os.path.join(ROOT, "scripts", "test.sh")) as f:
            self.assertIn("scripts/build.sh", f.read())
        with open(os.path.join(ROOT, "scripts", "build.sh")) as f:
            self.assertIn("scripts/setup.sh", f.read())
        build = self.stage("build-source")
        self.assertEqual([c.words() for c in build.all("COPY")], [[".", "."]])
        (run,) = build.all("RUN")
        self.assertIn("./scripts/build.sh ", run.args)
        self.assertIn("-DFLEET_BUILD_TESTS=OFF", run.args)
        self.assertNotIn("cmake ", run.args, "the build goes through scripts/build.sh, as in CI")

    def copied(self, image):
        """{destination: source} of the COPY --from=build instructions of an image's stages."""
        out = {}
        for stage in self.chain(image)[0]:
            for c in stage.all("COPY"):
                words = c.words()
                if words and words[0] == "--from=build":
                    out[words[-1]] = words[1]
        return out

    def test_images_copy_the_binaries_the_build_produces(self):
        workdir = self.stage("build-source").all("WORKDIR")[-1].args
        strip = " ".join(i.args for i in self.stage("build-source").all("RUN"))
        for image, targets in IMAGES.items():
            with self.subTest(image=image):
                sources = set(self.copied(image).values())
                for target in targets:
                    rel = os.path.relpath(BINARIES[target], BUILD_DIR)
                    self.assertFalse(rel.startswith(".."), "%s is outside the build directory" % BINARIES[target])
                    # Sources may be globs (the Python module's name carries the ABI suffix).
                    path = os.path.join(workdir, "build", rel)
                    self.assertTrue(any(fnmatch.fnmatchcase(path, s) for s in sources), "%s: %s" % (image, target))
                    self.assertTrue(any(fnmatch.fnmatchcase("build/" + rel, w) for w in strip.split()),
                                    "%s is not stripped" % rel)
                    self.assertTrue(os.access(BINARIES[target], os.X_OK), "%s is not built" % BINARIES[target])
        examples = self.copied("tools")
        self.assertEqual(examples.get("/opt/fleetjob/examples"), "/src/examples")

    def test_the_build_is_from_source_or_prebuilt(self):
        # `build` is one of the two, by BUILD (default: source, the full build); it adds nothing,
        # so both give the runtime stages the same paths.
        build = self.stage("build")
        self.assertEqual(build.base, "build-${BUILD}")
        self.assertEqual(build.instructions, [])
        self.assertEqual(self.args["BUILD"], "source")
        self.assertEqual(self.chain("build")[0][1].name, "build-source")
        # build-prebuilt copies, from the context scripts/images.sh stages, exactly the files the
        # runtime images copy from the build: each from the same path relative to /src.
        prebuilt = self.stage("build-prebuilt")
        self.assertEqual(prebuilt.base, "scratch")
        self.assertEqual([i.keyword for i in prebuilt.instructions], ["COPY"] * len(prebuilt.instructions))
        workdir = self.stage("build-source").all("WORKDIR")[-1].args
        provided = set()
        for c in prebuilt.all("COPY"):
            src, dest = c.words()
            self.assertFalse(src.startswith(("/", "--")), c)
            self.assertTrue(src in ("examples", "sdk/python/fleet_metrics.py", "sdk/python/fleet_checkpoint.py")
                            or src.startswith("build/"), c)
            path = os.path.join(workdir, src)
            self.assertTrue(dest == path or (dest.endswith("/") and os.path.dirname(path) + "/" == dest), c)
            provided.add(path)
        needed = set()
        for image in IMAGES:
            needed |= set(self.copied(image).values())
        self.assertEqual(provided, needed)
        # scripts/images.sh stages them from this stage's COPY lines and names both FROM arguments
        # (buildah 1.28 does not take them from the ARG defaults).
        with open(os.path.join(ROOT, "scripts", "images.sh")) as f:
            script = f.read()
        self.assertIn("AS build-prebuilt", script)
        self.assertIn('--build-arg BUILD="$build" --build-arg FLAVOR="$flavor"', script)

    def test_images_run_as_non_root_and_start_what_they_contain(self):
        for image in IMAGES:
            with self.subTest(image=image):
                stage = self.stage(image)
                (user,) = stage.all("USER")
                self.assertEqual(user.args, NON_ROOT_UID + ":" + NON_ROOT_UID)
                self.assertIn(stage.instructions[-1].keyword, ("ENTRYPOINT", "CMD"))
                self.assertLess(stage.instructions.index(user), len(stage.instructions) - 1)
                start = (stage.all("ENTRYPOINT") or stage.all("CMD"))[-1]
                program = yaml.safe_load(start.args)[0]
                paths = set(self.copied(image))
                if "/" not in program:
                    program = "/usr/local/bin/" + program   # tools: on PATH
                self.assertIn(program, paths)
        # The sidecar gets args only from the operator (operator/src/pod_builder.cc): its entrypoint
        # must be the binary.
        self.assertEqual(yaml.safe_load(self.stage("sidecar").all("ENTRYPOINT")[0].args),
                         ["/usr/local/bin/fleet-sidecar"])
        # Nothing runs as root after the build stage, and no image writes to its root filesystem at
        # start: the tools image's home (fleetrun's log/) is the one writable place, owned by 65532.
        self.assertIn("useradd --uid 65532", " ".join(i.args for i in self.stage("tools").all("RUN")))
        self.assertEqual(self.stage("tools").all("WORKDIR")[-1].args, "/home/fleet")

    def test_the_etcd_image_is_debians_etcd_as_non_root(self):
        # The chart's etcd for elastic jobs (etcd.enabled): Debian's package, nothing of ours.
        stage = self.stage("etcd")
        self.assertEqual(expand(self.chain("etcd")[1], self.args), "debian:12-slim")
        self.assertIn("etcd-server", apt_packages(stage))
        (user,) = stage.all("USER")
        self.assertEqual(user.args, NON_ROOT_UID + ":" + NON_ROOT_UID)
        self.assertEqual(yaml.safe_load(stage.all("ENTRYPOINT")[-1].args), ["/usr/bin/etcd"])
        self.assertIn("--target %-8s -t fleetjob/%s:" % ("etcd", "etcd"), self.text)
        with open(os.path.join(ROOT, "scripts", "images.sh")) as f:
            self.assertIn("targets=(operator sidecar tools etcd)", f.read())

    @unittest.skipUnless(shutil.which("ldd") and shutil.which("dpkg"), "needs ldd and dpkg")
    def test_runtime_images_install_every_library_the_binaries_link(self):
        for image, targets in IMAGES.items():
            installed = set()
            for stage in self.chain(image)[0]:
                installed |= apt_packages(stage)
            for target in targets:
                with self.subTest(image=image, binary=target):
                    for lib, package in linked_packages(BINARIES[target]).items():
                        if package is None:
                            # Not from Debian: only CUDA/NCCL (FLEET_WITH_NCCL builds), which the
                            # cuda flavor's base brings.
                            self.assertRegex(lib, r"lib(nccl|cuda|cudart)", "%s links %s, from no package" % (target, lib))
                            continue
                        if package == "libc6":
                            continue   # in every base image
                        self.assertIn(package, installed, "%s links %s (package %s)" % (target, lib, package))

    def test_build_context_keeps_the_sources(self):
        with open(os.path.join(ROOT, ".dockerignore")) as f:
            patterns = [p.strip().lstrip("/") for p in f if p.strip() and not p.startswith("#")]

        def excluded(path):
            parts = path.split("/")
            prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
            return any(fnmatch.fnmatchcase(p, pat.replace("**/", "")) or fnmatch.fnmatchcase(p, pat)
                       for pat in patterns for p in prefixes)
        for path in ("build/CMakeCache.txt", ".git/HEAD", "log/workerlog.0", "examples/__pycache__/x.pyc"):
            self.assertTrue(excluded(path), path)
        tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
        if tracked.returncode != 0:
            self.skipTest("not a git checkout")
        needed = [p for p in tracked.stdout.splitlines() if not p.startswith((".ci/", "docs/", "charts/"))]
        self.assertTrue(needed)
        self.assertEqual([p for p in needed if excluded(p)], [])

    def test_one_version_everywhere(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            version = re.search(r"project\(fleetjob VERSION (\S+)", f.read()).group(1)
        with open(os.path.join(ROOT, "charts", "fleetjob", "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.assertEqual(chart["appVersion"], version)
        self.assertEqual(chart["version"], version)
        with open(os.path.join(ROOT, "operator", "include", "fleet", "operator", "api.h")) as f:
            self.assertIn('kDefaultSidecarImage = "fleetjob/sidecar:%s"' % version, f.read())
        for image in IMAGES:
            self.assertIn("--target %-8s -t fleetjob/%s:%s" % (image, image, version), self.text)
        with open(os.path.join(ROOT, "examples", "k8s", "ps.yaml")) as f:
            ps = yaml.safe_load(f)
        for role in ("server", "worker"):
            (c,) = ps["spec"][role]["template"]["spec"]["containers"]
            self.assertEqual(c["image"], "fleetjob/tools:" + version)
            script = c["command"][-1]
            self.assertTrue(script.startswith("/opt/fleetjob/examples/"))
            self.assertTrue(os.path.isfile(os.path.join(ROOT, "examples", script[len("/opt/fleetjob/examples/"):])))


if __name__ == "__main__":
    unittest.main()
